"""What the SDK's own sessions do, and its own tests check, that a swap to PostgresSession must not change
(issue 16): any event loop, TypeError for an item that is not JSON, ``from_url``, one setup rule."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from pgagentstate import AsyncStateStore, InvalidInput, InvalidPayload
from pgagentstate.openai_agents import InvalidItem, PostgresSession


def _msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _in_threads(n: int, work: Any) -> list[BaseException]:
    """``asyncio.run(work(i))`` in ``n`` threads at once; the errors, and a TimeoutError for a hang."""
    errors: list[BaseException] = []

    def target(i: int) -> None:
        try:
            asyncio.run(work(i))
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return errors + [TimeoutError("a thread never finished")] * any(t.is_alive() for t in threads)


@pytest.mark.parametrize("owner", ["session", "store"])
def test_one_session_from_five_threads_each_with_its_own_loop(dsn: str, schema: str, owner: str) -> None:
    """The SDK's test_sqlite_session_concurrent_access: no hang, no lost item."""
    store = AsyncStateStore(dsn, schema=schema) if owner == "store" else None
    session = PostgresSession("threads", store=store) if store else PostgresSession("threads", dsn, schema=schema)

    async def work(i: int) -> None:
        for j in range(3):
            await session.add_items([_msg(f"t{i}-{j}")])

    assert _in_threads(5, work) == []

    async def check() -> None:
        items = await session.get_items()
        assert sorted(i["content"] for i in items) == sorted(f"t{i}-{j}" for i in range(5) for j in range(3))
        for i in range(5):  # each thread's items in the order it added them
            mine = [x["content"] for x in items if x["content"].startswith(f"t{i}-")]
            assert mine == [f"t{i}-{j}" for j in range(3)]
        await session.aclose()
        if store is not None:
            await store.close()

    asyncio.run(check())


@pytest.fixture
async def store(dsn: str, schema: str) -> AsyncIterator[AsyncStateStore]:
    async with AsyncStateStore(dsn, schema=schema) as s:
        yield s


async def test_an_item_that_is_not_json_is_a_type_error(store: AsyncStateStore) -> None:
    s = PostgresSession("bad", store=store)
    for items in ([{"role": "user", "content": {1, 2}}], [_msg("ok"), {"role": "user", "content": object()}]):
        with pytest.raises(TypeError) as info:
            await s.add_items(items)  # type: ignore[arg-type]
        assert isinstance(info.value, InvalidItem) and isinstance(info.value, InvalidPayload)
        assert info.value.path.endswith("content")
        with pytest.raises(TypeError):
            await s.replace_items(items)  # type: ignore[arg-type]
    assert await s.get_items() == []


async def test_from_url_as_sqlalchemy_session(dsn: str, schema: str) -> None:
    url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
    async with PostgresSession.from_url("by-url", url=url, schema=schema, session_settings={"limit": 1}) as s:
        await s.add_items([_msg("a"), _msg("b")])
        assert await s.get_items() == [_msg("b")]
    async with PostgresSession.from_url("by-url", url=dsn, schema=schema) as s:
        assert await s.get_items() == [_msg("a"), _msg("b")]


def test_from_url_refuses_other_databases_before_connecting() -> None:
    with pytest.raises(InvalidInput) as info:
        PostgresSession.from_url("s", url="sqlite+aiosqlite:///:memory:")
    assert info.value.path == "url"
    with pytest.raises(TypeError, match="conn"):
        PostgresSession.from_url("s", url="postgresql://x/y", conn="postgresql://x/y")


async def test_setup_by_default_when_the_session_opens_its_store(dsn: str) -> None:
    """One rule for every adapter: a store the adapter opens itself is set up on first use; a store
    passed in is its owner's to set up."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    try:
        async with PostgresSession("fresh", dsn, schema=name) as s:
            await s.add_items([_msg("first")])
        async with PostgresSession.from_url("fresh", url=dsn, schema=name, create_tables=False) as s:
            assert await s.get_items() == [_msg("first")]
    finally:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    other = f"t_{uuid.uuid4().hex[:12]}"
    async with AsyncStateStore(dsn, schema=other) as unset:
        s = PostgresSession("x", store=unset)
        with pytest.raises(Exception):  # noqa: B017 - the owner has not set the schema up
            await s.add_items([_msg("x")])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        row = await (await conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", [other])).fetchone()
        assert row == (0,)
