"""Embeddings for long-term memory: the index configuration, the embedder it calls, and the texts it embeds.

A store configured with a :class:`MemoryIndex` embeds the configured fields of every memory it writes and
searches them by meaning. ``embed`` is any LangChain ``Embeddings`` (``embed_documents`` /
``aembed_documents`` / ``embed_query``) or a plain callable ``list[str] -> list[list[float]]``, sync or
async. Texts are embedded in batches, and a text that is stored already for the same item and field is
never embedded again (its hash is compared first).

Field paths are LangGraph's (``"text"``, ``"a.b"``, ``"items[*].name"``, ``"items[-1]"``, ``"{a,b}"``,
``"*"``; ``"$"`` is the whole value as JSON). A path that yields several texts stores one embedding per
text, named ``path.0``, ``path.1``...; an item ranks by its best matching one.
"""

from __future__ import annotations

import array
import hashlib
import inspect
import itertools
import json
import math
import struct
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

from .errors import InvalidInput

Distance = Literal["cosine", "l2", "inner_product"]
EmbedFunc = Callable[[list[str]], "list[list[float]] | Awaitable[list[list[float]]]"]

_DISTANCES = ("cosine", "l2", "inner_product")
_KINDS = ("hnsw", "ivfflat", "flat")
_VECTOR_TYPES = ("vector", "halfvec")
# pgvector's HNSW and IVFFlat indexes take at most 2,000 dimensions (halfvec: 4,000).
_MAX_INDEXED_DIMS = {"vector": 2000, "halfvec": 4000}


@dataclass(frozen=True)
class MemoryIndex:
    """How a store embeds and searches memories by meaning.

    Args:
        dims: Dimensions of the embeddings ``embed`` returns (checked on every call).
        embed: LangChain ``Embeddings``, or a callable ``list[str] -> list[list[float]]`` (sync or async).
        fields: Paths of the texts to embed in each value (``("$",)``: the whole value as JSON).
        distance: ``"cosine"`` (scores are cosine similarity), ``"inner_product"`` (the dot product) or
            ``"l2"`` (minus the Euclidean distance): higher scores are always closer.
        kind: With pgvector, ``"hnsw"`` (default) or ``"ivfflat"`` approximate indexes, or ``"flat"`` (exact
            search, no index). Without pgvector every search is exact.
        vector_type: ``"halfvec"`` indexes half-precision vectors (pgvector >= 0.7; older versions index
            full precision and :meth:`~pgagentstate.StateStore.memory_search_mode` says so).
        m, ef_construction: HNSW build parameters (pgvector's defaults, as the peer's). A graph built with
            ef_construction 128 finds more true neighbours for the same search work (100k clustered
            384-dimension memories: recall@10 0.95 at ef_search 40 instead of 0.81, so 0.96 at ef_search 48
            in 0.96x the peer's search time), but every insert into it costs about twice as much, and
            inserting into the index is most of a put: worth it for search-heavy memories only.
        ef_search: HNSW candidates per search. ``None`` (default): scaled to the embeddings stored,
            48 x (rows / 10,000)^0.6, at least pgvector's default 40 -- a larger graph needs more candidates
            for the same recall (recall@10 0.96-0.97 at 10k and 0.96 at 100k clustered 384-dimension memories,
            see docs/benchmarks.md). Raised to the number of rows a search needs when that is larger.
        lists, probes: IVFFlat parameters (``lists`` default: rows / 1000 at setup, at least 1).
        batch_size: Texts per call to ``embed``.
        encrypted_embeddings: For a store with encryption: ``"sealed"`` (default) encrypts each embedding
            like the value and searches them in this process, over the namespace searched; ``"plain"``
            stores them readable, for the server's index — see docs/security.md for what they reveal.
    """

    dims: int
    embed: Any
    fields: Sequence[str] = ("$",)
    distance: Distance = "cosine"
    kind: Literal["hnsw", "ivfflat", "flat"] = "hnsw"
    vector_type: Literal["vector", "halfvec"] = "vector"
    m: int = 16
    ef_construction: int = 64
    ef_search: int | None = None
    lists: int | None = None
    probes: int = 10
    batch_size: int = 256
    encrypted_embeddings: Literal["sealed", "plain"] = "sealed"
    _paths: tuple[tuple[str, tuple[str, ...]], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.dims, bool) or not isinstance(self.dims, int) or self.dims <= 0:
            raise InvalidInput(f"dims must be a positive integer, not {self.dims!r}", path="index.dims")
        if self.embed is None or not (callable(self.embed) or hasattr(self.embed, "embed_documents")):
            raise InvalidInput(
                "embed must be LangChain Embeddings or a callable list[str] -> list[list[float]]",
                path="index.embed",
            )
        checks = [
            ("distance", self.distance, _DISTANCES),
            ("kind", self.kind, _KINDS),
            ("vector_type", self.vector_type, _VECTOR_TYPES),
            ("encrypted_embeddings", self.encrypted_embeddings, ("sealed", "plain")),
        ]
        for name, value, allowed in checks:
            if value not in allowed:
                raise InvalidInput(f"{name} must be one of {', '.join(allowed)}, not {value!r}", path=f"index.{name}")
        for name in ("m", "ef_construction", "ef_search", "probes", "batch_size"):
            value = getattr(self, name)
            if name == "ef_search" and value is None:
                continue  # scaled to the rows stored
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidInput(f"{name} must be a positive integer, not {value!r}", path=f"index.{name}")
        if self.lists is not None and (not isinstance(self.lists, int) or self.lists <= 0):
            raise InvalidInput(f"lists must be a positive integer, not {self.lists!r}", path="index.lists")
        if self.kind != "flat" and self.dims > _MAX_INDEXED_DIMS[self.vector_type]:
            raise InvalidInput(
                f"pgvector indexes {self.vector_type} of at most {_MAX_INDEXED_DIMS[self.vector_type]} dimensions; "
                f"use kind='flat' (exact search) or vector_type='halfvec' for {self.dims}",
                path="index.dims",
            )
        fields = (self.fields,) if isinstance(self.fields, str) else tuple(self.fields or ("$",))
        object.__setattr__(self, "fields", fields)
        paths = tuple((p, tuple(tokenize_path(p))) for p in check_fields(fields, "index.fields"))
        object.__setattr__(self, "_paths", paths)

    def texts(self, value: Mapping[str, Any], fields: Sequence[str] | None = None) -> dict[str, str]:
        """field name -> text to embed, for ``value`` (``fields``: a per-item override of the paths)."""
        paths = self._paths if fields is None else tuple((p, tuple(tokenize_path(p))) for p in fields)
        out: dict[str, str] = {}
        for path, tokens in paths:
            found = text_at_path(value, tokens)
            for i, text in enumerate(found):
                out[f"{path}.{i}" if len(found) > 1 else path] = text
        return out


def check_fields(fields: Any, path: str) -> tuple[str, ...]:
    if isinstance(fields, str) or not isinstance(fields, Sequence):
        raise InvalidInput("index fields must be a list of paths", path=path)
    for i, f in enumerate(fields):
        if not isinstance(f, str) or not f:
            raise InvalidInput("an index field must be a non-empty string path", path=f"{path}[{i}]")
    return tuple(fields)


# --- field paths (LangGraph's syntax and semantics) ------------------------------------------------------


def tokenize_path(path: str) -> list[str]:
    """``"a.b[0].{c,d}"`` -> ``["a", "b", "[0]", "{c,d}"]``; ``"$"`` -> ``[]`` (the whole value)."""
    if path == "$":
        return []
    tokens: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(path):
        ch = path[i]
        if ch in "[{":
            if current:
                tokens.append("".join(current))
                current = []
            close = "]" if ch == "[" else "}"
            depth, j = 1, i + 1
            while j < len(path) and depth:
                depth += (path[j] == ch) - (path[j] == close)
                j += 1
            tokens.append(path[i:j])
            i = j
            continue
        if ch == ".":
            if current:
                tokens.append("".join(current))
                current = []
        else:
            current.append(ch)
        i += 1
    if current:
        tokens.append("".join(current))
    return tokens


def _as_text(value: Any) -> list[str]:
    if isinstance(value, bool | int | float | str):
        return [str(value)]
    if isinstance(value, list | dict):
        return [json.dumps(value, sort_keys=True, ensure_ascii=False)]
    return []


def text_at_path(value: Any, tokens: Sequence[str]) -> list[str]:
    """The texts a tokenized path selects in ``value`` (missing parts select nothing)."""
    if not tokens:
        return [json.dumps(value, sort_keys=True, ensure_ascii=False)]

    def walk(obj: Any, pos: int) -> list[str]:
        if pos == len(tokens):
            return _as_text(obj)
        token = tokens[pos]
        out: list[str] = []
        if token.startswith("[") and token.endswith("]"):
            if isinstance(obj, list):
                index = token[1:-1]
                if index == "*":
                    for item in obj:
                        out += walk(item, pos + 1)
                else:
                    try:
                        n = int(index)
                    except ValueError:
                        return []
                    n = n + len(obj) if n < 0 else n
                    if 0 <= n < len(obj):
                        out += walk(obj[n], pos + 1)
        elif token.startswith("{") and token.endswith("}"):
            if isinstance(obj, dict):
                for name in (f.strip() for f in token[1:-1].split(",")):
                    current: Any = obj
                    for part in tokenize_path(name):
                        current = current.get(part) if isinstance(current, dict) else None
                        if current is None:
                            break
                    if current is not None:
                        out += _as_text(current)
        elif token == "*":
            items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else ()
            for item in items:
                out += walk(item, pos + 1)
        elif isinstance(obj, dict) and token in obj:
            out += walk(obj[token], pos + 1)
        return out

    return walk(value, 0)


# --- calling the embedder ----------------------------------------------------------------------------------


def text_hash(text: str) -> bytes:
    """What tells an unchanged text (16 bytes of SHA-256; an encrypted store uses a keyed digest)."""
    return hashlib.sha256(text.encode()).digest()[:16]


class Embedder:
    """``MemoryIndex.embed`` adapted to the store that calls it: ``documents`` and ``query`` return vectors
    (sync store) or awaitables of them (async store), checked for count, dimensions and finiteness."""

    def __init__(self, index: MemoryIndex, *, asynchronous: bool) -> None:
        self.index = index
        self.asynchronous = asynchronous
        embed = index.embed
        self._docs: Callable[[list[str]], Any]
        self._query: Callable[[str], Any] | None = None
        if hasattr(embed, "embed_documents"):  # LangChain Embeddings
            if asynchronous and hasattr(embed, "aembed_documents"):
                self._docs = embed.aembed_documents
                self._query = getattr(embed, "aembed_query", None)
            else:
                self._docs = embed.embed_documents
                self._query = getattr(embed, "embed_query", None)
        else:
            self._docs = embed
        self._is_async = _is_async(self._docs)
        if self._is_async and not asynchronous:
            raise InvalidInput(
                "this embedder is async; the sync StateStore needs a sync callable or LangChain Embeddings "
                "(or use AsyncStateStore)",
                path="index.embed",
            )

    def documents(self, texts: list[str]) -> Any:
        if self._is_async:
            return self._adocuments(texts)
        out: list[list[float]] = []
        for batch in _batches(texts, self.index.batch_size):
            out += self._check(self._docs(batch), len(batch))
        return out

    async def _adocuments(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for batch in _batches(texts, self.index.batch_size):
            out += self._check(await self._docs(batch), len(batch))
        return out

    def query(self, text: str) -> Any:
        if self._query is None:
            result = self.documents([text])
            if inspect.isawaitable(result):
                return _first(result)
            return result[0]
        produced = self._query(text)
        if inspect.isawaitable(produced):
            return self._aquery(produced)
        return self._check([produced], 1)[0]

    async def _aquery(self, produced: Awaitable[Any]) -> list[float]:
        return self._check([await produced], 1)[0]

    def _check(self, vectors: Any, n: int) -> list[list[float]]:
        if not isinstance(vectors, Sequence) or len(vectors) != n:
            got = len(vectors) if isinstance(vectors, Sequence) else type(vectors).__name__
            raise InvalidInput(f"the embedder returned {got} vectors for {n} texts", path="index.embed")
        out = []
        for i, v in enumerate(vectors):
            if len(v) != self.index.dims:
                raise InvalidInput(
                    f"the embedder returned {len(v)} dimensions; the index has {self.index.dims}",
                    path=f"index.embed[{i}]",
                )
            floats = list(map(float, v))
            # A NaN or an infinity makes the sum one: the element-wise look runs only then (or on an overflow).
            if not math.isfinite(sum(floats)) and not all(math.isfinite(x) for x in floats):
                raise InvalidInput("the embedder returned a NaN or infinite value", path=f"index.embed[{i}]")
            out.append(floats)
        return out


async def _first(result: Awaitable[list[list[float]]]) -> list[float]:
    return (await result)[0]


def _batches(texts: list[str], size: int) -> list[list[str]]:
    return [texts[i : i + size] for i in range(0, len(texts), size)]


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


# --- vectors on the wire ------------------------------------------------------------------------------------


def norm(vector: Sequence[float]) -> float:
    return math.hypot(*vector)  # 2 us for 384 floats, against 14 us summing squares in a generator


class Float8Array:
    """Floats sent as a binary ``float8[]`` parameter, packed in one call (27 us for 384 floats, against
    67 us through psycopg's list dumper, one ``struct.pack`` per element)."""

    __slots__ = ("data",)

    def __init__(self, values: Sequence[float]) -> None:
        # The array wire format: 1 dimension, no NULLs, element type float8 (oid 701), length, lower bound 1,
        # then each element as its byte length (8) and its big-endian value.
        self.data = struct.pack(
            f">iiIii{'id' * len(values)}", 1, 0, 701, len(values), 1, *itertools.chain.from_iterable(
                zip(itertools.repeat(8), values)
            )
        )


class _Float8ArrayDumper(Dumper):
    format = Format.BINARY
    oid = 1022  # float8[]

    def dump(self, obj: Any) -> bytes:
        return cast(Float8Array, obj).data


psycopg.adapters.register_dumper(Float8Array, _Float8ArrayDumper)


def float4_bytes(vector: Sequence[float]) -> bytes:
    """A vector as little-endian float32 bytes (what a sealed embedding encrypts)."""
    data = array.array("f", vector)
    if sys.byteorder == "big":
        data.byteswap()
    return data.tobytes()


def from_float4_bytes(data: bytes) -> list[float]:
    values = array.array("f")
    values.frombytes(data)
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


def similarity(distance: Distance, a: Sequence[float], b: Sequence[float]) -> float:
    """The score a search reports for ``a`` against ``b`` (higher is closer), computed here."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    if distance == "inner_product":
        return dot
    if distance == "l2":
        return -math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))
    na, nb = norm(a), norm(b)
    return dot / (na * nb) if na and nb else 0.0


class HashEmbeddings:
    """A deterministic local embedder: words and their character trigrams hashed into ``dims`` signed
    buckets, normalised to length 1. Texts that share words (or most of a word: "refund" and "refunds")
    are close; nothing is downloaded and no network is used. For tests, offline demos and benchmarks —
    it knows no synonyms ("email" is not near "e-mail address" unless the words overlap).

    Works as ``MemoryIndex(embed=...)`` and wherever LangChain ``Embeddings`` are expected
    (``embed_documents`` / ``embed_query`` and their async twins).
    """

    def __init__(self, dims: int = 384) -> None:
        if dims <= 0:
            raise ValueError("dims must be positive")
        self.dims = dims

    def _bucket(self, feature: str) -> tuple[int, float]:
        h = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
        return h % self.dims, 1.0 if (h >> 63) & 1 else -1.0

    def embed_query(self, text: str) -> list[float]:
        from .textsearch import words

        vector = [0.0] * self.dims
        for word in words(text):
            for term in word:
                i, sign = self._bucket("w:" + term)
                vector[i] += sign
                padded = f"<{term}>"
                for j in range(len(padded) - 2):
                    i, sign = self._bucket("t:" + padded[j : j + 3])
                    vector[i] += 0.5 * sign
        length = norm(vector)
        return [x / length for x in vector] if length else vector

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)


def embedder_from_spec(spec: str, *, dims: int | None = None) -> Any:
    """An embedder named in configuration (a service URI, ``langgraph.json``, the command line):

    - ``"hash"`` — :class:`HashEmbeddings` (``dims``, default 384): local and deterministic;
    - ``"./path/file.py:name"`` or ``"package.module:name"`` — that object (a class or factory taking no
      arguments is called: ``module:MyEmbeddings``);
    - ``"provider:model"`` (``"openai:text-embedding-3-small"``) — LangChain's ``init_embeddings``
      (needs the ``langchain`` package and the provider's).
    """
    import importlib
    import importlib.util
    from pathlib import Path

    if not isinstance(spec, str) or not spec.strip():
        raise InvalidInput("an embedder is named by a non-empty string", path="embed")
    spec = spec.strip()
    if spec == "hash":
        return HashEmbeddings(dims or 384)
    where, _, name = spec.rpartition(":")
    if where.endswith(".py") or "/" in where:
        path = Path(where)
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None or not path.exists():
            raise InvalidInput(f"no Python file {where!r}", path="embed")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return _instantiate(getattr(module, name), spec)
    if where and name:
        try:
            found = importlib.import_module(where)
        except ModuleNotFoundError:
            found = None
        if found is not None:
            if not hasattr(found, name):
                raise InvalidInput(f"{where!r} has no {name!r}", path="embed")
            return _instantiate(getattr(found, name), spec)
    try:
        from langchain.embeddings import init_embeddings  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise InvalidInput(
            f"{spec!r} is neither 'hash', a module:name nor a file.py:name; as a LangChain provider string it "
            "needs `pip install langchain` and the provider's package",
            path="embed",
        ) from None
    return init_embeddings(spec)


def _instantiate(obj: Any, spec: str) -> Any:
    if isinstance(obj, type):
        return obj()
    if hasattr(obj, "embed_documents"):
        return obj
    if callable(obj):
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            return obj
        if not any(
            p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            for p in sig.parameters.values()
        ):
            return obj()  # a factory: model = make_embedder()
        return obj
    raise InvalidInput(f"{spec!r} is not an embedder (LangChain Embeddings or a callable)", path="embed")
