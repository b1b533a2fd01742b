"""pytest plugin (``-p lg_postgres_plugin``) that runs langgraph-checkpoint-postgres's own tests on our classes.

Loaded before upstream's tests are collected, it replaces ``PostgresSaver``, ``ShallowPostgresSaver`` and
their async twins with :class:`~pgagentstate.langgraph.PostgresCheckpointer`, and ``PostgresStore`` /
``AsyncPostgresStore`` with :class:`~pgagentstate.langgraph.PostgresStore`, so the tests' own
``from langgraph... import PostgresSaver`` get ours. Upstream's fixtures create a database per test on the
server named by ``$PGAGENTSTATE_UPSTREAM_DSN`` (a database made for the run; its connection parameters
become libpq's ``PG*`` variables, so that upstream's ``URI + database`` concatenation works for TCP and
Unix-socket servers alike). Our classes use their own schema (``pgagentstate``) in each of those databases.

Those databases are recycled rather than created and dropped (see "test databases" below), which was
most of the run's time. They come from a template that holds our migrated
schema, so the tests' ``setup()`` calls find every migration applied (``tests/core`` tests migrations).

What is not run, and why, is listed below: ``INTERNALS`` (tests of the peer's private helpers or tables:
skipped), ``SAME_AS_DEFAULT`` (store fixture variants that build the same store of ours: deselected),
``DIFFERENCES`` (deliberate differences, also in docs/langgraph.md: strict expected failures,
so one that starts passing is reported). ``$PGAGENTSTATE_UPSTREAM_ONLY`` = ``vector`` / ``novector``
selects the tests that need embeddings (pgvector's) or the others.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, ClassVar, LiteralString, cast

import langgraph.checkpoint.postgres as saver_module
import langgraph.checkpoint.postgres.aio as saver_aio_module
import langgraph.store.postgres as store_module
import langgraph.store.postgres.aio as store_aio_module
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from pgagentstate import StateStore
from pgagentstate.langgraph import PostgresCheckpointer, PostgresStore

_PARAMS = conninfo_to_dict(os.environ["PGAGENTSTATE_UPSTREAM_DSN"])
for _key, _var in (("host", "PGHOST"), ("port", "PGPORT"), ("user", "PGUSER"), ("password", "PGPASSWORD")):
    if _PARAMS.get(_key):
        os.environ[_var] = str(_PARAMS[_key])
_DATABASE = str(_PARAMS["dbname"])
_TEMPLATE = f"{_DATABASE}_tpl"
_ONLY = os.environ.get("PGAGENTSTATE_UPSTREAM_ONLY", "")

#: Tests of the peer's internals, not of behaviour: skipped (not applicable), with the reason.
INTERNALS = {
    "test_nonnull_migrations": "checks the peer's list of migration statements (ours are files)",
    "test_get_checkpoint_no_channel_values": "patches the peer's private _load_checkpoint_tuple",
    "test_escape_like_literal": "tests a private helper of the peer's SQL",
    "test_namespace_match_pattern": "tests a private helper of the peer's SQL",
    "test_abatch_uses_single_pool_checkout": "counts checkouts through the peer's private _ainternal module",
    "test_omit_expired_filters_read_paths": "backdates rows of the peer's own `store` table through _cursor()",
    "test_omit_expired_refresh_ttl_only_refreshes_live_rows": "reads and backdates the peer's `store` table "
    "through _cursor()",
    "test_omit_expired_search_pagination": "backdates rows of the peer's `store` table through _cursor()",
    "test_omit_expired_disabled_preserves_expired_rows": "backdates rows of the peer's `store` table through "
    "_cursor(); what it checks, expired items readable until swept, is a deliberate difference "
    "(docs/langgraph.md: expired items are invisible at once)",
}

#: Variants of upstream's ``store`` fixture that build the very same PostgresStore of ours as its
#: ``default`` variant: ``pipeline=True`` is accepted and ignored (every operation is pipelined already)
#: and ``pool_config={"min_size": 1, "max_size": 10}`` is our default pool. Each store test runs once.
SAME_AS_DEFAULT = {"pipe", "pool"}

#: Deliberate differences (listed in docs/langgraph.md with the reason): expected to fail, strictly.
DIFFERENCES = {
    "test_no_running_loop": "expects sync calls made on the event loop's thread to raise InvalidStateError; "
    "one object of ours serves both APIs (the sync API has a pool of its own), as in a notebook",
}


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

# --- test databases: recycled, not created and dropped ------------------------------------------------

#: Upstream makes a database per test (``CREATE DATABASE test_x`` ... ``DROP DATABASE test_x``). On
#: PostgreSQL 15 a DROP DATABASE forces an immediate checkpoint of the whole server (2-3 s on the shared 2-core
#: machine) and a CREATE copies its template through the WAL (~1 s): 2-3.5 s per test, ~12 of the 19.5
#: minutes the 340 tests took on 2026-12-01 (7.5 more went to three test_large_batches_async, since fixed).
#: Here the first CREATE copies a template holding our migrated schema; a DROP renames
#: the database to a spare (failing, as DROP would, while a connection to it is still open) and empties
#: our tables; the next CREATE renames a spare back. A test sees what a fresh database would show it.
_CREATE = re.compile(r"\s*CREATE DATABASE (test_\w+)\s*")
_DROP = re.compile(r"\s*DROP DATABASE (test_\w+)\s*")
_spares: list[str] = []
_made = 0
_lock = threading.Lock()


def _statement(query: Any) -> tuple[str, str] | None:
    """("create" | "drop", database) for upstream's statements on its test databases."""
    if isinstance(query, str):
        for kind, pattern in (("create", _CREATE), ("drop", _DROP)):
            if match := pattern.fullmatch(query):
                return kind, match[1]
    return None


def _create(name: str) -> sql.Composed:
    global _made
    with _lock:
        if _spares:
            return sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(_spares.pop()),
                                                                   sql.Identifier(name))
        _made += 1
    return sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(_TEMPLATE))


def _spare_name() -> str:
    return f"{_DATABASE}_spare_{uuid.uuid4().hex[:8]}"


def _recycle(spare: str) -> None:
    """Empty our tables in a database given back, and drop pgvector (with the ANN indexes a store made)."""
    with psycopg.connect(f"dbname={spare}", autocommit=True) as conn:
        conn.execute(_EMPTY)
        conn.execute("DROP EXTENSION IF EXISTS vector CASCADE")
    with _lock:
        _spares.append(spare)


_EMPTY = """
DO $$
DECLARE tables text;
BEGIN
    SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') INTO tables
    FROM pg_tables WHERE schemaname = 'pgagentstate' AND tablename <> 'migrations';
    IF tables IS NOT NULL THEN
        EXECUTE 'TRUNCATE ' || tables || ' RESTART IDENTITY';
    END IF;
END $$
"""

_sync_execute = psycopg.Connection.execute
_async_execute = psycopg.AsyncConnection.execute


def _execute(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
    statement = _statement(query)
    if statement is None:
        return _sync_execute(self, query, *args, **kwargs)
    kind, name = statement
    if kind == "create":
        return _sync_execute(self, _create(name))
    spare = _spare_name()
    cur = _sync_execute(self, sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(name),
                                                                                sql.Identifier(spare)))
    _recycle(spare)
    return cur


async def _aexecute(self: psycopg.AsyncConnection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
    statement = _statement(query)
    if statement is None:
        return await _async_execute(self, query, *args, **kwargs)
    kind, name = statement
    if kind == "create":
        return await _async_execute(self, _create(name))
    spare = _spare_name()
    cur = await _async_execute(self, sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(name),
                                                                                       sql.Identifier(spare)))
    _recycle(spare)
    return cur


def _admin(statement: LiteralString, *names: str) -> None:
    with psycopg.connect(f"dbname={_DATABASE}", autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(*(sql.Identifier(n) for n in names)))


def pytest_configure(config: pytest.Config) -> None:
    _admin("DROP DATABASE IF EXISTS {} WITH (FORCE)", _TEMPLATE)
    _admin("CREATE DATABASE {}", _TEMPLATE)
    with StateStore(f"dbname={_TEMPLATE}", min_size=1, max_size=1) as store:
        store.setup()
    psycopg.Connection.execute = _execute  # type: ignore[method-assign, assignment]
    psycopg.AsyncConnection.execute = _aexecute  # type: ignore[method-assign, assignment]


def pytest_unconfigure(config: pytest.Config) -> None:
    psycopg.Connection.execute = _sync_execute  # type: ignore[method-assign]
    psycopg.AsyncConnection.execute = _async_execute  # type: ignore[method-assign]
    for name in [*_spares, _TEMPLATE]:
        _admin("DROP DATABASE IF EXISTS {} WITH (FORCE)", name)
    print(f"\nlg_postgres_plugin: {_made} database(s) created for the run's tests")


def pytest_plugin_registered(plugin: object) -> None:
    """Point upstream's conftest at our server (its tests import these constants from it)."""
    if getattr(plugin, "__name__", "") == "tests.conftest":
        plugin.DEFAULT_POSTGRES_URI = "postgresql:///"  # type: ignore[attr-defined]
        plugin.DEFAULT_URI = f"postgresql:///{_DATABASE}"  # type: ignore[attr-defined]


def _has_pgvector() -> bool:
    with psycopg.connect(f"dbname={_DATABASE}") as conn:
        return conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone() is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept: list[pytest.Item] = []
    for item in items:
        name = cast(str, getattr(item, "originalname", item.name))
        vector = "fake_embeddings" in getattr(item, "fixturenames", ())
        if (_ONLY == "vector" and not vector) or (_ONLY == "novector" and vector):
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("store") in SAME_AS_DEFAULT:
            continue
        kept.append(item)
        if name in INTERNALS:
            item.add_marker(pytest.mark.skip(reason=f"not applicable: {INTERNALS[name]}"))
        elif name in DIFFERENCES:
            item.add_marker(pytest.mark.xfail(reason=f"deliberate difference: {DIFFERENCES[name]}", strict=True))
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept
