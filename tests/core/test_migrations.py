"""Migrations: ordered, locked, recorded — and together equal to the canonical schema file."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import psycopg
import pytest

from pgagentstate import SchemaError, StateStore
from pgagentstate.ops.migrations import canonical_schema, migrations
from pgagentstate.queries import with_schema

from ..conftest import drop_schema, new_schema_name

CATALOG = {
    "columns": """
        SELECT table_name, column_name, data_type, is_nullable, column_default, collation_name,
               generation_expression, ordinal_position
        FROM information_schema.columns WHERE table_schema = %(s)s AND table_name <> 'migrations'""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(c.oid)
        FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
        WHERE n.nspname = %(s)s AND conrelid::regclass::text NOT LIKE '%%migrations'""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = %(s)s AND tablename <> 'migrations'""",
    "policies": "SELECT tablename, policyname, cmd, qual, with_check FROM pg_policies WHERE schemaname = %(s)s",
    "rls": """
        SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(s)s AND relkind = 'r'
          AND relname <> 'migrations'""",
    "functions": """
        SELECT proname, pg_get_function_arguments(p.oid), prosrc FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %(s)s""",
}


def describe(dsn: str, schema: str) -> dict[str, list[Any]]:
    with psycopg.connect(dsn) as conn:
        out = {}
        for name, q in CATALOG.items():
            rows = conn.execute(q, {"s": schema}).fetchall()
            out[name] = sorted(tuple(str(v).replace(schema, "<schema>") for v in row) for row in rows)
        return out


def test_migrating_from_empty_equals_the_canonical_schema(dsn: str) -> None:
    # A schema of its own, not the `schema` fixture (partitioned under PGAGENTSTATE_TEST_PARTITIONED).
    canonical, schema = new_schema_name(), new_schema_name()
    try:
        with StateStore(dsn, schema=schema, min_size=1, max_size=1) as store:
            store.setup()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{canonical}"')
            conn.execute(with_schema(canonical_schema(), canonical))
        migrated, expected = describe(dsn, schema), describe(dsn, canonical)
        assert migrated["columns"], "nothing was described"
        assert migrated == expected
    finally:
        drop_schema(dsn, canonical)
        drop_schema(dsn, schema)


def test_setup_is_idempotent_and_recorded(store: StateStore) -> None:
    assert store.setup() == []
    applied, pending = store.migration_status()
    assert applied == [m.version for m in migrations()] and pending == []


def test_status_of_an_empty_schema(dsn: str) -> None:
    with StateStore(dsn, schema=new_schema_name()) as store:
        applied, pending = store.migration_status()
        assert applied == [] and pending == [m.version for m in migrations()]
        with pytest.raises(SchemaError):
            store.get_conversation("c1")


@pytest.mark.slow
def test_four_processes_setting_up_at_once_end_with_one_schema(dsn: str) -> None:
    schema = new_schema_name()
    code = ("import sys; from pgagentstate import StateStore\n"
            "with StateStore(sys.argv[1], schema=sys.argv[2]) as s: print(s.setup())")
    try:
        procs = [subprocess.Popen([sys.executable, "-c", code, dsn, schema], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
        results = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, [err for _, err in results]
        applied = sorted(out.strip() for out, _ in results)
        everything = str([m.version for m in migrations()])
        assert applied == sorted(["[]", "[]", "[]", everything])  # exactly one process applied them
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(f'SELECT version FROM "{schema}".migrations').fetchall()
        assert [r[0] for r in rows] == [m.version for m in migrations()]
    finally:
        drop_schema(dsn, schema)
