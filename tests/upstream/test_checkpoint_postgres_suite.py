"""langgraph-checkpoint-postgres's own tests (``test_sync``, ``test_async``, ``test_store``, ``test_async_store``)
on our PostgresCheckpointer and PostgresStore (swapped in by ``lg_postgres_plugin``), each upstream test on a
database of its own. All pass except the deliberate differences below (also listed in docs/langgraph.md).
The pgvector tests run where the server has pgvector (the embedded one) and are skipped elsewhere."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from sdist import run_pytest, sdist

HERE = Path(__file__).resolve().parent
FILES = ["tests/test_sync.py", "tests/test_async.py", "tests/test_store.py", "tests/test_async_store.py"]

#: Upstream tests that fail on purpose, by the reason they do.
DIFFERENCES: dict[str, str] = {}


def test_checkpoint_postgres_suite(dsn: str) -> None:
    root = sdist("langgraph-checkpoint-postgres", "3.2.0")
    database = f"lgup_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    try:
        params = {**conninfo_to_dict(dsn), "dbname": database}
        out = run_pytest(
            ["-p", "lg_postgres_plugin", *FILES],
            cwd=root,
            env={"PGAGENTSTATE_UPSTREAM_DSN": make_conninfo(**params), "PYTHONPATH": str(HERE)},
            timeout=1800,
        )
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
    print(f"upstream: {out.passed} passed, {out.failed} failed, {out.errors} errors, {out.skipped} skipped")
    assert out.passed > 0, out.output
    unexpected = sorted(set(out.failures) - set(DIFFERENCES))
    assert unexpected == [], "\n".join(unexpected) + "\n" + out.output[-8000:]
