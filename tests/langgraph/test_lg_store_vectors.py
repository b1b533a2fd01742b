"""PostgresStore(index=...): langgraph-checkpoint-postgres's semantic-search contract on our store, the
langgraph.json mapping, and LangMem's memory tools on top of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import PutOp, get_text_at_path

from pgagentstate import HashEmbeddings
from pgagentstate.embedding import similarity, text_at_path, tokenize_path
from pgagentstate.langgraph import PostgresStore

DIMS = 64


class Counting(Embeddings):
    def __init__(self) -> None:
        self.inner = HashEmbeddings(DIMS)
        self.batches: list[list[str]] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.batches.append(list(texts))
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


@pytest.fixture
def embeddings() -> Counting:
    return Counting()


@pytest.fixture
def vstore(dsn: str, schema: str, embeddings: Counting) -> Iterator[PostgresStore]:
    index = {"dims": DIMS, "embed": embeddings, "fields": ["text"]}
    with PostgresStore.from_conn_string(dsn, schema=schema, index=index) as s:
        s.setup()
        yield s


def test_search_by_meaning_scores_like_the_peer(vstore: PostgresStore) -> None:
    docs = {"a": "refund for order 12345", "b": "email is meu@email.com", "c": "parcel arrived broken"}
    for key, text in docs.items():
        vstore.put(("users", "u1"), key, {"text": text})
    found = vstore.search(("users",), query="order refund", limit=2)
    emb = HashEmbeddings(DIMS)
    scores = {k: similarity("cosine", emb.embed_query(t), emb.embed_query("order refund")) for k, t in docs.items()}
    assert [r.key for r in found] == sorted(scores, key=lambda k: -scores[k])[:2]
    for r in found:
        assert r.score == pytest.approx(scores[r.key], abs=1e-5)
    assert vstore.index_config is not None and vstore.index_config["dims"] == DIMS
    assert [r.score for r in vstore.search(("users",))] == [None, None, None]  # no query: newest first


def test_a_batch_of_puts_is_embedded_in_one_call(vstore: PostgresStore, embeddings: Counting) -> None:
    ops = [PutOp(("n",), f"k{i}", {"text": f"fact number {i}"}) for i in range(5)]
    ops.append(PutOp(("n",), "skip", {"text": "not embedded"}, index=False))
    vstore.batch(ops)
    assert embeddings.batches == [[f"fact number {i}" for i in range(5)]]
    assert "skip" not in [r.key for r in vstore.search(("n",), query="not embedded", limit=10)]
    assert vstore.get(("n",), "skip") is not None


def test_hybrid_search_is_an_option_of_the_index(dsn: str, schema: str) -> None:
    """By default a query ranks by meaning alone (the peer's contract: an item put with index=False is
    not found); with "hybrid": True its words rank too, fused with the meaning by reciprocal rank."""
    base = {"dims": DIMS, "embed": HashEmbeddings(DIMS), "fields": ["text"]}
    with PostgresStore.from_conn_string(dsn, schema=schema, index=base) as plain, \
            PostgresStore.from_conn_string(dsn, schema=schema, index={**base, "hybrid": True}) as hybrid:
        plain.setup()
        plain.put(("h",), "indexed", {"text": "refund paid by pix"})
        plain.put(("h",), "unindexed", {"text": "pix key changed"}, index=False)
        assert [r.key for r in plain.search(("h",), query="pix", limit=5)] == ["indexed"]
        found = hybrid.search(("h",), query="pix", limit=5)
        assert [r.key for r in found] == ["indexed", "unindexed"]
        assert found[0].score == pytest.approx(2 / 61) and found[1].score == pytest.approx(1 / 62)


async def test_async_api(vstore: PostgresStore) -> None:
    await vstore.aput(("a",), "x", {"text": "pix refund"})
    await vstore.aput(("a",), "y", {"text": "boleto payment"}, index=["text"])
    (top,) = await vstore.asearch(("a",), query="pix refund", limit=1)
    assert top.key == "x" and top.score == pytest.approx(1.0, abs=1e-5)


def test_field_paths_select_what_langgraph_selects() -> None:
    doc: dict[str, Any] = {
        "text": "t", "n": 3, "flag": True, "nested": {"a": {"b": "deep"}, "list": [1, 2]},
        "items": [{"name": "x", "tags": ["p", "q"]}, {"name": "y"}, {"other": 1}], "none": None,
    }
    paths = ["$", "text", "n", "flag", "nested", "nested.a.b", "nested.list", "items[*].name", "items[0].tags[*]",
             "items[-1]", "items[7].name", "{text,nested.a.b}", "{text,missing}", "*", "items[*].*", "none", "missing",
             "items[x]"]
    for path in paths:
        assert text_at_path(doc, tokenize_path(path)) == get_text_at_path(doc, path), path


def test_langgraph_json_store_section(dsn: str, schema: str, tmp_path: Path) -> None:
    (tmp_path / "embeddings.py").write_text(
        "from pgagentstate import HashEmbeddings\n_e = HashEmbeddings(32)\n"
        "def embed_texts(texts):\n    return _e.embed_documents(texts)\n"
    )
    config = {
        "graphs": {"agent": "./agent.py:graph"},
        "store": {
            "index": {"embed": "./embeddings.py:embed_texts", "dims": 32, "fields": ["text"]},
            "ttl": {"default_ttl": 60, "refresh_on_read": True},
        },
    }
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    store = PostgresStore.from_langgraph_config(tmp_path / "langgraph.json", dsn, schema=schema)
    try:
        store.setup()
        store.put(("m",), "k", {"text": "likes refunds by pix"})
        (hit,) = store.search(("m",), query="likes refunds by pix")
        assert hit.score == pytest.approx(1.0, abs=1e-5)
        assert store.ttl_config == {"default_ttl": 60, "refresh_on_read": True}
        item = store.get(("m",), "k")
        assert item is not None
    finally:
        store.close()
    hashed = PostgresStore.from_langgraph_config({"store": {"index": {"embed": "hash", "dims": 16}}}, dsn,
                                                 schema=schema)
    assert hashed.index_config is not None and hashed.embeddings is not None
    hashed.close()
