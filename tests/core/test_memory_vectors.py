"""Long-term memory by meaning: embeddings written with the items, vector and hybrid search, on a server
with pgvector (the embedded one: HNSW index) and without (PG15 here: exact search) — same results."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgagentstate import AsyncStateStore, HashEmbeddings, InvalidInput, MemoryIndex, StateStore, VersionConflict
from pgagentstate.crypto import Encryption, StaticKeyProvider
from pgagentstate.embedding import similarity

from ..conftest import PARTITIONED
from .statement_plans import captured, generic_plan, rows_read

DIMS = 64


class CountingEmbedder:
    """HashEmbeddings that records every batch it is asked to embed."""

    def __init__(self, dims: int = DIMS) -> None:
        self.inner = HashEmbeddings(dims)
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return self.inner.embed_documents(texts)

    @property
    def texts(self) -> list[str]:
        return [t for call in self.calls for t in call]


def index(embed: Any = None, **kw: Any) -> MemoryIndex:
    return MemoryIndex(dims=DIMS, embed=embed or HashEmbeddings(DIMS), fields=kw.pop("fields", ["text"]), **kw)


KINDS = ["plain", "sealed", "encrypted-plain-embeddings"]


def open_store(dsn: str, schema: str, kind: str, memory_index: MemoryIndex) -> StateStore:
    encryption = None
    if kind != "plain":
        encryption = Encryption(StaticKeyProvider({"k1": KEY}, active="k1"))
        if kind == "encrypted-plain-embeddings":
            memory_index = MemoryIndex(**{**_fields(memory_index), "encrypted_embeddings": "plain"})
    store = StateStore(dsn, schema=schema, encryption=encryption, memory_index=memory_index)
    store.setup()
    return store


KEY = os.urandom(32)


def _fields(i: MemoryIndex) -> dict[str, Any]:
    return {k: getattr(i, k) for k in ("dims", "embed", "fields", "distance", "kind", "ef_search")}


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def vstore(dsn: str, schema: str, kind: str, embedder: CountingEmbedder) -> Iterator[StateStore]:
    with open_store(dsn, schema, kind, index(embedder)) as s:
        yield s


DOCS = {
    "email": "the customer's email is meu@email.com",
    "order": "order 12345 arrived broken",
    "pix": "prefers refunds paid by pix",
    "refund": "refund requested for the broken parcel",
    "weather": "it was sunny in Lisbon",
}


def fill(store: StateStore, ns: tuple[str, ...] = ("u1", "facts")) -> None:
    store.put_memories([(ns, k, {"text": v, "kind": "fact"}) for k, v in DOCS.items()])


def test_vector_search_ranks_by_meaning_with_exact_scores(vstore: StateStore) -> None:
    fill(vstore)
    found = vstore.search_memory(("u1",), query="broken order refund", mode="vector", limit=3)
    assert [m.key for m in found] == ["refund", "order", "pix"]
    emb = HashEmbeddings(DIMS)
    q = emb.embed_query("broken order refund")
    for m in found:
        expected = similarity("cosine", emb.embed_query(DOCS[m.key]), q)
        assert m.score == pytest.approx(expected, abs=1e-5)
    page2 = vstore.search_memory(("u1",), query="broken order refund", mode="vector", limit=2, offset=2)
    assert [m.key for m in page2] == ["pix", "email"]


def test_hybrid_fuses_words_and_meaning(vstore: StateStore) -> None:
    fill(vstore)
    vstore.put_memory(("u1", "facts"), "unindexed", {"text": "broken screen"}, index=False)
    found = vstore.search_memory(("u1",), query="broken", limit=10)  # auto: hybrid with an index
    keys = [m.key for m in found]
    assert set(keys[:2]) == {"order", "refund"}  # by the word and by meaning
    assert "unindexed" in keys  # by the word only: it has no embedding
    assert all(m.score is not None and m.score > 0 for m in found)
    assert "unindexed" not in [m.key for m in vstore.search_memory(("u1",), query="broken", mode="vector")]
    assert [m.key for m in vstore.search_memory(("u1",), query="broken", mode="text")] == ["order", "refund",
                                                                                        "unindexed"]


def test_hybrid_counts_words_in_bounded_items(dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The words half of a hybrid search counts the query's words in the first `_WORD_SCAN` items (in the
    order stored) matching any of them, not in every one: a common word matches thousands at 100k."""
    from pgagentstate.ops import memory_index

    with open_store(dsn, schema, "plain", index()) as store:
        items: list[Any] = [(("w",), f"n{i:02}", {"text": f"pix note {i}"}, False) for i in range(29)]
        store.put_memories([*items, (("w",), "best", {"text": "pix refund"}, False)])
        assert store.search_memory(("w",), query="pix refund", mode="hybrid", limit=1)[0].key == "best"
        monkeypatch.setattr(memory_index, "_WORD_SCAN", 20)  # 20 rows: the depth a search of 10 looks at
        assert store.search_memory(("w",), query="pix refund", mode="hybrid", limit=1)[0].key == "n00"


def test_unchanged_texts_are_never_embedded_again(vstore: StateStore, embedder: CountingEmbedder) -> None:
    ns = ("u1",)
    vstore.put_memory(ns, "a", {"text": "likes pix", "n": 1})
    vstore.put_memory(ns, "a", {"text": "likes pix", "n": 2})  # only an unindexed field changed
    assert embedder.texts == ["likes pix"]
    vstore.put_memory(ns, "a", {"text": "likes boleto", "n": 2})
    assert embedder.texts == ["likes pix", "likes boleto"]
    embedder.calls.clear()
    vstore.put_memories(
        [(ns, "b", {"text": "same text"}), (ns, "c", {"text": "same text"}), (ns, "a", {"text": "likes boleto"})]
    )
    assert embedder.calls == [["same text"]]  # one batch, each distinct new text once
    (hit,) = vstore.search_memory(ns, query="likes boleto", mode="vector", limit=1)
    assert hit.key == "a" and hit.score == pytest.approx(1.0, abs=1e-5)


def test_batches_respect_batch_size(dsn: str, schema: str) -> None:
    embedder = CountingEmbedder()
    with open_store(dsn, schema, "plain", index(embedder, batch_size=3)) as store:
        store.put_memories([(("b",), f"k{i}", {"text": f"text number {i}"}) for i in range(7)])
        assert [len(c) for c in embedder.calls] == [3, 3, 1]
        assert len(store.search_memory(("b",), query="text number 5", mode="vector", limit=7)) == 7


def test_index_false_and_per_item_fields(vstore: StateStore) -> None:
    ns = ("u1",)
    vstore.put_memory(ns, "doc", {"text": "zebra", "title": "aardvark"})
    assert vstore.search_memory(ns, query="zebra", mode="vector")[0].key == "doc"
    vstore.put_memory(ns, "doc", {"text": "zebra", "title": "aardvark"}, index=["title"])
    (hit,) = vstore.search_memory(ns, query="aardvark", mode="vector")
    assert hit.score == pytest.approx(1.0, abs=1e-5)
    (hit,) = vstore.search_memory(ns, query="zebra", mode="vector")
    assert hit.score < 0.5  # the "text" embedding is gone
    vstore.put_memory(ns, "doc", {"text": "zebra", "title": "aardvark"}, index=False)
    assert vstore.search_memory(ns, query="aardvark", mode="vector") == []
    assert [m.key for m in vstore.search_memory(ns, query="aardvark", mode="text")] == ["doc"]
    with pytest.raises(InvalidInput):
        vstore.put_memory(ns, "doc", {"text": "x"}, index="title")  # type: ignore[arg-type]


def test_an_item_ranks_by_its_best_field(dsn: str, schema: str) -> None:
    with open_store(dsn, schema, "plain", index(fields=["title", "tags[*]"])) as store:
        store.put_memory(("d",), "one", {"title": "refund policy", "tags": ["pix", "boleto"]})
        store.put_memory(("d",), "two", {"title": "shipping times", "tags": ["courier"]})
        assert [m.key for m in store.search_memory(("d",), query="boleto", mode="vector", limit=1)] == ["one"]
        assert [m.key for m in store.search_memory(("d",), query="courier", mode="vector", limit=1)] == ["two"]
        assert len(store.search_memory(("d",), query="courier", mode="vector")) == 2  # one row per item


def test_filters_namespaces_ttl_and_selective_prefixes(vstore: StateStore) -> None:
    # Many near neighbours elsewhere: an index scan of the whole table would find none under ("rare",).
    vstore.put_memories([(("bulk", str(i % 7)), f"b{i}", {"text": f"refund {i}", "kind": "bulk"}) for i in range(400)])
    fill(vstore, ("rare", "facts"))
    found = vstore.search_memory(("rare",), query="refund", mode="vector")
    assert sorted(m.key for m in found) == sorted(DOCS)
    facts = vstore.search_memory((), query="refund", mode="vector", filter={"kind": "fact"}, limit=3)
    emb = HashEmbeddings(DIMS)
    nearest = sorted(DOCS, key=lambda k: -similarity("cosine", emb.embed_query(DOCS[k]), emb.embed_query("refund")))
    assert [m.key for m in facts] == nearest[:3]
    assert all(m.namespace[0] == "rare" for m in facts)
    vstore.put_memory(("rare", "facts"), "soon", {"text": "refund refund refund"}, ttl=0.3)
    assert vstore.search_memory(("rare",), query="refund refund", mode="vector", limit=1)[0].key == "soon"
    time.sleep(0.5)
    assert "soon" not in [m.key for m in vstore.search_memory(("rare",), query="refund refund", mode="vector")]


def test_a_write_without_the_index_leaves_no_stale_meaning(dsn: str, schema: str) -> None:
    with open_store(dsn, schema, "plain", index()) as indexed, StateStore(dsn, schema=schema) as plain:
        indexed.put_memory(("u",), "a", {"text": "loves chocolate cake"})
        plain.put_memory(("u",), "a", {"text": "allergic to peanuts"})  # a store without the index
        assert indexed.search_memory(("u",), query="chocolate cake", mode="vector") == []
        assert [m.key for m in indexed.search_memory(("u",), query="peanuts")] == ["a"]  # hybrid: by word
        indexed.put_memory(("u",), "a", {"text": "allergic to peanuts"})
        (hit,) = indexed.search_memory(("u",), query="allergic to peanuts", mode="vector")
        assert hit.score == pytest.approx(1.0, abs=1e-5)


def test_a_concurrent_writer_between_embedding_and_write(dsn: str, schema: str) -> None:
    """The embedder runs between reading what is stored and writing: a writer that changes a field we kept
    must not leave our item with its embedding."""
    other = StateStore(dsn, schema=schema, memory_index=index(fields=["a", "b"]))
    interfere = {"on": False}

    def embed(texts: list[str]) -> list[list[float]]:
        if interfere["on"]:
            interfere["on"] = False
            other.put_memory(("u",), "doc", {"a": "volcano eruption", "b": "kept text"})
        return HashEmbeddings(DIMS).embed_documents(texts)

    with other, open_store(dsn, schema, "plain", index(embed, fields=["a", "b"])) as store:
        store.put_memory(("u",), "doc", {"a": "kept text", "b": "first"})
        interfere["on"] = True
        store.put_memory(("u",), "doc", {"a": "kept text", "b": "second"})  # "a" kept, "b" re-embedded
        doc = store.get_memory(("u",), "doc")
        assert doc is not None and doc.value == {"a": "kept text", "b": "second"}
        assert store.search_memory(("u",), query="volcano eruption", mode="vector") == []
        store.put_memory(("u",), "doc", {"a": "kept text", "b": "second"})  # written again: whole again
        (hit,) = store.search_memory(("u",), query="kept text", mode="vector")
        assert hit.score == pytest.approx(1.0, abs=1e-5)


def test_versions_and_conflicts_through_the_index(vstore: StateStore) -> None:
    m = vstore.put_memory(("u",), "k", {"text": "one"}, expected_version=0)
    assert m.version == 1
    with pytest.raises(VersionConflict):
        vstore.put_memory(("u",), "k", {"text": "two"}, expected_version=0)
    assert vstore.put_memory(("u",), "k", {"text": "two"}, expected_version=1).version == 2
    with pytest.raises(VersionConflict):
        vstore.put_memory(("u",), "k", {"text": "three"}, expected_version=1)
    with pytest.raises(VersionConflict):
        vstore.put_memory(("u",), "missing", {"text": "x"}, expected_version=3)
    assert vstore.search_memory(("u",), query="two", mode="vector")[0].value == {"text": "two"}
    assert vstore.put_memories([(("u",), "k", {"text": "four"})], if_absent=True) == 0
    assert vstore.delete_memory(("u",), "k") and vstore.search_memory(("u",), query="two", mode="vector") == []


def test_bad_embeddings_write_nothing(dsn: str, schema: str) -> None:
    with open_store(dsn, schema, "plain", index(lambda texts: [[0.0] * (DIMS - 1) for _ in texts])) as store:
        with pytest.raises(InvalidInput, match="dimensions"):
            store.put_memory(("u",), "k", {"text": "x"})
        assert store.get_memory(("u",), "k") is None
    nan = index(lambda texts: [[float("nan")] * DIMS for _ in texts])
    with open_store(dsn, schema, "plain", nan) as store, pytest.raises(InvalidInput, match="NaN"):
        store.put_memory(("u",), "k", {"text": "x"})
    none = index(lambda texts: [])
    with open_store(dsn, schema, "plain", none) as store, pytest.raises(InvalidInput, match="0 vectors"):
        store.put_memories([(("u",), "k", {"text": "x"})])

    async def aembed(texts: list[str]) -> list[list[float]]:
        return HashEmbeddings(DIMS).embed_documents(texts)

    with pytest.raises(InvalidInput, match="async"):
        StateStore(dsn, schema=schema, memory_index=index(aembed))
    with pytest.raises(InvalidInput):
        MemoryIndex(dims=0, embed=aembed)
    with pytest.raises(InvalidInput):
        MemoryIndex(dims=8, embed=aembed, distance="manhattan")  # type: ignore[arg-type]
    with StateStore(dsn, schema=schema) as plain, pytest.raises(InvalidInput, match="memory index"):
        plain.search_memory(("u",), query="x", mode="vector")


async def test_async_store_with_an_async_embedder_and_langchain_embeddings(dsn: str, schema: str) -> None:
    from langchain_core.embeddings import Embeddings

    class LangChainEmbeddings(Embeddings):  # only the sync methods: LangChain runs them in a thread
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return HashEmbeddings(DIMS).embed_documents(texts)

        def embed_query(self, text: str) -> list[float]:
            return HashEmbeddings(DIMS).embed_query(text)

    calls: list[int] = []

    async def aembed(texts: list[str]) -> list[list[float]]:
        calls.append(len(texts))
        return HashEmbeddings(DIMS).embed_documents(texts)

    async with AsyncStateStore(dsn, schema=schema, memory_index=index(aembed)) as store:
        await store.setup()
        await store.put_memories([(("a",), "x", {"text": "pix refund"}), (("a",), "y", {"text": "boleto"})])
        (hit, _) = await store.search_memory(("a",), query="pix", mode="vector")
        assert hit.key == "x" and calls == [2, 1]  # the documents, then the query
    fake = LangChainEmbeddings()
    async with AsyncStateStore(dsn, schema=schema, memory_index=index(fake)) as store:
        await store.put_memory(("lc",), "x", {"text": "pix refund"})
        (hit,) = await store.search_memory(("lc",), query="pix refund", mode="vector")
        assert hit.score == pytest.approx(1.0, abs=1e-5)
    with StateStore(dsn, schema=schema, memory_index=index(fake)) as sync_store:
        assert sync_store.search_memory(("lc",), query="pix refund", mode="vector")[0].key == "x"


def test_search_mode_is_reported(dsn: str, schema: str) -> None:
    with open_store(dsn, schema, "plain", index()) as store:
        mode = store.memory_search_mode()
        assert mode is not None
        with psycopg.connect(dsn) as conn:
            has_vector = conn.execute("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        if has_vector and has_vector[0]:
            assert mode.pgvector and mode.ann_index and mode.search.startswith("approximate")
        else:
            assert mode.pgvector is None and mode.search.startswith("exact")
    with StateStore(dsn, schema=schema) as plain:
        assert plain.memory_search_mode() is None


def test_sealed_embeddings_reveal_nothing(dsn: str, schema: str) -> None:
    with open_store(dsn, schema, "sealed", index()) as store:
        fill(store)
        assert store.search_memory(("u1",), query="broken order refund", mode="vector")[0].key == "refund"
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            sql.SQL("SELECT embedding, norm, sealed FROM {}").format(sql.Identifier(schema, "memory_vectors"))
        ).fetchall()
    assert len(rows) == len(DOCS) and all(e is None and n is None and s for e, n, s in rows)


def test_embeddings_are_checked_element_by_element_only_when_their_sum_is_not_finite() -> None:
    from pgagentstate.embedding import Embedder

    def checked(vector: list[float]) -> list[float]:
        return Embedder(MemoryIndex(dims=4, embed=lambda texts: [vector]), asynchronous=False).documents(["x"])[0]

    assert checked([1, 2.5, -3, 0]) == [1.0, 2.5, -3.0, 0.0]  # ints become floats
    assert checked([1e308, 1e308, 0.0, 0.0]) == [1e308, 1e308, 0.0, 0.0]  # the sum overflows; no element does
    for bad in ([0.0, float("inf"), 0.0, 0.0], [float("-inf"), float("inf"), 0.0, 0.0], [0.0, 0.0, float("nan"), 1]):
        with pytest.raises(InvalidInput, match="NaN or infinite"):
            checked(bad)


@pytest.mark.parametrize("values", [[], [0.0], [1.5, -2.25, 1e-300, -0.0, 3e300, 0.1] * 64])
def test_float8_arrays_go_out_as_psycopg_would_send_them_and_come_back_equal(dsn: str, values: list[float]) -> None:
    from psycopg.adapt import PyFormat, Transformer

    from pgagentstate.embedding import Float8Array

    if values:  # psycopg sends an empty list as an untyped empty array
        assert Float8Array(values).data == bytes(Transformer().get_dumper(values, PyFormat.BINARY).dump(values))
    with psycopg.connect(dsn) as conn:
        back = conn.execute("SELECT %b::float8[]", (Float8Array(values),)).fetchone()
    assert back is not None and back[0] == values


@pytest.mark.skipif(PARTITIONED, reason="on hash partitions a custom plan prunes at plan time and always wins")
def test_memory_writes_run_on_generic_plans_once_prepared(dsn: str, schema: str) -> None:
    """Every statement a memory write sends keeps its prepared plan. With their items as arrays, the
    custom plans of a one-item write counted one row per ``unnest`` where the generic plan guessed ten,
    so Postgres planned the write again on every call (0 generic plans in 35; 0.48 ms of planning a put
    at 10k memories, against a 4-6 ms put)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        indexed = StateStore(conn, schema=schema, memory_index=index())
        indexed.setup()
        plain = StateStore(conn, schema=schema)
        for n in range(20):
            indexed.put_memory(("u1", "facts"), f"k{n}", {"text": f"fact number {n}"})
            indexed.put_memories([(("u1", "facts"), f"m{n}-{i}", {"text": f"batch {n} fact {i}"}) for i in range(3)])
            plain.put_memories([(("u2", "notes"), f"p{n}-{i}", {"text": f"note {n} {i}"}) for i in range(3)])
        rows = conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements").fetchall()
    plans = {" ".join(text.split())[:70]: (generic, custom) for text, generic, custom in rows if generic + custom >= 15}
    assert len(plans) >= 3, plans  # the stored hashes read, the indexed write, the plain write
    assert {text: p for text, p in plans.items() if p[0] < 5} == {}


@pytest.mark.parametrize("statement", ["memory_vector_hashes", "memory_write_indexed"])
@pytest.mark.parametrize("change", ["same text", "new text", "one field fewer"])
def test_a_memory_write_reads_only_its_items_embeddings_on_a_plan_made_while_the_table_was_small(
    dsn: str, schema: str, change: str, statement: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection makes a prepared statement's generic plan once and keeps it until an ANALYZE. Made
    while the tables were small, the plan of the stored-hash read joined the embeddings on the items'
    columns with only the tenant as index condition: every embedding of the tenant read per put once the
    table had grown (602 here). One probe per item now. Left as it was: the write's deletion of the fields
    a value no longer embeds, whose scan does the same in that plan until autovacuum's ANALYZE re-plans
    it; gating it on one more probe cost every put 1.5% on analyzed tables (3 in-process A/B runs of
    1,500 one-item puts a side: 1.007-1.021x), more than that window is worth."""
    with open_store(dsn, schema, "plain", index(fields=["text", "title"])) as store:
        value = {"text": "the parcel arrived broken", "title": "broken parcel"}
        store.put_memory(("u0", "facts"), "k", value)
        new = {"same text": value, "new text": {**value, "text": "the parcel arrived late"},
               "one field fewer": {"text": value["text"]}}[change]  # fmt: skip
        with captured(monkeypatch) as sent:
            store.put_memory(("u0", "facts"), "k", new)
        assert store.get_memory(("u0", "facts"), "k").value == new  # type: ignore[union-attr]
        assert [s.name for s in sent] == ["memory_vector_hashes", "memory_write_indexed"]
        (stmt,) = [s for s in sent if s.name == statement]

        def grow() -> None:  # other users' memories, committed after the plan was made
            store.put_memories([((f"u{i}", "facts"), "k", {"text": f"fact {i}", "title": f"t {i}"})
                                for i in range(1, 301)])  # fmt: skip

        with psycopg.connect(dsn) as conn:  # one transaction, rolled back: the write is not kept
            tree = generic_plan(conn, schema, stmt, then=grow)
            conn.rollback()
    assert rows_read(tree, "memory_vectors", deletes=False) <= 4  # the item's two embeddings, twice at most
