"""langgraph-checkpoint-postgres's own tests (``test_sync``, ``test_async``, ``test_store``, ``test_async_store``)
on our PostgresCheckpointer and PostgresStore (swapped in by ``lg_postgres_plugin``), each upstream test on a
database of its own. Every applicable test must pass: the plugin skips the tests of the peer's internals and
expects the deliberate differences (docs/langgraph.md) to fail, so any failure here is a regression.

The tests that need embeddings run on the test server (exact search when it lacks pgvector) and, when it
lacks pgvector, once more on the embedded server, which has it (HNSW indexes).
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from sdist import Outcome, run_pytest, sdist

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: Two runs side by side (each on a database of its own): most of their time is sleeping (the TTL tests)
#: or waiting on the server, so the 2-core CI machine runs both at once.
GROUPS = [["tests/test_sync.py", "tests/test_async.py", "tests/test_store.py"], ["tests/test_async_store.py"]]
STORE_FILES = ["tests/test_store.py", "tests/test_async_store.py"]


def _has_pgvector(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone() is not None


def _run(root: Path, dsn: str, files: list[str], only: str = "") -> Outcome:
    """Upstream's ``files`` in a database made for this run on ``dsn``'s server."""
    database = f"lgup_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    try:
        params = {**conninfo_to_dict(dsn), "dbname": database}
        env = {"PGAGENTSTATE_UPSTREAM_DSN": make_conninfo(**params), "PYTHONPATH": str(HERE),
               "PGAGENTSTATE_UPSTREAM_ONLY": only}
        return run_pytest(["-p", "lg_postgres_plugin", *files], cwd=root, env=env, timeout=1800)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))


def test_checkpoint_postgres_suite(dsn: str) -> None:
    root = sdist("langgraph-checkpoint-postgres", "3.2.0")
    runs = [(dsn, files, "") for files in GROUPS]
    if not _has_pgvector(dsn):
        from pgagentstate.embedded import embedded_dsn

        runs.append((embedded_dsn(ROOT / ".pgagentstate" / "test-pg"), STORE_FILES, "vector"))
    with ThreadPoolExecutor(len(runs)) as pool:
        outcomes = list(pool.map(lambda run: _run(root, *run), runs))
    for (server, files, only), out in zip(runs, outcomes, strict=True):
        print(f"upstream {files} ({only or 'all'}, port {conninfo_to_dict(server).get('port')}): {out.passed} passed, "
              f"{out.failed} failed, {out.errors} errors, {out.skipped} skipped or expected to fail")
        assert out.passed > 0, out.output
        assert out.failures == [], "\n".join(out.failures) + "\n" + out.output[-8000:]
