"""PostgresStore: LangGraph's BaseStore operations on the core's memory table, sync and async."""

from __future__ import annotations

import asyncio

from langgraph.store.base import GetOp, PutOp, SearchOp

from pgagentstate.langgraph import PostgresStore


def test_put_get_search_delete(lg_store: PostgresStore) -> None:
    lg_store.setup()
    lg_store.put(("users", "u1", "prefs"), "lang", {"text": "prefers portuguese", "score": 3})
    lg_store.put(("users", "u1", "prefs"), "tone", {"text": "likes short answers", "score": 7})
    lg_store.put(("users", "u2", "prefs"), "lang", {"text": "prefers english", "score": 5})
    item = lg_store.get(("users", "u1", "prefs"), "lang")
    assert item is not None and item.value["text"] == "prefers portuguese"
    assert {i.key for i in lg_store.search(("users", "u1"))} == {"lang", "tone"}
    assert [i.namespace for i in lg_store.search(("users",), filter={"text": "prefers english"})] == [
        ("users", "u2", "prefs")]
    assert {i.key for i in lg_store.search(("users",), filter={"score": {"$gte": 5}})} == {"tone", "lang"}
    ranked = lg_store.search(("users",), query="portuguese answers")
    assert ranked[0].score is not None and {i.key for i in ranked} == {"lang", "tone"}
    assert lg_store.list_namespaces(prefix=("users",), max_depth=2) == [("users", "u1"), ("users", "u2")]
    assert lg_store.list_namespaces(suffix=("prefs",)) == [("users", "u1", "prefs"), ("users", "u2", "prefs")]
    lg_store.delete(("users", "u1", "prefs"), "lang")
    assert lg_store.get(("users", "u1", "prefs"), "lang") is None


def test_query_without_an_index_leaves_no_item_out(lg_store: PostgresStore) -> None:
    """LangGraph's own stores ignore ``query`` without an index (every item of the namespace comes back);
    ours returns the same items, those with the query's words first (upstream's test_store_ttl)."""
    lg_store.setup()
    lg_store.put(("n",), "key only", {"foo": "bar"})  # "foo" is an object key: not searched text
    lg_store.put(("n",), "text", {"note": "foo fighters"})
    found = lg_store.search(("n",), query="foo")
    assert [(i.key, i.score) for i in found] == [("text", 1.0), ("key only", 0.0)]


def test_batch_keeps_order(lg_store: PostgresStore) -> None:
    lg_store.setup()
    results = lg_store.batch([
        PutOp(("a",), "k", {"v": 1}),
        GetOp(("a",), "k"),
        SearchOp(("a",), None, 10, 0),
        GetOp(("a",), "missing"),
    ])
    assert results[0] is None and results[3] is None
    assert results[1] is not None and results[1].value == {"v": 1}  # type: ignore[union-attr]
    assert [i.key for i in results[2]] == ["k"]  # type: ignore[union-attr]


async def test_async_api_and_ttl(dsn: str, schema: str) -> None:
    async with PostgresStore.from_conn_string(dsn, schema=schema, ttl={"default_ttl": 10}) as store:
        await store.setup()
        await store.aput(("s",), "k", {"v": 1})
        first = await store.aget(("s",), "k")
        assert first is not None
        await store.aput(("s",), "gone", {"v": 2}, ttl=0.0001)  # minutes: expires after 6 ms
        await asyncio.sleep(0.05)
        assert await store.aget(("s",), "gone") is None  # expired items are invisible at once
        assert [i.key for i in await store.asearch(("s",))] == ["k"]
