"""``PostgresStore``: LangGraph's ``BaseStore`` (long-term memory) on the core's memory table.

Items are core memories: namespaced JSON values with TTL, shared with the other adapters.
``graph.compile(store=...)`` and ``create_react_agent(..., store=...)`` take it as they take LangGraph's own
PostgresStore. With ``index={"dims", "embed", "fields", ...}`` (``langgraph-checkpoint-postgres``'s
``PostgresIndexConfig``) items are embedded as they are put and ``search(query=...)`` ranks by meaning
(``SearchItem.score`` is the similarity, as the peer's); pgvector's HNSW index is used when the server has
it, exact search otherwise. Without an index, ``query`` ranks by matching words (full-text).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from pgagentstate import AsyncStateStore, MemoryIndex, StateStore
from pgagentstate.embedding import embedder_from_spec
from pgagentstate.models import Memory

from ._stores import ConnectionLike, HasStores, Opened, StoreCall, Stores

#: Comparison operators LangGraph filters may use; plain values mean equality.
_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": operator.eq, "$ne": operator.ne, "$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt,
    "$lte": operator.le,
}
#: How many candidates a search with comparison operators examines (they are applied in Python).
_OPERATOR_SCAN = 10_000


class PostgresStore(HasStores, BaseStore):
    """Long-term memory for LangGraph on Postgres, sync and async.

    ``conn`` as for :class:`~pgagentstate.langgraph.PostgresCheckpointer`. ``ttl`` is LangGraph's
    ``TTLConfig`` (``default_ttl`` in minutes, ``refresh_on_read``); expired items are invisible at once.
    ``index`` is the peer's ``PostgresIndexConfig``: ``dims``, ``embed`` (LangChain ``Embeddings``, a
    sync/async function, or a provider string such as ``"openai:text-embedding-3-small"``), ``fields``
    (JSON paths, default ``["$"]``), ``distance_type`` (``cosine``, ``l2``, ``inner_product``) and
    ``ann_index_config`` (``kind`` hnsw/ivfflat/flat, ``vector_type`` vector/halfvec, ``m``,
    ``ef_construction``, ``nlist``); ``ef_search`` is ours (HNSW candidates per search, default 100).
    """

    supports_ttl = True

    def __init__(
        self,
        conn: ConnectionLike = None,
        *,
        store: StateStore | AsyncStateStore | None = None,
        index: Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        schema: str = "pgagentstate",
        tenant: str = "default",
        pgbouncer: bool | None = None,
        max_size: int = 10,
    ) -> None:
        self.ttl_config = ttl
        self.index_config: dict[str, Any] | None = dict(index) if index else None
        self.embeddings: Any = None
        memory_index = None
        if self.index_config is not None:
            memory_index, self.embeddings = memory_index_of(self.index_config)
            if store is not None:
                store = store.with_memory_index(memory_index)
        kw: dict[str, Any] = {"schema": schema, "tenant": tenant, "pgbouncer": pgbouncer, "max_size": max_size}
        if memory_index is not None and store is None:
            kw["memory_index"] = memory_index
        self._stores = Stores(conn, store, **kw)

    @classmethod
    def from_conn_string(cls, conn_string: str | None = None, **kwargs: Any) -> Opened[PostgresStore]:
        """``with PostgresStore.from_conn_string(dsn) as store:`` (or ``async with``)."""
        return Opened(cls(conn_string, **kwargs))

    @classmethod
    def from_langgraph_config(
        cls, config: str | Path | Mapping[str, Any], conn: ConnectionLike = None, **kwargs: Any
    ) -> PostgresStore:
        """A store configured as ``langgraph.json``'s ``store`` section says (``index`` and ``ttl``): the
        file's path, or its parsed content. ``index.embed`` may be a LangChain provider string
        (``"openai:text-embedding-3-small"``), ``"./file.py:name"`` (relative to the file) or
        ``"module:name"``; keyword arguments override the file (``index=``, ``ttl=``, ``schema=``...)."""
        base = Path(".")
        parsed: Mapping[str, Any]
        if isinstance(config, str | Path):
            base = Path(config).resolve().parent
            parsed = json.loads(Path(config).read_text(encoding="utf-8"))
        else:
            parsed = config
        section: dict[str, Any] = dict(parsed.get("store") or {}) if "store" in parsed else dict(parsed)
        index = dict(section["index"]) if section.get("index") else None
        if index is not None and isinstance(index.get("embed"), str):
            spec = index["embed"]
            where, _, name = spec.rpartition(":")
            if where.endswith(".py") or where.startswith("."):
                spec = f"{(base / where).resolve()}:{name}"
            index["embed"] = embedder_from_spec(spec, dims=index.get("dims"))
        ttl = section.get("ttl")
        options: dict[str, Any] = {"index": index, "ttl": dict(ttl) if ttl else None, **kwargs}
        return cls(conn, **options)

    def setup(self) -> Awaitable[None]:
        """Create or upgrade the schema (``store.setup()`` or ``await store.setup()``)."""
        return cast(Awaitable[None], self._stores.setup())

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        for group in _groups(list(ops)):
            results += _results(group, self._stores.run(self._call(group)))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        for group in _groups(list(ops)):
            results += _results(group, await self._stores.arun(self._call(group)))
        return results

    def _call(self, group: list[Op]) -> StoreCall:
        if len(group) > 1:  # consecutive puts: one statement, their texts embedded in one batch
            puts = cast(list[PutOp], group)
            items = [(op.namespace, op.key, op.value, op.index) for op in puts]
            return lambda s: s.put_memories(items, ttl=_ttl_seconds(puts[0].ttl))
        return _call(group[0], vector=self.index_config is not None)


def memory_index_of(config: Mapping[str, Any]) -> tuple[MemoryIndex, Any]:
    """The core's :class:`~pgagentstate.MemoryIndex` for a LangGraph index configuration, and the LangChain
    ``Embeddings`` it calls (``ensure_embeddings`` turns functions and provider strings into one)."""
    from langgraph.store.base import ensure_embeddings

    if "dims" not in config:
        raise ValueError("index needs 'dims' (the dimensions of the embeddings)")
    embeddings = ensure_embeddings(config.get("embed"))
    ann = dict(config.get("ann_index_config") or {})
    fields = config.get("fields") or ["$"]
    extra = {k: config[k] for k in ("ef_search",) if k in config}
    lists = ann.get("nlist", ann.get("lists"))
    if lists is not None:
        extra["lists"] = int(lists)
    for key in ("m", "ef_construction"):
        if key in ann:
            extra[key] = int(ann[key])
    index = MemoryIndex(
        dims=int(config["dims"]),
        embed=embeddings,
        fields=[fields] if isinstance(fields, str) else list(fields),
        distance=config.get("distance_type", "cosine"),
        kind=ann.get("kind", "hnsw"),
        vector_type=ann.get("vector_type", "vector"),
        **extra,
    )
    return index, embeddings


def _groups(ops: list[Op]) -> list[list[Op]]:
    """Ops in order; runs of puts that write (not delete) distinct keys with one TTL become one group."""
    groups: list[list[Op]] = []
    for op in ops:
        last = groups[-1] if groups else None
        if (
            last is not None
            and isinstance(op, PutOp)
            and op.value is not None
            and all(isinstance(o, PutOp) and o.value is not None for o in last)
            and _ttl_seconds(cast(PutOp, last[0]).ttl) == _ttl_seconds(op.ttl)
            and all((cast(PutOp, o).namespace, cast(PutOp, o).key) != (op.namespace, op.key) for o in last)
        ):
            last.append(op)
        else:
            groups.append([op])
    return groups


def _results(group: list[Op], value: Any) -> list[Result]:
    if len(group) > 1:
        return [None] * len(group)
    return [_result(group[0], value)]


def _ttl_seconds(ttl: float | NotProvided | None) -> float | None:
    return None if ttl is None or isinstance(ttl, NotProvided) else float(ttl) * 60.0


def _split_filter(filter: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(containment filter for the database, comparisons left to Python)."""
    if not filter:
        return None, {}
    plain: dict[str, Any] = {}
    compared: dict[str, Any] = {}
    for key, value in filter.items():
        if isinstance(value, Mapping) and value and all(k in _OPERATORS for k in value):
            if set(value) == {"$eq"}:
                plain[key] = value["$eq"]
            else:
                compared[key] = value
        elif isinstance(value, Mapping) and any(str(k).startswith("$") for k in value):
            raise ValueError(f"unsupported filter operator in {value!r}; use one of {sorted(_OPERATORS)}")
        else:
            plain[key] = value
    return plain or None, compared


def _passes(value: Mapping[str, Any], compared: Mapping[str, Mapping[str, Any]]) -> bool:
    for key, conditions in compared.items():
        if key not in value:
            return False
        for op, operand in conditions.items():
            try:
                if not _OPERATORS[op](value[key], operand):
                    return False
            except TypeError:
                return False
    return True


def _call(op: Op, *, vector: bool) -> StoreCall:
    if isinstance(op, GetOp):
        return lambda s: s.get_memory(op.namespace, op.key, refresh_ttl=op.refresh_ttl)
    if isinstance(op, PutOp):
        if op.value is None:
            return lambda s: s.delete_memory(op.namespace, op.key)
        return lambda s: s.put_memory(op.namespace, op.key, op.value, ttl=_ttl_seconds(op.ttl), index=op.index)
    if isinstance(op, SearchOp):
        plain, compared = _split_filter(op.filter)
        limit, offset = (_OPERATOR_SCAN, 0) if compared else (op.limit, op.offset)
        # With an index, a query ranks by meaning only and scores are similarities (the peer's contract).
        mode = "vector" if vector else "text"
        return lambda s: s.search_memory(op.namespace_prefix, query=op.query, filter=plain, limit=limit,
                                         offset=offset, refresh_ttl=op.refresh_ttl, mode=mode)
    if isinstance(op, ListNamespacesOp):
        prefix = suffix = None
        for cond in op.match_conditions or ():
            if cond.match_type == "prefix":
                prefix = tuple(cond.path)
            elif cond.match_type == "suffix":
                suffix = tuple(cond.path)
        return lambda s: s.list_memory_namespaces(prefix=prefix, suffix=suffix, max_depth=op.max_depth,
                                                  limit=op.limit, offset=op.offset)
    raise ValueError(f"unknown store operation {op!r}")


def _item(m: Memory) -> Item:
    return Item(value=m.value, key=m.key, namespace=m.namespace, created_at=m.created_at, updated_at=m.updated_at)


def _result(op: Op, value: Any) -> Result:
    if isinstance(op, GetOp):
        return _item(value) if value is not None else None
    if isinstance(op, PutOp):
        return None
    if isinstance(op, SearchOp):
        found: list[Memory] = value
        _, compared = _split_filter(op.filter)
        if compared:
            found = [m for m in found if _passes(m.value, compared)][op.offset : op.offset + op.limit]
        return [
            SearchItem(namespace=m.namespace, key=m.key, value=m.value, created_at=m.created_at,
                       updated_at=m.updated_at, score=m.score)
            for m in found
        ]
    return cast(Result, value)
