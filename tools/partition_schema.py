"""Hash-partition the big tables of a migrated pgagentstate schema, as docs/scaling.md describes.

Each table named in ``tables`` becomes ``PARTITION BY HASH (<its key>)`` with ``partitions`` partitions
(``<table>_h0`` ...), keeping its columns, defaults, checks, primary key, unique constraints and indexes under
their own names, its foreign keys (both ways), row-level security and policies, and its rows. No statement of the
store changes: every one of them filters on the partition key, so Postgres prunes to one partition at plan time
(tests/core/test_partitioning.py checks that with EXPLAIN).

Everything runs in one transaction under the migrations' advisory lock; the rows are copied, so on a large
database run it in a maintenance window. A table already partitioned is left as it is. Grants made on a table
before the conversion are not carried over (grant again, e.g. ``GRANT ... ON ALL TABLES IN SCHEMA``).

    python tools/partition_schema.py "$PGAGENTSTATE_DSN" pgagentstate --partitions 16
    python tools/partition_schema.py "$PGAGENTSTATE_DSN" pgagentstate --layout conversation

Tables that cannot be partitioned so: ``memories`` (its ``seq`` is an identity column, which a partitioned table
may have only from PostgreSQL 17 on; its distribution column would be ``ns_path``, whose prefix scans touch every
partition anyway), ``memory_vectors`` (follows ``memories``) and ``migrations`` (tiny, global).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

CONVERSATION = ("tenant_id", "conversation_id")

#: The tables that grow with every message, state version and checkpoint (docs/scaling.md, section 3), each
#: with the columns it is hashed on: the conversation, or for state changes its subject (the conversation id
#: of a conversation's documents, the user id of a user's).
BIG_TABLES: dict[str, tuple[str, ...]] = {
    "events": CONVERSATION,
    "state_changes": ("tenant_id", "subject"),
    "snapshots": CONVERSATION,
    "snapshot_blobs": CONVERSATION,
    "snapshot_chunks": CONVERSATION,
    "snapshot_writes": CONVERSATION,
}

#: docs/scaling.md's "distribute by conversation" layout (section 4), every table on its distribution column:
#: a statement that prunes to one partition here is a single-shard (router) statement on Citus.
CONVERSATION_LAYOUT: dict[str, tuple[str, ...]] = {
    "conversations": ("tenant_id", "id"),
    **BIG_TABLES,
    "state_documents": ("tenant_id", "subject"),
    "workflow_steps": CONVERSATION,
    "scratchpad": CONVERSATION,
    "snapshot_tombstones": CONVERSATION,
    "distill_watermarks": CONVERSATION,
    "idempotency_keys": ("tenant_id", "key"),
    "archived_conversations": ("tenant_id", "id"),
}

LAYOUTS = {"big": BIG_TABLES, "conversation": CONVERSATION_LAYOUT}


def _ident(schema: str, name: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))


def _rows(conn: psycopg.Connection[Any], query: str, *params: Any) -> list[tuple[Any, ...]]:
    return conn.execute(query, params).fetchall()  # type: ignore[arg-type]  # catalog queries, literal text


def partition(
    conn: psycopg.Connection[Any],
    schema: str,
    tables: Mapping[str, Sequence[str]] = BIG_TABLES,
    partitions: int = 16,
) -> list[str]:
    """Hash-partition ``tables`` of ``schema`` on ``conn`` (one transaction); returns the tables converted."""
    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    done: list[str] = []
    with conn.transaction():
        # Fully qualified names in every definition read back from the catalog (pg_get_*def qualify a name
        # that is not visible on the search path).
        conn.execute("SET LOCAL search_path = pg_catalog")
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('pgagentstate.migrate:' || %s, 0))", (schema,))
        kinds = dict(_rows(conn, "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n "
                                 "ON n.oid = c.relnamespace WHERE n.nspname = %s", schema))  # fmt: skip
        todo = [t for t in tables if kinds.get(t) == "r"]
        missing = [t for t in tables if t not in kinds]
        if missing:
            raise ValueError(f"no table {missing} in schema {schema!r} (run setup() first)")
        # Foreign keys from or to a converted table are dropped first and added again at the end: the
        # referenced table is replaced, and a key cannot point at a table being dropped.
        fks = _rows(
            conn,
            "SELECT con.conrelid::regclass::text, con.conname, pg_get_constraintdef(con.oid) FROM pg_constraint con "
            "JOIN pg_class a ON a.oid = con.conrelid LEFT JOIN pg_class b ON b.oid = con.confrelid "
            "JOIN pg_namespace n ON n.oid = a.relnamespace "
            "WHERE con.contype = 'f' AND n.nspname = %s AND (a.relname = ANY(%s) OR b.relname = ANY(%s)) "
            "ORDER BY 1, 2",
            schema, todo, todo,
        )  # fmt: skip
        for table, name, _ in fks:
            conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(sql.SQL(table), sql.Identifier(name)))
        for table in todo:
            _convert(conn, schema, table, tables[table], partitions)
            done.append(table)
        for table, name, definition in fks:
            conn.execute(sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {}").format(
                sql.SQL(table), sql.Identifier(name), sql.SQL(definition)))  # fmt: skip
    return done


def _convert(conn: psycopg.Connection[Any], schema: str, table: str, key: Sequence[str], partitions: int) -> None:
    old = _ident(schema, table)
    oid = _rows(conn, "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                      "WHERE n.nspname = %s AND c.relname = %s", schema, table)[0][0]  # fmt: skip
    constraints = _rows(
        conn,
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s AND contype IN ('p', 'u') "
        "ORDER BY contype, conname",
        oid,
    )
    indexes = [r[0] for r in _rows(
        conn,
        "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i WHERE i.indrelid = %s AND NOT EXISTS "
        "(SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid) ORDER BY 1",
        oid,
    )]  # fmt: skip
    rls, force = _rows(conn, "SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = %s", oid)[0]
    policies = _rows(
        conn,
        "SELECT polname, polpermissive, polcmd, "
        "ARRAY(SELECT CASE WHEN r = 0 THEN 'public' ELSE quote_ident(pg_get_userbyid(r)) END "
        "      FROM unnest(polroles) r), "
        "pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid) FROM pg_policy WHERE polrelid = %s "
        "ORDER BY polname",
        oid,
    )
    new_name = f"{table}__partitioned"
    new = _ident(schema, new_name)
    conn.execute(sql.SQL(
        "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS "
        "INCLUDING GENERATED INCLUDING IDENTITY) PARTITION BY HASH ({})"
    ).format(new, old, sql.SQL(", ").join(map(sql.Identifier, key))))  # fmt: skip
    parts = [_ident(schema, f"{table}_h{i}") for i in range(partitions)]
    for i, part in enumerate(parts):
        conn.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES WITH (MODULUS {}, REMAINDER {})").format(
            part, new, sql.Literal(partitions), sql.Literal(i)))  # fmt: skip
    conn.execute(sql.SQL("INSERT INTO {} SELECT * FROM {}").format(new, old))
    conn.execute(sql.SQL("DROP TABLE {}").format(old))
    conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(new, sql.Identifier(table)))
    for name, definition in constraints:
        conn.execute(sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {}").format(
            old, sql.Identifier(name), sql.SQL(definition)))  # fmt: skip
    for definition in indexes:
        conn.execute(sql.SQL(definition))
    # Row-level security on the parent binds every query through it; on each partition too, so that a role
    # given the schema's tables cannot read another tenant's rows by naming a partition directly.
    for target in (old, *parts):
        if rls:
            conn.execute(sql.SQL("ALTER TABLE {} ENABLE ROW LEVEL SECURITY").format(target))
        if force:
            conn.execute(sql.SQL("ALTER TABLE {} FORCE ROW LEVEL SECURITY").format(target))
        for name, permissive, cmd, roles, qual, check in policies:
            command = {"r": "SELECT", "a": "INSERT", "w": "UPDATE", "d": "DELETE", "*": "ALL"}[cmd]
            text = "CREATE POLICY {} ON {} AS {} FOR {} TO {}".format(
                sql.Identifier(name).as_string(conn), target.as_string(conn),
                "PERMISSIVE" if permissive else "RESTRICTIVE", command, ", ".join(roles),
            )  # fmt: skip
            if qual is not None:
                text += f" USING ({qual})"
            if check is not None:
                text += f" WITH CHECK ({check})"
            conn.execute(sql.SQL(text))  # type: ignore[arg-type]  # built from the catalog's own definitions


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dsn")
    parser.add_argument("schema", nargs="?", default="pgagentstate")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument(
        "--layout", choices=sorted(LAYOUTS), default="big",
        help="big: the tables that grow (default); conversation: every table, as for Citus",
    )  # fmt: skip
    args = parser.parse_args(argv)
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        done = partition(conn, args.schema, LAYOUTS[args.layout], args.partitions)
    print(f"partitioned {len(done)} tables into {args.partitions} partitions each: {', '.join(done) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
