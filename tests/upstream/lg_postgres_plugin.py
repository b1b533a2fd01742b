"""pytest plugin (``-p lg_postgres_plugin``) that runs langgraph-checkpoint-postgres's own tests on our classes.

Loaded before upstream's tests are collected, it replaces ``PostgresSaver``, ``ShallowPostgresSaver`` and
their async twins with :class:`~pgagentstate.langgraph.PostgresCheckpointer`, and ``PostgresStore`` /
``AsyncPostgresStore`` with :class:`~pgagentstate.langgraph.PostgresStore`, so the tests' own
``from langgraph... import PostgresSaver`` get ours. Upstream's fixtures create a database per test on the
server named by ``$PGAGENTSTATE_UPSTREAM_DSN`` (a database made for the run; its connection parameters
become libpq's ``PG*`` variables, so that upstream's ``URI + database`` concatenation works for TCP and
Unix-socket servers alike). Our classes use their own schema (``pgagentstate``) in each of those databases.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, ClassVar

import langgraph.checkpoint.postgres as saver_module
import langgraph.checkpoint.postgres.aio as saver_aio_module
import langgraph.store.postgres as store_module
import langgraph.store.postgres.aio as store_aio_module
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from pgagentstate.langgraph import PostgresCheckpointer, PostgresStore

_PARAMS = conninfo_to_dict(os.environ["PGAGENTSTATE_UPSTREAM_DSN"])
for _key, _var in (("host", "PGHOST"), ("port", "PGPORT"), ("user", "PGUSER"), ("password", "PGPASSWORD")):
    if _PARAMS.get(_key):
        os.environ[_var] = str(_PARAMS[_key])
_DATABASE = str(_PARAMS["dbname"])


class _Cursor:
    """``store._cursor()``, sync or async: upstream's fixtures run a statement of their own on the database
    (``DROP TABLE IF EXISTS store_migrations``, harmless here). A test-only shim, not part of our API."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    @contextmanager
    def _sync(self) -> Iterator[psycopg.Cursor[Any]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn, conn.cursor(row_factory=dict_row) as cur:
            yield cur

    @asynccontextmanager
    async def _async(self) -> AsyncIterator[psycopg.AsyncCursor[Any]]:
        async with (
            await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn,
            conn.cursor(row_factory=dict_row) as cur,
        ):
            yield cur

    def __enter__(self) -> psycopg.Cursor[Any]:
        self._cm = self._sync()
        return self._cm.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(*exc)

    async def __aenter__(self) -> psycopg.AsyncCursor[Any]:
        self._acm = self._async()
        return await self._acm.__aenter__()

    async def __aexit__(self, *exc: Any) -> None:
        await self._acm.__aexit__(*exc)


class UpstreamStore(PostgresStore):
    """Our store, plus what upstream's store fixtures touch: ``_cursor()``, and ``MIGRATIONS``, a list they
    rewrite before ``setup()`` (ours are files in the package; the list is not used)."""

    MIGRATIONS: ClassVar[list[str]] = []

    def _cursor(self) -> _Cursor:
        return _Cursor(self._stores.dsn or "")


saver_module.PostgresSaver = PostgresCheckpointer  # type: ignore[misc, assignment]
saver_module.ShallowPostgresSaver = PostgresCheckpointer  # type: ignore[misc, assignment]
saver_aio_module.AsyncPostgresSaver = PostgresCheckpointer  # type: ignore[misc, assignment]
saver_aio_module.AsyncShallowPostgresSaver = PostgresCheckpointer  # type: ignore[misc, assignment]
store_module.PostgresStore = UpstreamStore  # type: ignore[misc, assignment]
store_module.AsyncPostgresStore = UpstreamStore  # type: ignore[misc, assignment]
store_aio_module.AsyncPostgresStore = UpstreamStore  # type: ignore[misc, assignment]


def pytest_plugin_registered(plugin: object) -> None:
    """Point upstream's conftest at our server (its tests import these constants from it)."""
    if getattr(plugin, "__name__", "") == "tests.conftest":
        plugin.DEFAULT_POSTGRES_URI = "postgresql:///"  # type: ignore[attr-defined]
        plugin.DEFAULT_URI = f"postgresql:///{_DATABASE}"  # type: ignore[attr-defined]


def _has_pgvector() -> bool:
    with psycopg.connect(f"dbname={_DATABASE}") as conn:
        return conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone() is not None


#: Tests of the peer's internals, not of behaviour: skipped, with the reason.
INTERNALS = {
    "test_nonnull_migrations": "checks the peer's list of migration statements (ours are files)",
    "test_get_checkpoint_no_channel_values": "patches the peer's private _load_checkpoint_tuple",
    "test_escape_like_literal": "tests a private helper of the peer's SQL",
    "test_namespace_match_pattern": "tests a private helper of the peer's SQL",
    "test_abatch_uses_single_pool_checkout": "counts checkouts through the peer's private _ainternal module",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    vector = _has_pgvector()
    no_vector = pytest.mark.skip(reason="needs pgvector, which this server lacks (the embedded server has it)")
    for item in items:
        name = getattr(item, "originalname", item.name)
        if name in INTERNALS:
            item.add_marker(pytest.mark.skip(reason=INTERNALS[name]))
        elif not vector and "fake_embeddings" in getattr(item, "fixturenames", ()):
            item.add_marker(no_vector)
