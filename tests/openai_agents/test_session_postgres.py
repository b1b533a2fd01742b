"""What PostgresSession adds to the contract: concurrency, run-context routing, ownership, construction."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from agents import RunContextWrapper, Runner
from agents.memory.session import _session_accepts_wrapper
from agents.testing import ScriptedModel, assistant_message, function_call
from oa_samples import support_agents
from psycopg_pool import AsyncConnectionPool

from pgagentstate import AsyncStateStore, InvalidId, InvalidPayload
from pgagentstate.openai_agents import PostgresSession, SessionUserMismatch, StateContext


@pytest.fixture
async def store(dsn: str, schema: str) -> AsyncIterator[AsyncStateStore]:
    async with AsyncStateStore(dsn, schema=schema) as s:
        yield s


@pytest.fixture
async def other_store(dsn: str, schema: str) -> AsyncIterator[AsyncStateStore]:
    """A second store with its own pool: a second process as far as Postgres can tell."""
    async with AsyncStateStore(dsn, schema=schema) as s:
        yield s


def _msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


async def test_opts_into_the_run_context_wrapper(store: AsyncStateStore) -> None:
    assert _session_accepts_wrapper(PostgresSession("s", store=store))


async def test_session_is_a_core_conversation(store: AsyncStateStore) -> None:
    s = PostgresSession("conv", store=store, user_id="cust-42", app="support", channel="whatsapp",
                        metadata={"phone": "+55 11 99999-0000"})
    assert await s.get_conversation() is None
    await s.add_items([_msg("oi"), {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}])
    conv = await store.get_conversation("conv")
    assert conv is not None
    assert (conv.framework, conv.user_id, conv.app, conv.channel) == ("openai_agents", "cust-42", "support", "whatsapp")
    assert conv.metadata == {"phone": "+55 11 99999-0000"}
    events = await store.list_events("conv")
    assert [(e.seq, e.kind, e.author) for e in events] == [(1, "message", "user"), (2, "function_call", "")]
    assert [e.payload["call_id"] for e in await store.list_events("conv", kinds=["function_call"])] == ["c"]


async def test_clear_keeps_the_conversation_and_delete_removes_it(store: AsyncStateStore) -> None:
    s = PostgresSession("keep", store=store, user_id="u")
    await s.add_items([_msg("a")])
    await s.clear_session()
    conv = await s.get_conversation()
    assert conv is not None and conv.user_id == "u"
    await s.add_items([_msg("b")])
    assert await s.delete() is True
    assert await store.get_conversation("keep") is None
    assert await s.get_items() == []
    # The instance recreates the conversation on its next append.
    await s.add_items([_msg("c")])
    assert await s.get_items() == [_msg("c")]


async def test_deleted_by_someone_else_is_recreated(store: AsyncStateStore) -> None:
    s = PostgresSession("gone", store=store)
    await s.add_items([_msg("a")])
    assert await store.delete_conversation("gone")
    await s.add_items([_msg("b")])
    assert await s.get_items() == [_msg("b")]


async def test_runner_context_routes_tenant_and_user(store: AsyncStateStore) -> None:
    session = PostgresSession("shared-id", store=store)
    model = ScriptedModel([[assistant_message("olá acme")], [assistant_message("olá globex")]])
    agent = support_agents(model)
    await Runner.run(agent, "from acme", session=session, context=StateContext(user_id="u1", tenant="acme"))
    await Runner.run(agent, "from globex", session=session, context={"tenant_id": "globex", "user_id": "u9"})
    acme, globex = store.with_tenant("acme"), store.with_tenant("globex")
    assert next(e.payload.get("content") for e in await acme.list_events("shared-id")) == "from acme"
    assert next(e.payload.get("content") for e in await globex.list_events("shared-id")) == "from globex"
    assert len(await acme.list_events("shared-id")) == 2
    assert await store.list_events("shared-id") == []  # the default tenant saw nothing
    conv = await acme.get_conversation("shared-id")
    assert conv is not None and conv.user_id == "u1"
    # Without a wrapper the constructor's tenant applies.
    assert await session.get_items() == []
    wrapped = RunContextWrapper(context={"tenant": "acme"})
    assert len(await session.get_items(wrapper=wrapped)) == 2


async def test_another_users_session_is_refused(store: AsyncStateStore) -> None:
    owner = PostgresSession("private", store=store)
    await owner.add_items([_msg("my secret")], wrapper=RunContextWrapper(context={"user_id": "alice"}))
    intruder = PostgresSession("private", store=store)
    bob = RunContextWrapper(context={"user_id": "bob"})
    with pytest.raises(SessionUserMismatch):
        await intruder.get_items(wrapper=bob)
    with pytest.raises(SessionUserMismatch):
        await intruder.add_items([_msg("hi")], wrapper=bob)
    with pytest.raises(SessionUserMismatch):
        await intruder.pop_item(wrapper=bob)
    with pytest.raises(SessionUserMismatch):
        await intruder.clear_session(wrapper=bob)
    model = ScriptedModel([[assistant_message("never")]])
    with pytest.raises(SessionUserMismatch):
        await Runner.run(support_agents(model), "hi", session=intruder, context=StateContext(user_id="bob"))
    assert await owner.get_items(wrapper=RunContextWrapper(context={"user_id": "alice"})) == [_msg("my secret")]


async def test_concurrent_batches_never_interleave_and_nothing_is_lost(
    store: AsyncStateStore, other_store: AsyncStateStore
) -> None:
    writers, batches, size = 2, 15, 6
    sessions = [PostgresSession("busy", store=s) for s in (store, other_store)]

    async def write(w: int) -> None:
        await asyncio.gather(*(
            sessions[w].add_items([{"role": "user", "content": f"w{w}b{b}i{i}"} for i in range(size)])
            for b in range(batches)
        ))

    await asyncio.gather(*(write(w) for w in range(writers)))
    items = await sessions[0].get_items()
    assert len(items) == writers * batches * size
    contents = [str(i["content"]) for i in items]  # type: ignore[typeddict-item]
    assert len(set(contents)) == len(contents)
    for start in range(0, len(contents), size):
        chunk = contents[start:start + size]
        prefix = chunk[0].rsplit("i", 1)[0]
        assert chunk == [f"{prefix}i{i}" for i in range(size)], f"batch split at {start}: {chunk}"
    seqs = [e.seq for e in await store.list_events("busy")]
    assert seqs == list(range(1, len(items) + 1))


async def test_concurrent_pops_remove_exactly_the_last_items(
    store: AsyncStateStore, other_store: AsyncStateStore
) -> None:
    writer = PostgresSession("stack", store=store)
    await writer.add_items([_msg(str(i)) for i in range(30)])
    poppers = [PostgresSession("stack", store=s) for s in (store, other_store)]
    popped = await asyncio.gather(*(poppers[i % 2].pop_item() for i in range(12)))
    assert None not in popped
    assert sorted(int(p["content"]) for p in popped) == list(range(18, 30))  # type: ignore[index, arg-type]
    assert await writer.get_items() == [_msg(str(i)) for i in range(18)]
    await writer.add_items([_msg("next")])
    assert (await writer.get_items(limit=2)) == [_msg("17"), _msg("next")]


async def test_pops_racing_appends_lose_nothing_else(store: AsyncStateStore, other_store: AsyncStateStore) -> None:
    a, b = PostgresSession("race", store=store), PostgresSession("race", store=other_store)
    await a.add_items([_msg("base")])
    results = await asyncio.gather(
        *(a.add_items([_msg(f"add{i}a"), _msg(f"add{i}b")]) for i in range(10)),
        *(b.pop_item() for _ in range(5)),
    )
    popped = [r for r in results if r is not None]
    remaining = await a.get_items()
    everything = [_msg("base")] + [_msg(f"add{i}{x}") for i in range(10) for x in "ab"]
    assert len(popped) + len(remaining) == len(everything)
    assert sorted(map(str, popped + remaining)) == sorted(map(str, everything))


async def test_bad_input_is_rejected_with_typed_errors(store: AsyncStateStore) -> None:
    with pytest.raises(InvalidId):
        PostgresSession("", store=store)
    s = PostgresSession("bad", store=store)
    with pytest.raises(InvalidPayload):
        await s.add_items([{"role": "user", "content": {1, 2}}])  # type: ignore[list-item]
    with pytest.raises(InvalidPayload):
        await s.add_items([_msg("ok"), {"role": "user", "content": float("nan")}])  # type: ignore[list-item]
    assert await s.get_items() == []  # the valid item of the rejected batch was not written either
    with pytest.raises(ValueError, match="limit"):
        await s.get_items(limit=-1)
    with pytest.raises(ValueError):
        PostgresSession("x", "postgresql://nowhere", store=store)


async def test_constructed_from_dsn_pool_and_connection(dsn: str, schema: str) -> None:
    async with PostgresSession("by-dsn", dsn, schema=schema, tenant="t1") as s:
        await s.add_items([_msg("dsn")])
        assert await s.get_items() == [_msg("dsn")]
    async with AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False, kwargs={"autocommit": True}) as pool:
        s2 = PostgresSession("by-dsn", pool, schema=schema, tenant="t1")
        assert await s2.get_items() == [_msg("dsn")]
        await s2.aclose()
        assert not pool.closed  # a pool passed in is not ours to close
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        s3 = PostgresSession("by-dsn", conn, schema=schema, tenant="t1")
        await s3.add_items([_msg("conn")])
        assert await s3.get_items() == [_msg("dsn"), _msg("conn")]
    finally:
        await conn.close()


async def test_setup_creates_the_schema(dsn: str) -> None:
    name = f"t_{uuid.uuid4().hex[:12]}"
    try:
        async with PostgresSession("fresh", dsn, schema=name, setup=True) as s:
            await s.add_items([_msg("first")])
            assert await s.get_items() == [_msg("first")]
    finally:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


async def test_a_full_support_conversation_survives_new_instances(store: AsyncStateStore) -> None:
    # The brief's scenario: every WhatsApp message is a new request with a new session object.
    model = ScriptedModel()
    agent = support_agents(model)
    turns = [
        ("Oi, quero reembolso no pedido #12345", [assistant_message("Qual é seu email?")]),
        ("meu@email.com", [assistant_message("Qual foi a razão da devolução?")]),
        ("Produto chegou quebrado", [function_call("lookup_order", {"order_id": "12345"}, call_id="c1")]),
    ]
    for text, step in turns:
        model.enqueue(step)
        if step[0].type == "function_call":
            model.enqueue([assistant_message("Vou processar seu reembolso.")])
        await Runner.run(agent, text, session=PostgresSession("whatsapp:+5511", store=store))
    model.enqueue([assistant_message("Sim, para meu@email.com")])
    await Runner.run(agent, "Você vai enviar email com comprovante?",
                     session=PostgresSession("whatsapp:+5511", store=store))
    seen = model.last_call.input if model.last_call else []
    assert isinstance(seen, list)
    assert {"content": "meu@email.com", "role": "user"} in seen
    model.assert_complete()
