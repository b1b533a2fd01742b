"""Every adapter can be given the tier (a store that has one, or ``cache=`` among the store options) and
keeps working, with nothing wrong, when its Redis dies."""

from __future__ import annotations

import operator
import uuid
from typing import Annotated, TypedDict

import pytest

from pgagentstate import AsyncStateStore, StateStore
from pgagentstate.redis_tier import RedisTier

from .conftest import RedisServer


class S(TypedDict):
    log: Annotated[list[str], operator.add]


def _tier(server: RedisServer) -> RedisTier:
    return RedisTier(server.url, secret="adapter test secret, 32 bytes..", timeout=0.2, retry_after=0.3)


async def test_adk_session_service_with_the_tier(dsn: str, schema: str, redis_clean: RedisServer) -> None:
    pytest.importorskip("google.adk")
    from google.adk.events import Event
    from google.adk.events.event_actions import EventActions

    from pgagentstate.adk import PostgresSessionService

    tier = _tier(redis_clean)
    async with PostgresSessionService(dsn, schema=schema, cache=tier) as svc:
        assert (await svc.store()).cache is tier
        session = await svc.create_session(app_name="shop", user_id="u1", state={"email": "meu@email.com"})
        await svc.append_event(session, Event(author="user", actions=EventActions(state_delta={"step": 1})))
        redis_clean.kill9()
        await svc.append_event(session, Event(author="agent", actions=EventActions(state_delta={"step": 2})))
        got = await svc.get_session(app_name="shop", user_id="u1", session_id=session.id)
        assert got is not None and got.state == {"email": "meu@email.com", "step": 2} and len(got.events) == 2


async def test_agents_sdk_session_with_a_store_that_has_the_tier(
    dsn: str, schema: str, redis_clean: RedisServer
) -> None:
    pytest.importorskip("agents")
    from pgagentstate.openai_agents import PostgresSession

    async with AsyncStateStore(dsn, schema=schema, cache=_tier(redis_clean)) as store:
        session = PostgresSession(uuid.uuid4().hex, store=store)
        await session.add_items([{"role": "user", "content": "Oi"}])
        # A core turn on the same conversation is served from Redis; the adapter's append dropped the entry.
        async with store.turn(session.session_id) as t:
            assert t._loaded is not None and not t._loaded.cached
            t.append({"role": "assistant", "content": "Olá"})
        async with store.turn(session.session_id) as t:
            assert t._loaded is not None and t._loaded.cached
        redis_clean.kill9()
        await session.add_items([{"role": "user", "content": "quero reembolso"}])
        assert [i["content"] for i in await session.get_items()] == ["Oi", "Olá", "quero reembolso"]  # type: ignore[typeddict-item]


def test_langgraph_checkpointer_with_the_tier(dsn: str, schema: str, redis_clean: RedisServer) -> None:
    pytest.importorskip("langgraph")
    from langgraph.graph import END, START, StateGraph

    from pgagentstate.langgraph import PostgresCheckpointer

    graph = StateGraph(S)
    graph.add_node("step", lambda s: {"log": ["ran"]})
    graph.add_edge(START, "step")
    graph.add_edge("step", END)
    with StateStore(dsn, schema=schema, cache=_tier(redis_clean)) as store:
        app = graph.compile(checkpointer=PostgresCheckpointer(store=store))
        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        app.invoke({"log": []}, config)  # type: ignore[arg-type]
        redis_clean.kill9()
        assert app.invoke({"log": []}, config)["log"] == ["ran", "ran"]  # type: ignore[arg-type]
