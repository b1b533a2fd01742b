"""PostgresMemoryService: the BaseMemoryService behaviour ADK's in-memory service shows, plus what only a
database gives (explicit memories, expiry, isolation per app and user), and use by ADK's memory tools."""

from __future__ import annotations

import asyncio
import unicodedata
import uuid
from typing import Any

import pytest
from adk_samples import LoadMemoryLlm, PreloadRecallLlm, text_event
from google.adk.agents import LlmAgent
from google.adk.events import Event
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.runners import Runner
from google.adk.sessions import Session
from google.adk.tools import load_memory, preload_memory
from google.genai import types

from pgagentstate.connect import dsn_url

APP = "shop"


def uid() -> str:
    return f"u-{uuid.uuid4().hex[:8]}"


def session_with(user: str, *texts: str, app: str = APP) -> Session:
    events = [text_event("user" if i % 2 == 0 else "agent", t) for i, t in enumerate(texts)]
    return Session(id=f"s-{uuid.uuid4().hex[:6]}", app_name=app, user_id=user, events=events)


def texts(memories: list[MemoryEntry]) -> list[str]:
    return [" ".join(p.text or "" for p in m.content.parts or []) for m in memories]


async def test_session_events_are_searchable(memory_service: Any) -> None:
    user = uid()
    s = session_with(user, "My email is meu@email.com", "Thanks, noted", "The parcel arrived broken")
    await memory_service.add_session_to_memory(s)
    found = (await memory_service.search_memory(app_name=APP, user_id=user, query="parcel broken")).memories
    assert texts(found) == ["The parcel arrived broken"]
    entry = found[0]
    assert entry.author == "user"
    assert entry.id
    assert entry.timestamp and entry.timestamp[:4].isdigit()
    assert (await memory_service.search_memory(app_name=APP, user_id=user, query="zebra")).memories == []


async def test_search_is_scoped_to_app_and_user(memory_service: Any) -> None:
    alice, bob = uid(), uid()
    await memory_service.add_session_to_memory(session_with(alice, "alice likes refunds"))
    await memory_service.add_session_to_memory(session_with(bob, "bob likes refunds"))
    await memory_service.add_session_to_memory(session_with(alice, "other app refunds", app="other"))
    found = (await memory_service.search_memory(app_name=APP, user_id=alice, query="refunds")).memories
    assert texts(found) == ["alice likes refunds"]


async def test_more_matching_words_rank_first(memory_service: Any) -> None:
    user = uid()
    await memory_service.add_session_to_memory(
        session_with(user, "refund requested", "refund for order 12345 requested by email", "unrelated chat")
    )
    found = (
        await memory_service.search_memory(app_name=APP, user_id=user, query="refund order 12345 email")
    ).memories
    assert texts(found)[0] == "refund for order 12345 requested by email"
    assert set(texts(found)) == {"refund requested", "refund for order 12345 requested by email"}


async def test_adding_a_session_again_does_not_duplicate(memory_service: Any) -> None:
    user = uid()
    s = session_with(user, "first note about invoices")
    await memory_service.add_session_to_memory(s)
    s.events.append(text_event("agent", "second note about invoices"))
    await memory_service.add_session_to_memory(s)
    found = (await memory_service.search_memory(app_name=APP, user_id=user, query="invoices")).memories
    assert sorted(texts(found)) == ["first note about invoices", "second note about invoices"]


async def test_events_without_text_are_skipped(memory_service: Any) -> None:
    user = uid()
    call = Event(
        invocation_id="i",
        author="agent",
        content=types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name="refund"))]),
    )
    s = Session(id="s", app_name=APP, user_id=user, events=[call, Event(invocation_id="i", author="agent")])
    await memory_service.add_session_to_memory(s)
    assert (await memory_service.search_memory(app_name=APP, user_id=user, query="refund")).memories == []


async def test_add_events_incrementally(memory_service: Any) -> None:
    user = uid()
    first = text_event("user", "shipping address is Rua Augusta 10")
    await memory_service.add_events_to_memory(app_name=APP, user_id=user, events=[first], session_id="s1")
    await memory_service.add_events_to_memory(
        app_name=APP, user_id=user, events=[first, text_event("user", "shipping by courier")], session_id="s1"
    )
    found = (await memory_service.search_memory(app_name=APP, user_id=user, query="shipping")).memories
    assert sorted(texts(found)) == ["shipping address is Rua Augusta 10", "shipping by courier"]


async def test_deleted_memory_stays_deleted(memory_service: Any) -> None:
    user = uid()
    s = session_with(user, "secret code is 4242", "public note 4242")
    await memory_service.add_session_to_memory(s)
    found = (await memory_service.search_memory(app_name=APP, user_id=user, query="secret")).memories
    assert texts(found) == ["secret code is 4242"]
    await memory_service.delete_memory(app_name=APP, user_id=user, memory_id=found[0].id)
    await memory_service.add_session_to_memory(s)  # ingesting again must not bring it back
    left = (await memory_service.search_memory(app_name=APP, user_id=user, query="4242")).memories
    assert texts(left) == ["public note 4242"]
    await memory_service.delete_memory(app_name=APP, user_id=user, memory_id="no-such-id")


async def test_at_most_ten_results(memory_service: Any) -> None:
    user = uid()
    await memory_service.add_session_to_memory(session_with(user, *[f"ticket number {i}" for i in range(15)]))
    found = (await memory_service.search_memory(app_name=APP, user_id=user, query="ticket")).memories
    assert len(found) == 10


async def test_unicode_forms_meet(memory_service: Any) -> None:
    """Text stored decomposed (NFD) is found by the composed form users type, and the other way round."""
    user = uid()
    stored = ["Meet at the Café", "서울에서 만나요", "ガイドブックを買いました"]
    await memory_service.add_session_to_memory(
        session_with(user, *(unicodedata.normalize("NFD", t) for t in stored), "nothing else")
    )
    for query, expected in [("Café", stored[0]), ("서울에서", stored[1]), ("ガイドブック", stored[2]),
                            ("CAFÉ", stored[0])]:
        found = (await memory_service.search_memory(app_name=APP, user_id=user, query=query)).memories
        assert [unicodedata.normalize("NFC", t) for t in texts(found)] == [expected], query
    await memory_service.add_session_to_memory(session_with(user, "café com leite"))
    nfd_query = unicodedata.normalize("NFD", "café")
    found = (await memory_service.search_memory(app_name=APP, user_id=user, query=nfd_query)).memories
    assert [unicodedata.normalize("NFC", t) for t in texts(found)] == [stored[0], "café com leite"]


async def test_words_in_unspaced_scripts(memory_service: Any) -> None:
    """Japanese and Chinese are written without spaces: a word inside a sentence is still found, and so is a
    Latin word inside Japanese text — but not a part of that Latin word."""
    user = uid()
    await memory_service.add_session_to_memory(
        session_with(user, "私の名前は太郎です", "私はPythonを使います", "我的订单号是12345", "全然関係ない")
    )

    async def found(query: str) -> list[str]:
        return texts((await memory_service.search_memory(app_name=APP, user_id=user, query=query)).memories)

    assert await found("太郎") == ["私の名前は太郎です"]
    assert await found("Python") == ["私はPythonを使います"]
    assert await found("python") == ["私はPythonを使います"]
    assert await found("thon") == []
    assert await found("订单") == ["我的订单号是12345"]
    assert await found("郎太") == []  # the characters must stand in that order


async def test_equal_ranks_come_in_the_order_added(memory_service: Any) -> None:
    user = uid()
    await memory_service.add_session_to_memory(session_with(user, *[f"note {i}" for i in range(1, 13)]))
    found = (await memory_service.search_memory(app_name=APP, user_id=user, query="note")).memories
    assert texts(found) == [f"note {i}" for i in range(1, 11)]
    # More matching words first; among equals, still the order added (across sessions too).
    await memory_service.add_session_to_memory(session_with(user, "note about refund", "late refund note"))
    found = (await memory_service.search_memory(app_name=APP, user_id=user, query="refund note")).memories
    assert texts(found)[:2] == ["note about refund", "late refund note"]
    assert texts(found)[2:] == [f"note {i}" for i in range(1, 9)]


# ---------------------------------------------------------------- ours only


async def test_add_memory_explicit_items(pg_services: tuple[Any, Any]) -> None:
    _, memory = pg_services
    user = uid()
    await memory.add_memory(
        app_name=APP,
        user_id=user,
        memories=[
            MemoryEntry(
                id="pref-lang",
                content=types.Content(role="user", parts=[types.Part(text="prefers Portuguese replies")]),
                author="user",
                timestamp="2025-01-01T10:00:00",
                custom_metadata={"source": "crm"},
            ),
            MemoryEntry(content=types.Content(parts=[types.Part(text="vip customer since 2020")])),
        ],
    )
    (found,) = (await memory.search_memory(app_name=APP, user_id=user, query="portuguese")).memories
    assert found.id == "pref-lang"
    assert (found.author, found.timestamp, found.custom_metadata) == ("user", "2025-01-01T10:00:00", {"source": "crm"})
    assert found.content.role == "user"
    (vip,) = (await memory.search_memory(app_name=APP, user_id=user, query="vip")).memories
    assert vip.id and vip.id != "pref-lang"
    await memory.delete_memory(app_name=APP, user_id=user, memory_id="pref-lang")
    assert (await memory.search_memory(app_name=APP, user_id=user, query="portuguese")).memories == []


async def test_metadata_is_not_searchable(pg_services: tuple[Any, Any]) -> None:
    _, memory = pg_services
    user = uid()
    await memory.add_session_to_memory(session_with(user, "hello there"))
    # "user" is the author and the role of that event, not a word of it
    assert (await memory.search_memory(app_name=APP, user_id=user, query="user")).memories == []


async def test_ttl_expires_memories(pg_services: tuple[Any, Any]) -> None:
    _, memory = pg_services
    user = uid()
    await memory.add_events_to_memory(
        app_name=APP, user_id=user, events=[text_event("user", "temporary coupon XYZ")], custom_metadata={"ttl": 0.5}
    )
    assert len((await memory.search_memory(app_name=APP, user_id=user, query="coupon")).memories) == 1
    await asyncio.sleep(1.0)
    assert (await memory.search_memory(app_name=APP, user_id=user, query="coupon")).memories == []
    with pytest.raises(ValueError, match="ttl"):
        await memory.add_events_to_memory(
            app_name=APP, user_id=user, events=[text_event("user", "x")], custom_metadata={"ttl": -1}
        )


async def test_preload_memory_tool_recalls_an_earlier_session(pg_services: tuple[Any, Any]) -> None:
    sessions, memory = pg_services
    agent = LlmAgent(name="support", model=PreloadRecallLlm(), instruction="help", tools=[preload_memory])
    runner = Runner(app_name=APP, agent=agent, session_service=sessions, memory_service=memory)
    first = await sessions.create_session(app_name=APP, user_id="cliente")
    msg = types.Content(role="user", parts=[types.Part(text="my email is meu@email.com")])
    async for _ in runner.run_async(user_id="cliente", session_id=first.id, new_message=msg):
        pass
    done = await sessions.get_session(app_name=APP, user_id="cliente", session_id=first.id)
    await memory.add_session_to_memory(done)

    later = await sessions.create_session(app_name=APP, user_id="cliente")
    question = types.Content(role="user", parts=[types.Part(text="which email did I give you?")])
    replies = [
        e.content.parts[0].text
        async for e in runner.run_async(user_id="cliente", session_id=later.id, new_message=question)
        if e.content and e.content.parts and e.content.parts[0].text
    ]
    assert "meu@email.com" in replies[-1]


async def test_load_memory_tool_finds_memories(pg_services: tuple[Any, Any]) -> None:
    sessions, memory = pg_services
    await memory.add_session_to_memory(session_with("cliente", "order 12345 arrived broken"))
    agent = LlmAgent(name="support", model=LoadMemoryLlm(), instruction="help", tools=[load_memory])
    runner = Runner(app_name=APP, agent=agent, session_service=sessions, memory_service=memory)
    s = await sessions.create_session(app_name=APP, user_id="cliente")
    msg = types.Content(role="user", parts=[types.Part(text="broken order")])
    events = [e async for e in runner.run_async(user_id="cliente", session_id=s.id, new_message=msg)]
    assert events[-1].content.parts[0].text == "found: order 12345 arrived broken"  # type: ignore[union-attr,index]
    stored = await sessions.get_session(app_name=APP, user_id="cliente", session_id=s.id)
    assert [bool(e.get_function_calls()) for e in stored.events] == [False, True, False, False]


# ---------------------------------------------------------------- search by meaning (embed=)


async def test_embedded_memories_are_found_by_meaning(dsn: str, schema: str) -> None:
    from pgagentstate import HashEmbeddings
    from pgagentstate.adk import PostgresMemoryService

    words_only = PostgresMemoryService(dsn, schema=schema)
    semantic = PostgresMemoryService(dsn, schema=schema, embed=HashEmbeddings(64))  # dims from the embedder
    try:
        user = uid()
        await semantic.add_session_to_memory(
            session_with(user, "I want my refund for order 12345", "the parcel was broken", "weather is sunny")
        )
        # "refunds" is not a word of any memory: the full-text search finds nothing, the hybrid one finds
        # the memory nearest in meaning first (the local embedder knows shared word parts, not synonyms).
        assert (await words_only.search_memory(app_name=APP, user_id=user, query="refunds")).memories == []
        found = (await semantic.search_memory(app_name=APP, user_id=user, query="refunds")).memories
        assert texts(found)[0] == "I want my refund for order 12345"
        # A word match still ranks first when there is one; deletes and scoping hold as before.
        found = (await semantic.search_memory(app_name=APP, user_id=user, query="broken")).memories
        assert texts(found)[0] == "the parcel was broken"
        await semantic.delete_memory(app_name=APP, user_id=user, memory_id=found[0].id)
        assert "the parcel was broken" not in texts(
            (await semantic.search_memory(app_name=APP, user_id=user, query="broken")).memories
        )
        assert (await semantic.search_memory(app_name=APP, user_id=uid(), query="refunds")).memories == []
    finally:
        await words_only.close()
        await semantic.close()


async def test_memory_uri_carries_the_embedder(dsn: str, schema: str) -> None:
    from pgagentstate.adk.registry import memory_service_factory, session_service_factory

    base = dsn_url(dsn, "pgagentstate")
    sep = "&" if "?" in base else "?"
    memory = memory_service_factory(f"{base}{sep}schema={schema}&embed=hash&dims=32")
    try:
        assert memory.index is not None and memory.index.dims == 32
        user = uid()
        await memory.add_session_to_memory(session_with(user, "I want my refund for order 12345"))
        assert texts((await memory.search_memory(app_name=APP, user_id=user, query="refunds")).memories)
    finally:
        await memory.close()
    with pytest.raises(ValueError, match="memory service"):
        session_service_factory(f"{base}{sep}schema={schema}&embed=hash")
    with pytest.raises(ValueError, match="dims"):
        memory_service_factory(f"{base}{sep}schema={schema}&embed=hash&dims=x")


async def test_a_given_store_gets_the_index(dsn: str, schema: str) -> None:
    from pgagentstate import AsyncStateStore, HashEmbeddings
    from pgagentstate.adk import PostgresMemoryService

    async with AsyncStateStore(dsn, schema=schema) as store:
        memory = PostgresMemoryService(store=store, embed=HashEmbeddings(48))
        user = uid()
        await memory.add_session_to_memory(session_with(user, "I want my refund for order 12345"))
        assert texts((await memory.search_memory(app_name=APP, user_id=user, query="refunds")).memories)
        assert (await store.search_memory(("adk",), query="refunds", mode="text")) == []  # the store itself: words
        mode = await (await memory.store()).memory_search_mode()
        assert mode is not None


async def test_a_new_session_knows_what_an_earlier_one_was_told(pg_services: tuple[Any, Any]) -> None:
    """The after-agent hook wakes the distiller (no extraction in the turn); the distilled facts are in this
    service's layout, so the next session's search finds the email without the first session ingested."""
    from pgagentstate.adk import conversation_id_for
    from pgagentstate.adk.memory_service import distill_after_agent

    sessions, memory = pg_services
    store = await memory.store()
    agent = LlmAgent(name="support", model=PreloadRecallLlm(), instruction="help",
                     after_agent_callback=distill_after_agent(store))
    runner = Runner(app_name=APP, agent=agent, session_service=sessions, memory_service=memory)
    user = uid()
    first = await sessions.create_session(app_name=APP, user_id=user)
    msg = types.Content(role="user", parts=[types.Part(text="meu email é meu@email.com, pedido #12345")])
    async for _ in runner.run_async(user_id=user, session_id=first.id, new_message=msg):
        pass
    assert (await memory.search_memory(app_name=APP, user_id=user, query="email")).memories == []
    result = await store.distill(conversation_id_for(APP, user, first.id))  # what the worker does
    assert result is not None and result.facts == 2
    found = (await memory.search_memory(app_name=APP, user_id=user, query="email")).memories
    assert texts(found) == ["email: meu@email.com"]
