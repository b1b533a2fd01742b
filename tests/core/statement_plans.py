"""What the store's statements touch, read from their plans: the tests of the partitioned layout
(test_partitioning.py) capture every statement a workload sends and ``EXPLAIN`` each one with its parameters.

A hash partition of ``(tenant_id, conversation_id)`` is pruned at plan time only when the statement filters on
both columns with equality, so "scans one partition" is the semantic form of "filters on the distribution key";
no reading of SQL text is involved.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from pgagentstate import StateStore
from pgagentstate.embedding import Float8Array
from pgagentstate.ops.base import Stmt
from pgagentstate.queries import query


@dataclass(frozen=True)
class Sent:
    name: str
    params: dict[str, Any]
    subs: tuple[tuple[str, str], ...]


@contextmanager
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Sent]]:
    """Every named statement any :class:`StateStore` sends inside the block, with its parameters (the driver's
    ``_send`` is where each one leaves for the server; migration scripts have no name and are not recorded)."""
    seen: list[Sent] = []
    original = StateStore._send

    def send(self: StateStore, conn: Any, stmt: Stmt, cur: Any = None) -> Any:
        if stmt.script is None:
            seen.append(Sent(stmt.name, {"tenant": self.tenant, **stmt.params}, stmt.subs))
        return original(self, conn, stmt, cur)

    with monkeypatch.context() as m:
        m.setattr(StateStore, "_send", send)
        yield seen


def distinct(sent: list[Sent], per_name: int = 3) -> list[Sent]:
    """At most ``per_name`` parameter sets per statement (a workload repeats its hot statements)."""
    out: list[Sent] = []
    keys: set[str] = set()
    count: dict[str, int] = {}
    for s in sent:
        key = f"{s.name}:{s.params!r}"
        if key in keys or count.get(s.name, 0) >= per_name:
            continue
        keys.add(key)
        count[s.name] = count.get(s.name, 0) + 1
        out.append(s)
    return out


def partitions_of(conn: psycopg.Connection[Any], schema: str) -> dict[str, str]:
    """Partition name -> its partitioned table, in ``schema``."""
    rows = conn.execute(
        "SELECT c.relname, p.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace n ON n.oid = p.relnamespace "
        "WHERE n.nspname = %s AND p.relkind = 'p'",
        (schema,),
    ).fetchall()
    return {child: parent for child, parent in rows}


@dataclass
class Scan:
    relation: str
    node: str  # "Seq Scan", "Index Scan", "ModifyTable", ...
    conditions: str  # the node's index condition, filter and recheck condition, joined


def plan(conn: psycopg.Connection[Any], schema: str, sent: Sent, *, analyze: bool = False) -> dict[str, Any]:
    """The statement's plan; ``analyze`` runs it (inside the caller's transaction) and adds actual rows."""
    explain = b"EXPLAIN (ANALYZE, FORMAT JSON) " if analyze else b"EXPLAIN (FORMAT JSON) "
    text = explain + query(sent.name, schema, sent.subs)
    row = conn.execute(text, sent.params, prepare=False).fetchone()
    assert row is not None
    return row[0][0]["Plan"]  # type: ignore[no-any-return]


def generic_plan(
    conn: psycopg.Connection[Any], schema: str, sent: Sent, *, then: Callable[[], None] | None = None
) -> dict[str, Any]:
    """The statement's plan as a prepared statement's generic plan (what the store runs after a few calls),
    run with ``sent``'s parameters (inside the caller's transaction) and with actual rows. ``then`` runs
    between planning and running: a connection keeps the generic plan it made while the tables were small."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)[sb]", number, query(sent.name, schema, sent.subs).decode())
    conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    conn.execute(f"PREPARE generic_plan_probe AS {text}".encode(), prepare=False)
    try:
        types = conn.execute(
            "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = 'generic_plan_probe'"
        ).fetchone()
        assert types is not None
        conn.execute(b"EXPLAIN EXECUTE generic_plan_probe(" + b", ".join([b"NULL"] * len(types[0])) + b")")
        if then is not None:
            then()
        args = ", ".join(f"%s::{t}" for t in types[0])  # an empty list or a None has no type of its own
        # Arguments as literals: a utility statement's own parameters would reach EXECUTE without types.
        execute = psycopg.ClientCursor(conn).mogrify(
            f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE generic_plan_probe({args})",
            [_literal(sent.params[n]) for n in names],
        )
        row = conn.execute(execute.encode(), prepare=False).fetchone()
    finally:
        conn.execute("DEALLOCATE generic_plan_probe")
    assert row is not None
    return row[0][0]["Plan"]  # type: ignore[no-any-return]


def _literal(value: Any) -> Any:
    """A parameter as ``mogrify`` can write it (the binary-only ``Float8Array`` as a list of floats)."""
    if isinstance(value, Float8Array):  # its wire layout: a 20-byte header, then (length, value) per element
        n = struct.unpack_from(">i", value.data, 12)[0]
        return list(struct.unpack_from(">" + "id" * n, value.data, 20)[1::2])
    return value


def rows_read(plan: dict[str, Any], table: str | None = None, *, deletes: bool = True) -> int:
    """Rows the plan's nodes produced or filtered out; with ``table``, only its scans' (not a write's);
    without ``deletes``, not what the scans under a ``DELETE`` read."""
    if not deletes and plan.get("Node Type") == "ModifyTable" and plan.get("Operation") == "Delete":
        return 0
    own = 0
    if table is None or (plan.get("Relation Name") == table and plan.get("Node Type") != "ModifyTable"):
        own = int(plan.get("Actual Rows", 0)) * int(plan.get("Actual Loops", 1))
        own += int(plan.get("Rows Removed by Join Filter", 0)) + int(plan.get("Rows Removed by Filter", 0))
    return own + sum(rows_read(p, table, deletes=deletes) for p in plan.get("Plans", []))


def scans(node: Any) -> list[Scan]:
    """Every node of a plan that reads or writes a relation."""
    out: list[Scan] = []
    if isinstance(node, dict):
        if "Relation Name" in node:
            conds = " ".join(str(node.get(k, "")) for k in ("Index Cond", "Filter", "Recheck Cond", "TID Cond"))
            out.append(Scan(node["Relation Name"], str(node.get("Node Type", "")), conds))
        for value in node.values():
            out += scans(value)
    elif isinstance(node, list):
        for value in node:
            out += scans(value)
    return out


def fan_out(found: list[Scan], parents: dict[str, str]) -> dict[str, list[str]]:
    """Partitioned table -> the partitions the plan reads, for each table read in more than one."""
    touched: dict[str, set[str]] = {}
    for s in found:
        if s.relation in parents:
            touched.setdefault(parents[s.relation], set()).add(s.relation)
    return {parent: sorted(parts) for parent, parts in touched.items() if len(parts) > 1}


def one_partition(found: list[Scan], parents: dict[str, str]) -> dict[str, str]:
    """Partitioned table -> the one partition the plan reads, for each table read in exactly one."""
    touched: dict[str, set[str]] = {}
    for s in found:
        if s.relation in parents:
            touched.setdefault(parents[s.relation], set()).add(s.relation)
    return {parent: next(iter(parts)) for parent, parts in touched.items() if len(parts) == 1}
