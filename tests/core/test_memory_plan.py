"""A memory search by words is an index lookup in every plan the server may pick.

At 100,000 memories of one user a search took 521 ms on PG15: the full-text condition stood behind
``%(tsq)s IS NULL OR ...``, so a prepared statement's generic plan (psycopg prepares a statement after 5
executions; the server may then plan it once for any values) could not use the GIN index and tested every
memory of the namespace. These tests look at plan shapes, never at timings: the figures are in
docs/memory.md.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg import sql

from pgagentstate import StateStore, textsearch
from pgagentstate.codec import DEFAULT_LIMITS
from pgagentstate.ops import memory as memory_ops
from pgagentstate.ops.base import Ctx, Tx
from pgagentstate.ops.memory import pattern_params
from pgagentstate.ops.memory_rows import word_params
from pgagentstate.queries import _raw, query


def generic_plan(dsn: str, schema: str, name: str, params: dict[str, Any]) -> str:
    """EXPLAIN of statement ``name`` planned for any values (a generic plan), on a table whose only index
    is the full-text one and with sequential scans off: the index is in the plan only if some condition of
    the statement is one it can serve, whatever the values."""
    names: list[str] = []

    def dollar(m: re.Match[bytes]) -> bytes:
        if m.group(1).decode() not in names:
            names.append(m.group(1).decode())
        return f"${names.index(m.group(1).decode()) + 1}".encode()

    text = re.sub(rb"%\((\w+)\)s", dollar, query(name, schema))
    table = sql.Identifier(schema, "memories")
    with psycopg.connect(dsn) as conn:  # one transaction, rolled back: the indexes come back
        conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT memories_pkey CASCADE").format(table))
        for index in ("memories_user_idx", "memories_expires_idx"):
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, index)))
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.execute(b"PREPARE plan_probe AS " + text)
        row = conn.execute(
            "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = 'plan_probe'"
        ).fetchone()
        assert row is not None
        cur = psycopg.ClientCursor(conn)
        cur.execute(
            "EXPLAIN EXECUTE plan_probe(" + ", ".join(f"%s::{t}" for t in row[0]) + ")",
            [{"tenant": "default", **params}[n] for n in names],
        )
        plan = "\n".join(r[0] for r in cur.fetchall())
        conn.rollback()
    return plan


def search_params(prefix: tuple[str, ...], query: str) -> dict[str, Any]:
    return {
        **pattern_params(prefix, None), **word_params(textsearch.query_words(query)),
        "user_id": "u1", "filter": None, "limit": 10, "offset": 0, "refresh": False,
    }


def test_a_search_by_words_can_use_the_full_text_index_in_a_generic_plan(
    store: StateStore, dsn: str, schema: str
) -> None:
    store.put_memories([(("adk", "app", "u1", "memories"), f"m{i}", {"text": f"note {i} parcel"})
                        for i in range(20)], user_id="u1")
    plan = generic_plan(dsn, schema, "memory_search", search_params(("adk", "app", "u1"), "parcel broken"))
    assert "Index Scan on memories_search_idx" in plan, plan  # (the TTL refresh's join, unindexed here, scans)
    # The hybrid search's word scan (bounded: see memory_search_hybrid) keeps the condition standing alone.
    hybrid = _raw()["memory_search_hybrid"]
    assert "WHERE m.search @@ %(tsq)s::tsquery\n" in hybrid and "IS NULL OR m.search" not in hybrid


def test_a_search_by_words_is_planned_with_its_values() -> None:
    """Which index is right depends on the values (a namespace of 100 items or 100,000, a rare or a common
    word): the statement is never prepared, so the server never falls back to a generic plan."""
    ctx = Ctx(tenant="default", limits=DEFAULT_LIMITS)
    op = memory_ops.search(ctx, ("adk", "app", "u1"), query="parcel", filter=None, user_id="u1", limit=10,
                           offset=0, refresh_ttl=False, mode="text")
    tx = next(op)
    assert isinstance(tx, Tx) and [(s.name, s.custom_plan) for s in tx.stmts] == [("memory_search", True)]
