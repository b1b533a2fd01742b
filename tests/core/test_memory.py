from __future__ import annotations

import os
import time
import unicodedata
from collections.abc import Iterator

import pytest

from pgagentstate import AsyncStateStore, InvalidId, InvalidInput, StateStore, VersionConflict
from pgagentstate.crypto import Encryption, StaticKeyProvider


def test_put_get_delete_and_versions(store: StateStore) -> None:
    ns = ("users", "u1", "facts")
    m = store.put_memory(ns, "email", {"text": "email is meu@email.com"}, user_id="u1")
    assert (m.namespace, m.key, m.version, m.user_id, m.expires_at) == (ns, "email", 1, "u1", None)
    m2 = store.put_memory(ns, "email", {"text": "email is novo@email.com"}, expected_version=1)
    assert m2.version == 2 and m2.created_at == m.created_at
    with pytest.raises(VersionConflict):
        store.put_memory(ns, "email", {"text": "stale"}, expected_version=1)
    with pytest.raises(VersionConflict):
        store.put_memory(ns, "email", {"text": "exists"}, expected_version=0)
    got = store.get_memory(ns, "email")
    assert got is not None and got.value == {"text": "email is novo@email.com"}
    assert store.delete_memory(ns, "email") is True
    assert store.delete_memory(ns, "email") is False
    assert store.get_memory(ns, "email") is None


def test_ttl_expires_and_refreshes_on_read(store: StateStore) -> None:
    store.put_memory(("s",), "short", {"v": 1}, ttl=0.5)
    first = store.get_memory(("s",), "short")
    assert first is not None and first.expires_at is not None
    time.sleep(0.3)
    refreshed = store.get_memory(("s",), "short")  # pushes expiry another 0.5 s out
    assert refreshed is not None
    time.sleep(0.3)
    assert store.get_memory(("s",), "short", refresh_ttl=False) is not None
    time.sleep(0.6)
    assert store.get_memory(("s",), "short") is None
    assert store.search_memory(("s",)) == []
    # An expired item can be written again from version 1.
    assert store.put_memory(("s",), "short", {"v": 2}, expected_version=0).version == 1


def test_search_prefix_filter_and_ranking(store: StateStore) -> None:
    store.put_memory(("users", "u1"), "a", {"text": "customer prefers email receipts", "kind": "pref"})
    store.put_memory(("users", "u1"), "b", {"text": "order 12345 arrived broken", "kind": "event"})
    store.put_memory(("users", "u1"), "c", {"text": "email receipts to meu@email.com please", "kind": "pref"})
    store.put_memory(("users", "u2"), "d", {"text": "email receipts", "kind": "pref"})
    store.put_memory(("users", "u10"), "e", {"text": "email", "kind": "pref"})
    under_u1 = store.search_memory(("users", "u1"))
    assert sorted(m.key for m in under_u1) == ["a", "b", "c"]  # not u10: labels match whole
    ranked = store.search_memory(("users", "u1"), query="email receipts broken")
    assert {m.key for m in ranked} == {"a", "b", "c"}
    assert all(m.score is not None and m.score > 0 for m in ranked)
    assert ranked[-1].key == "b"  # matches one word of three
    prefs = store.search_memory(("users",), filter={"kind": "pref"}, query="receipts")
    assert sorted(m.key for m in prefs) == ["a", "c", "d"]
    assert len(store.search_memory((), limit=2)) == 2
    assert [m.key for m in store.search_memory(("users", "u1"), query="nothing-matches")] == []


def test_list_namespaces(store: StateStore) -> None:
    for ns in [("users", "u1", "facts"), ("users", "u1", "prefs"), ("users", "u2", "facts"), ("apps", "shop")]:
        store.put_memory(ns, "k", {"v": 1})
    assert store.list_memory_namespaces() == [
        ("apps", "shop"),
        ("users", "u1", "facts"),
        ("users", "u1", "prefs"),
        ("users", "u2", "facts"),
    ]
    assert store.list_memory_namespaces(prefix=("users",), max_depth=2) == [("users", "u1"), ("users", "u2")]
    assert store.list_memory_namespaces(suffix=("facts",)) == [("users", "u1", "facts"), ("users", "u2", "facts")]
    assert store.list_memory_namespaces(prefix=("users", "*", "prefs")) == [("users", "u1", "prefs")]
    assert store.list_memory_namespaces(limit=1, offset=1) == [("users", "u1", "facts")]


def test_bad_namespaces(store: StateStore) -> None:
    with pytest.raises(InvalidId):
        store.put_memory((), "k", {})
    with pytest.raises(InvalidId):
        store.put_memory("users", "k", {})  # a string is not a namespace
    with pytest.raises(InvalidId):
        store.put_memory(("a", ""), "k", {})
    with pytest.raises(InvalidInput):
        store.put_memory(("a",), "k", ["list"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        store.put_memory(("a",), "k", {}, ttl=-1)


async def test_async_memory(astore: AsyncStateStore) -> None:
    await astore.put_memory(("u",), "k", {"text": "likes pix payments"})
    (hit,) = await astore.search_memory(("u",), query="pix")
    assert hit.key == "k"


@pytest.fixture(params=["plain", "encrypted"])
def any_store(request: pytest.FixtureRequest, dsn: str, schema: str) -> Iterator[StateStore]:
    """The server ranks plain values; an encrypted store ranks in Python: both must agree."""
    encryption = None
    if request.param == "encrypted":
        encryption = Encryption(StaticKeyProvider({"k1": os.urandom(32)}, active="k1"))
    with StateStore(dsn, schema=schema, encryption=encryption) as s:
        yield s


def test_text_search_normalises_and_splits_unspaced_scripts(any_store: StateStore) -> None:
    texts = {
        "cafe": unicodedata.normalize("NFD", "Meet at the CAFÉ"),
        "wide": "Ｐｙｔｈｏｎ　ｃｏｕｒｓｅ",  # full-width letters and space (NFKC)
        "jp": "私の名前は太郎です",
        "mixed": "私はPythonを使います",
        "zh": "我的订单号是12345",
        "thai": "ฉันชอบกาแฟ",
        "ko": unicodedata.normalize("NFD", "서울에서 만나요"),
        "de": "Die Straße ist lang",
    }
    any_store.put_memories([(("t",), k, {"text": v}) for k, v in texts.items()])

    def keys(query: str) -> list[str]:
        return [m.key for m in any_store.search_memory(("t",), query=query)]

    assert keys("café") == ["cafe"]
    assert keys(unicodedata.normalize("NFD", "Café")) == ["cafe"]
    assert keys("python") == ["wide", "mixed"]  # order first stored: equal ranks
    assert keys("COURSE") == ["wide"]
    assert keys("太郎") == ["jp"] and keys("郎太") == []
    assert keys("thon") == []
    assert keys("订单 12345") == ["zh"]
    assert keys("กาแฟ") == ["thai"]
    assert keys("서울") == ["ko"]
    assert keys("STRASSE") == ["de"]  # case folding, not just lower()
    assert keys("!?") == []
    assert len(keys("  ")) == len(texts)  # a blank query is no query
    ranked = any_store.search_memory(("t",), query="太郎 python")
    assert [m.key for m in ranked] == ["wide", "jp", "mixed"] and {m.score for m in ranked} == {0.5}


def test_equal_ranks_keep_the_order_first_stored(any_store: StateStore) -> None:
    for i in range(1, 13):
        any_store.put_memory(("n",), f"note {i}", {"text": f"note number {i}"})
    any_store.put_memory(("n",), "note 1", {"text": "note number one, rewritten"})  # keeps its place
    found = any_store.search_memory(("n",), query="note", limit=5)
    assert [m.key for m in found] == ["note 1", "note 2", "note 3", "note 4", "note 5"]
    newest = any_store.search_memory(("n",), limit=2)  # no query: the newest first
    assert [m.key for m in newest] == ["note 1", "note 12"]


def test_rank_mode_orders_by_the_words_and_leaves_no_item_out(any_store: StateStore) -> None:
    """mode="rank" (what LangGraph's search without an index needs: its stores then ignore the query):
    every item of the prefix, those with more of the query's words first, the others with score 0."""
    any_store.put_memory(("r",), "key only", {"foo": "bar"})  # object keys are not searched text
    any_store.put_memory(("r",), "one", {"text": "foo"})
    any_store.put_memory(("r",), "two", {"text": "foo baz"})
    ranked = any_store.search_memory(("r",), query="foo baz", mode="rank")
    assert [(m.key, m.score) for m in ranked] == [("two", 1.0), ("one", 0.5), ("key only", 0.0)]
    assert [m.key for m in any_store.search_memory(("r",), query="foo baz")] == ["two", "one"]  # text
    assert len(any_store.search_memory(("r",), query="!?", mode="rank")) == 3
    assert [m.key for m in any_store.search_memory(("r",), query="foo", mode="rank", limit=1, offset=2)] == [
        "key only"]
