"""Long-term memory by meaning: embedding what a store writes, and searching by vector or hybrid.

A store with a :class:`~pgagentstate.embedding.MemoryIndex` writes items through
``memory_write_indexed`` (item and embeddings in one statement) and searches them with
``memory_search_vector`` / ``memory_search_hybrid``. What the server offers is detected once per store
(:class:`VectorMode`): with pgvector the searches order by the ANN index's expression, without it they are
exact (``memory_dot``). An encrypted store seals its embeddings by default; those are searched here, in
Python, over the items under the prefix (the server cannot compare ciphertexts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .. import textsearch
from ..embedding import Embedder, Float8Array, MemoryIndex, float4_bytes, from_float4_bytes, norm, similarity, text_hash
from ..errors import InvalidInput
from ..models import Memory
from ..sealing import ad
from .base import Call, Ctx, Op, Row, Stmt, Tx, json_b64, json_rows, json_str
from .memory_rows import contains, memory_from_row, ns_path, word_params

_OPERATORS = {"cosine": "<=>", "l2": "<->", "inner_product": "<#>"}
_OPCLASS = {"cosine": "cosine_ops", "l2": "l2_ops", "inner_product": "ip_ops"}
# Reciprocal rank fusion looks this many candidates deep in each ranking (at least).
_MIN_DEPTH = 20
# A hybrid search counts the query's words in at most this many items matching any of them (the first
# stored): at 100k items a common word matches thousands, and counting them all took tens of ms.
_WORD_SCAN = 1000


@dataclass(frozen=True, slots=True)
class VectorMode:
    """What the server offers for search by meaning (see :meth:`StateStore.memory_search_mode`)."""

    pgvector: str | None  # pgvector's version, None when it is not installed (or not on the search path)
    available: bool  # the server could install pgvector (pg_available_extensions)
    halfvec: bool  # pgvector >= 0.7: half-precision vectors can be indexed
    ann_index: bool  # the configured HNSW/IVFFlat index exists

    @property
    def search(self) -> str:
        if self.pgvector is None:
            return "exact (no pgvector: embeddings in real[], exact search in SQL)"
        if not self.ann_index:
            return f"exact (pgvector {self.pgvector}, no ANN index for this configuration)"
        return f"approximate (pgvector {self.pgvector}, ANN index) with exact fallback for selective filters"


class VectorSettings:
    """A store's index, its embedder and the server's mode (detected on first use, again by setup)."""

    def __init__(self, index: MemoryIndex, embedder: Embedder, schema: str) -> None:
        self.index = index
        self.embedder = embedder
        self.schema = schema
        self.mode: VectorMode | None = None

    def vtype(self, mode: VectorMode) -> str:
        return "halfvec" if self.index.vector_type == "halfvec" and mode.halfvec else "vector"

    def index_name(self, vtype: str) -> str:
        i = self.index
        return f"memory_vectors_{i.kind}_{vtype}_{i.dims}_{i.distance}"

    def sealed(self, ctx: Ctx) -> bool:
        return ctx.cipher is not None and self.index.encrypted_embeddings == "sealed"

    def digest(self, ctx: Ctx, text: str) -> bytes:
        if ctx.cipher is not None:
            return ctx.cipher.keyed_digest("memory-embedding", text.encode())[:16]
        return text_hash(text)


def _settings(ctx: Ctx) -> VectorSettings:
    vs = ctx.memory_index
    assert isinstance(vs, VectorSettings)
    return vs


def detect(ctx: Ctx) -> Op[VectorMode]:
    vs = _settings(ctx)
    if vs.mode is None:
        vs.mode = yield from _detect(vs)
    return vs.mode


def _detect(vs: VectorSettings) -> Op[VectorMode]:
    names = {"vector_index": vs.index_name("vector"), "halfvec_index": vs.index_name("halfvec")}
    (row,) = yield Tx((Stmt("memory_vector_mode", {**names, "schema_name": vs.schema}, "one"),))
    pgvector, halfvec, has_vector, has_halfvec, available = row
    mode = VectorMode(pgvector=pgvector, available=available, halfvec=halfvec, ann_index=False)
    if pgvector is not None and vs.index.kind != "flat":
        # The index is named after what it indexes, which depends on the server (halfvec or not).
        mode = replace(mode, ann_index=bool(has_halfvec if vs.vtype(mode) == "halfvec" else has_vector))
    return mode


def setup(ctx: Ctx) -> Op[VectorMode]:
    """Install pgvector when possible and create the configured ANN index (under the migration lock)."""
    vs = _settings(ctx)
    yield Tx(
        (
            Stmt("migrate_lock", {"schema_name": vs.schema}, "none"),
            Stmt("memory_create_extension", {}, "none"),
        ),
        patient=True,
    )
    mode = yield from _detect(vs)
    if mode.pgvector is not None and vs.index.kind != "flat":
        i = vs.index
        if i.kind == "hnsw":
            with_ = f"WITH (m = {int(i.m)}, ef_construction = {int(i.ef_construction)})"
        else:
            with_ = f"WITH (lists = {int(i.lists or 100)})"
        vtype = vs.vtype(mode)
        subs = (
            ("index", vs.index_name(vtype)),
            ("method", i.kind),
            ("vtype", vtype),
            ("dims", str(int(i.dims))),
            ("opclass", f"{vtype}_{_OPCLASS[i.distance]}"),
            ("with", with_),
        )
        yield Tx(
            (
                Stmt("migrate_lock", {"schema_name": vs.schema}, "none"),
                Stmt("memory_create_ann_index", {}, "none", subs=subs),
            ),
            patient=True,
        )
        mode = replace(mode, ann_index=True)
    vs.mode = mode
    return mode


# --- writes ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One item to write: its place, its sealed value and search terms, and the texts to embed."""

    ns_path: str
    key: str
    labels: tuple[str, ...]
    value: str
    terms: str | None
    texts: dict[str, str]


def item_row(e: Entry) -> tuple[str, ...]:
    """An item as a row of the memory writes' ``%(items)s`` (JSON fragments: ns_path, key, value, terms)."""
    return (json_str(e.ns_path), json_str(e.key), e.value, json_str(e.terms))


def texts_for(ctx: Ctx, value: Mapping[str, Any], index: bool | Sequence[str] | None, path: str) -> dict[str, str]:
    """The texts of ``value`` to embed: the index's fields, the item's own list, or none (``False``)."""
    if index is False:
        return {}
    vs = _settings(ctx)
    if index is None or index is True:
        return vs.index.texts(value)
    if isinstance(index, str) or not isinstance(index, Sequence):
        raise InvalidInput("index must be False, None or a list of field paths", path=path)
    return vs.index.texts(value, [str(f) for f in index])


def write(
    ctx: Ctx,
    entries: Sequence[Entry],
    *,
    ttl: float | None,
    user_id: str,
    if_absent: bool,
    expected_version: int | None,
    hold: bool = False,
) -> Op[list[Row]]:
    """Write items and their embeddings; returns the rows written (memory columns). ``hold``: the caller
    holds a transaction open (distillation's watermark); it commits with the write."""
    vs = _settings(ctx)
    sealed = vs.sealed(ctx)
    stored: dict[tuple[str, str, str], tuple[bytes, int, bool]] = {}
    if any(e.texts for e in entries):
        (rows,) = yield Tx(
            (
                Stmt(
                    "memory_vector_hashes",
                    {"items": json_rows((json_str(e.ns_path), json_str(e.key)) for e in entries)},
                    "all",
                ),
            ),
            hold=hold,
        )
        stored = {(r[0], r[1], r[2]): (bytes(r[3]), r[4], r[5]) for r in rows}
    fields: list[tuple[Entry, str, bytes, str | None]] = []  # entry, field, hash, text to embed (None: kept)
    kept: list[int] = []
    for e in entries:
        n_kept = 0
        for field, text in e.texts.items():
            digest = vs.digest(ctx, text)
            if stored.get((e.ns_path, e.key, field)) == (digest, vs.index.dims, sealed):
                fields.append((e, field, digest, None))
                n_kept += 1
            else:
                fields.append((e, field, digest, text))
        kept.append(n_kept)
    unique = list(dict.fromkeys(t for *_, t in fields if t is not None))
    vectors: list[list[float]] = []
    if unique:
        vectors = yield from _embed(vs, unique)
    slot_of = {t: i for i, t in enumerate(unique)}
    field_rows: list[tuple[str, ...]] = []  # [ns_path, key, field, hash, slot, norm, sealed]: see the statement
    for e, name, digest, pending in fields:
        slot = norm_text = sealed_text = "null"
        if pending is not None:
            vector = vectors[slot_of[pending]]
            if sealed:
                assert ctx.cipher is not None
                where = ad(ctx.tenant, "memory-vector", e.ns_path, e.key, name)
                sealed_text = json_b64(ctx.cipher.seal_bytes(float4_bytes(vector), where))
            else:
                slot = str(slot_of[pending])
                norm_text = f'"{norm(vector)!r}"'  # as text: a norm that overflowed is "inf", not JSON
        field_rows.append((json_str(e.ns_path), json_str(e.key), json_str(name), json_b64(digest), slot, norm_text,
                           sealed_text))
    flat = None if sealed or not vectors else Float8Array([x for v in vectors for x in v])
    params = {
        "items": json_rows((*item_row(e), str(k)) for e, k in zip(entries, kept, strict=True)),
        "fields": json_rows(field_rows),
        "flat": flat,
        "dims": vs.index.dims,
        "user_id": user_id,
        "ttl": ttl,
        "if_absent": if_absent,
        "expected": expected_version,
    }
    (rows,) = yield Tx((Stmt("memory_write_indexed", params, "all"),))
    return list(rows)


def _embed(vs: VectorSettings, texts: list[str]) -> Op[list[list[float]]]:
    vectors = yield Call(vs.embedder.documents, (texts,))
    return list(vectors)


def _embed_query(vs: VectorSettings, text: str) -> Op[list[float]]:
    vector = yield Call(vs.embedder.query, (text,))
    return list(vector)


# --- search ------------------------------------------------------------------------------------------------


def _subs(vs: VectorSettings, mode: VectorMode) -> tuple[tuple[str, str], ...]:
    dims = str(int(vs.index.dims))
    distance = vs.index.distance
    if mode.pgvector is not None:
        op = _OPERATORS[distance]
        vtype = vs.vtype(mode)
        ann = f"(v.embedding::{vtype}({dims})) {op} (%(qvec)b::float8[])::{vtype}({dims})"
        exact = f"(v.embedding::vector({dims})) {op} (%(qvec)b::float8[])::vector({dims})"
    else:
        dot = "{schema}.memory_dot(v.embedding, %(qvec)b::float8[])"
        if distance == "cosine":
            exact = f"1 - {dot} / nullif(v.norm * %(qnorm)s, 0)"
        elif distance == "inner_product":
            exact = f"-{dot}"
        else:
            exact = f"sqrt(greatest(v.norm * v.norm + %(qnorm)s * %(qnorm)s - 2 * {dot}, 0))"
        ann = exact
    score = "nullif(1 - hits.dist, 'NaN')" if distance == "cosine" else "-hits.dist"
    return (("dims", dims), ("ann_dist", ann), ("exact_dist", exact), ("score", score))


def search(
    ctx: Ctx,
    *,
    query: str,
    words: list[tuple[str, ...]] | None,
    pattern: Mapping[str, Any],
    user_id: str | None,
    filter_json: str | None,
    filter: Mapping[str, Any] | None,
    limit: int,
    offset: int,
    refresh_ttl: bool,
) -> Op[list[Memory]]:
    """Items nearest to ``query`` by meaning; with ``words`` (a hybrid search), fused with the ranking by
    query words."""
    vs = _settings(ctx)
    mode = yield from detect(ctx)
    qvec = yield from _embed_query(vs, query)
    if ctx.cipher is not None and (vs.sealed(ctx) or filter is not None or words):
        # Sealed embeddings, encrypted values (filters) or no stored search terms: rank here.
        return (yield from _search_here(ctx, vs, qvec, words, pattern, user_id, filter, limit, offset, refresh_ttl))
    need = limit + offset
    depth = max(need, _MIN_DEPTH) if words else need
    # Embeddings the index scan passes on (filtered as they come): enough for `depth` items when each
    # has one embedding per field (a wildcard path may give an item several: twice as many for those).
    # Fewer distinct items than needed fall back to exact search, so this bounds work, never results.
    ann_limit = depth * sum(2 if any(c in f for c in "*{") else 1 for f in vs.index.fields or ("$",))
    params: dict[str, Any] = {
        **pattern,
        "qvec": Float8Array(qvec),
        "qnorm": norm(qvec),
        "ann": mode.ann_index,
        "ann_limit": ann_limit,
        "user_id": user_id,
        "filter": filter_json,
        "limit": limit,
        "offset": offset,
        "refresh": refresh_ttl,
    }
    params["depth"] = depth
    ef_params = {"ef_search": vs.index.ef_search, "schema_name": vs.schema}  # see _memory_ef_search
    subs = _subs(vs, mode)
    if (
        mode.ann_index
        and vs.index.kind == "hnsw"
        and not words
        and user_id is None
        and filter_json is None
        and pattern.get("ns_regex") is None
    ):
        # A namespace prefix and nothing else (LangGraph's search by default): one prepared statement, one
        # plan for every call (see memory_search_hnsw in sql/memory_vectors.sql).
        (rows,) = yield Tx(
            (Stmt("memory_search_hnsw", {**params, **ef_params}, "all", subs=subs),), replica=not refresh_ttl
        )
        return [memory_from_row(ctx, r) for r in rows]
    name = "memory_search_vector"
    if words:
        name = "memory_search_hybrid"
        params.update(word_params(words))
        params["word_scan"] = max(_WORD_SCAN, depth)
    stmts: list[Stmt] = []
    if mode.ann_index:
        settings = {**ef_params, "ann_limit": ann_limit, "probes": str(vs.index.probes)}
        stmts.append(Stmt("memory_ann_settings", settings, "none"))
    # A custom plan: as for memory_search, the best one depends on the namespace's size, the filters and
    # the words.
    stmts.append(Stmt(name, params, "all", subs=subs, custom_plan=True))
    results = yield Tx(tuple(stmts), replica=not refresh_ttl)
    return [memory_from_row(ctx, r) for r in results[-1]]


def _search_here(
    ctx: Ctx,
    vs: VectorSettings,
    qvec: list[float],
    words: list[tuple[str, ...]] | None,
    pattern: Mapping[str, Any],
    user_id: str | None,
    filter: Mapping[str, Any] | None,
    limit: int,
    offset: int,
    refresh_ttl: bool,
) -> Op[list[Memory]]:
    """Decrypt the items (and sealed embeddings) under the prefix and rank them here, as the SQL would."""
    (rows,) = yield Tx(
        (Stmt("memory_search_local", {**pattern, "user_id": user_id, "filter": None, "dims": vs.index.dims}, "all"),),
        replica=True,
    )
    distance = vs.index.distance
    by_meaning: list[tuple[float, int, Memory]] = []
    candidates: list[tuple[int, Memory]] = []
    for row in rows:
        m = memory_from_row(ctx, row)
        if filter is not None and not contains(m.value, dict(filter)):
            continue
        seq = row[13]
        candidates.append((seq, m))
        if not row[9]:
            continue  # its embeddings belong to an older value
        vectors = [_open_vector(ctx, row, f, sealed) for f, sealed in zip(row[10], row[11], strict=True)]
        vectors += [list(v) for v in row[12]]
        if vectors:
            by_meaning.append((max(similarity(distance, v, qvec) for v in vectors), seq, m))
    by_meaning.sort(key=lambda t: (-t[0], t[1]))
    found: list[Memory]
    if words:
        depth = max(limit + offset, _MIN_DEPTH)
        by_words = sorted(
            ((textsearch.local_matches(m.value, words), seq, m) for seq, m in candidates), key=lambda t: (-t[0], t[1])
        )
        fused: dict[tuple[tuple[str, ...], str], list[Any]] = {}
        for ranking in (by_meaning[:depth], [t for t in by_words if t[0]][:depth]):
            for rank, (_, seq, m) in enumerate(ranking, 1):
                fused.setdefault((m.namespace, m.key), [0.0, seq, m])[0] += 1.0 / (60 + rank)
        found = [replace(m, score=score) for score, _, m in sorted(fused.values(), key=lambda t: (-t[0], t[1]))]
    else:
        found = [replace(m, score=score) for score, _, m in by_meaning]
    found = found[offset : offset + limit]
    if refresh_ttl and found:
        paths = {"ns_paths": [ns_path(m.namespace) for m in found], "keys": [m.key for m in found]}
        yield Tx((Stmt("memory_refresh_ttl", paths, "none"),))
    return found


def _open_vector(ctx: Ctx, row: Row, field: str, sealed: bytes) -> list[float]:
    assert ctx.cipher is not None
    where = ad(ctx.tenant, "memory-vector", ns_path(row[0]), row[1], field)
    return from_float4_bytes(ctx.cipher.open_bytes(bytes(sealed), where))
