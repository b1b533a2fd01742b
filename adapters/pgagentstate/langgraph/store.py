"""``PostgresStore``: LangGraph's ``BaseStore`` (long-term memory) on the core's memory table.

Items are core memories: namespaced JSON values with TTL, shared with the other adapters.
``graph.compile(store=...)`` and ``create_react_agent(..., store=...)`` take it as they take LangGraph's own
PostgresStore. With ``index={"dims", "embed", "fields", ...}`` (``langgraph-checkpoint-postgres``'s
``PostgresIndexConfig``) items are embedded as they are put and ``search(query=...)`` ranks by meaning
(``SearchItem.score`` is the similarity, as the peer's); pgvector's HNSW index is used when the server has
it, exact search otherwise. Without an index, ``query`` ranks by matching words (full-text).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import logging
import operator
import threading
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)
from pgagentstate import AsyncStateStore, MemoryIndex, StateStore
from pgagentstate.codec import check_id
from pgagentstate.embedding import embedder_from_spec
from pgagentstate.errors import InvalidId
from pgagentstate.models import Memory
from pgagentstate.ops.base import Ctx
from pgagentstate.ops.memory import check_namespace
from pgagentstate.ops.operations import GcReport, RetentionPolicy, gc

from ._stores import ConnectionLike, HasStores, Opened, Ready, StoreCall, Stores, on_loop_thread, pool_options

logger = logging.getLogger(__name__)

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
    ``ef_construction``, ``nlist``); ``ef_search`` is ours (HNSW candidates per search, see
    :class:`~pgagentstate.MemoryIndex`). ``search(query=...)`` ranks by meaning alone, as the peer does;
    ``"hybrid": True`` in ``index`` (ours) fuses that ranking with the one by the query's words
    (reciprocal rank fusion: scores are then fused ranks, not similarities, and items put with
    ``index=False`` are found by their words).
    ``user_namespace``: the position of the user id in your namespaces (``1`` for LangMem's
    ``("memories", "{user_id}")``): items put there belong to that user, and ``pgagentstate export`` /
    ``erase`` of the user take them along.
    """

    supports_ttl = True

    def __init__(
        self,
        conn: ConnectionLike = None,
        *,
        pipe: Any = None,
        deserializer: Callable[[Any], dict[str, Any]] | None = None,
        index: Mapping[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        store: StateStore | AsyncStateStore | None = None,
        schema: str = "pgagentstate",
        tenant: str = "default",
        pgbouncer: bool | None = None,
        min_size: int = 1,
        max_size: int = 10,
        user_namespace: int | None = None,
    ) -> None:
        if user_namespace is not None and (isinstance(user_namespace, bool) or not isinstance(user_namespace, int)
                                           or user_namespace < 0):
            raise TypeError(f"user_namespace must be a namespace position (an int >= 0), not {user_namespace!r}")
        self._user_at = user_namespace
        # Without an index a query ranks the namespace's items and leaves none out (LangGraph's stores ignore it).
        self._search_mode = "rank"
        # Accepted as the peer's signature has them: ``pipe`` (a psycopg pipeline on ``conn``) because our
        # driver pipelines each operation's statements itself; ``deserializer`` because the peer calls it
        # only for stored values that are not JSON objects, and every value here is one (checked on put).
        del pipe, deserializer
        self.ttl_config = ttl
        self.index_config: dict[str, Any] | None = dict(index) if index else None
        self.embeddings: Any = None
        self._sweeper: _Sweeper | None = None
        memory_index = None
        if self.index_config is not None:
            memory_index, self.embeddings = memory_index_of(self.index_config)
            self._search_mode = "hybrid" if self.index_config.get("hybrid") else "vector"
            if store is not None:
                store = store.with_memory_index(memory_index)
        kw: dict[str, Any] = {"schema": schema, "tenant": tenant, "pgbouncer": pgbouncer, "max_size": max_size,
                              "min_size": min_size}
        if memory_index is not None and store is None:
            kw["memory_index"] = memory_index
        self._stores = Stores(conn, store, **kw)

    @classmethod
    def from_conn_string(
        cls,
        conn_string: str | None = None,
        *,
        pipeline: bool = False,
        pool_config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Opened[PostgresStore]:
        """``with PostgresStore.from_conn_string(dsn) as store:`` (or ``async with``): a store with its own
        pools, closed on exit. ``pool_config`` (``min_size``, ``max_size``) sizes them; ``pipeline`` is
        accepted for the peer's signature (every operation is pipelined already)."""
        del pipeline
        return Opened(cls(conn_string, **pool_options(pool_config), **kwargs))

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
        for group in _groups(self._checked(ops), self._owner):
            results += self._results(group, self._stores.run(self._call(group)))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        checked = self._checked(ops)
        async with self._stores.slot():
            for group in _groups(checked, self._owner):
                results += self._results(group, await self._stores.arun(self._call(group)))
        return results

    def _checked(self, ops: Iterable[Op]) -> list[Op]:
        """The batch's ops, every namespace and key checked before any op runs: one bad op fails the
        whole batch with nothing written. Bad namespaces raise LangGraph's ``InvalidNamespaceError``."""
        checked = [_label_paths(op) for op in ops]
        ctx = self._stores.any_store().context
        for op in checked:
            validate_op_namespace(op)  # LangGraph's own rule (no '.', no empty label, strings only)
            try:
                _check_op(op, ctx)
            except InvalidId as exc:
                if not exc.path.startswith("namespace"):
                    raise
                raise InvalidNamespaceError(f"{exc} in {_namespace_of(op)!r}") from exc
        return checked

    def _results(self, group: list[Op], value: Any) -> list[Result]:
        if len(group) > 1:
            return [None] * len(group)
        return [_result(group[0], value)]

    # --- TTL sweeping, as the peer spells it ----------------------------------------------------------

    def sweep_ttl(self) -> Any:
        """Delete expired items now; returns how many (``store.sweep_ttl()`` or ``await store.sweep_ttl()``).
        Expired items are invisible to reads already: sweeping only frees their space."""
        return self._stores.now_or_later(_sweep)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> _SweeperFuture:
        """Sweep every ``sweep_interval_minutes`` (default: the TTL config's, else 5) in a background
        thread until :meth:`stop_ttl_sweeper`. Returns a future that completes when the sweeper stops
        (``await store.start_ttl_sweeper()`` returns it too)."""
        if self._sweeper is not None:
            return self._sweeper.done
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        self._sweeper = _Sweeper(lambda: self._stores.run(_sweep), float(minutes) * 60.0)
        return self._sweeper.done

    def stop_ttl_sweeper(self, timeout: float | None = None) -> Any:
        """Stop the sweeper; True once it stopped within ``timeout`` seconds (sync or awaited)."""
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is None:
            return Ready(True)
        sweeper.stop.set()
        if self._stores.async_only() and on_loop_thread():
            # Its current sweep may be waiting for this event loop: join from a worker thread.
            return asyncio.ensure_future(asyncio.to_thread(sweeper.join, timeout))
        return Ready(sweeper.join(timeout))

    def close(self) -> None:
        self.stop_ttl_sweeper()
        super().close()

    async def aclose(self) -> None:
        stopped = self.stop_ttl_sweeper()
        if inspect.isawaitable(stopped):
            await stopped
        await super().aclose()

    def _call(self, group: list[Op]) -> StoreCall:
        if len(group) > 1:  # consecutive puts: one statement, their texts embedded in one batch
            puts = cast(list[PutOp], group)
            # The statement locks its rows in the order given: in one order for every batch, two batches
            # putting the same keys cannot deadlock (in opposite orders: 19 deadlocks in 400 batches).
            items = sorted(((op.namespace, op.key, op.value, op.index) for op in puts),
                           key=lambda item: (item[0], item[1]))
            owner = self._owner(puts[0].namespace)
            return lambda s: s.put_memories(items, ttl=_ttl_seconds(puts[0].ttl), user_id=owner)
        return _call(group[0], mode=self._search_mode, owner=self._owner)

    def _owner(self, namespace: tuple[str, ...]) -> str:
        """The user an item belongs to ("" for none): the label at ``user_namespace``, if the namespace has one."""
        at = self._user_at
        return namespace[at] if at is not None and len(namespace) > at else ""


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


def _groups(ops: list[Op], owner: Callable[[tuple[str, ...]], str]) -> list[list[Op]]:
    """Ops in order; runs of puts that write (not delete) distinct keys of one owner with one TTL become one
    group."""
    groups: list[list[Op]] = []
    for op in ops:
        last = groups[-1] if groups else None
        if (
            last is not None
            and isinstance(op, PutOp)
            and op.value is not None
            and all(isinstance(o, PutOp) and o.value is not None for o in last)
            and _ttl_seconds(cast(PutOp, last[0]).ttl) == _ttl_seconds(op.ttl)
            and owner(cast(PutOp, last[0]).namespace) == owner(op.namespace)
            and all((cast(PutOp, o).namespace, cast(PutOp, o).key) != (op.namespace, op.key) for o in last)
        ):
            last.append(op)
        else:
            groups.append([op])
    return groups


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


def _check_op(op: Op, ctx: Ctx) -> None:
    """The core's own checks of an op's namespace and key (raises ``InvalidId`` naming the path)."""
    if isinstance(op, GetOp | PutOp):
        check_namespace(ctx, op.namespace)
        check_id(op.key, "key", ctx.limits)
    elif isinstance(op, SearchOp):
        check_namespace(ctx, op.namespace_prefix, wildcards=True, allow_empty=True)
    elif isinstance(op, ListNamespacesOp):
        for cond in op.match_conditions or ():
            check_namespace(ctx, cond.path, wildcards=True, allow_empty=True)


def _label_paths(op: Op) -> Op:
    """A match condition whose path is a string means that one label (as in the peer), not its letters."""
    if isinstance(op, ListNamespacesOp) and any(isinstance(c.path, str) for c in op.match_conditions or ()):
        conditions = tuple(
            MatchCondition(c.match_type, (c.path,)) if isinstance(c.path, str) else c for c in op.match_conditions or ()
        )
        return op._replace(match_conditions=conditions)
    return op


def _namespace_of(op: Op) -> tuple[Any, ...]:
    if isinstance(op, GetOp | PutOp):
        return tuple(op.namespace)
    if isinstance(op, SearchOp):
        return tuple(op.namespace_prefix)
    if isinstance(op, ListNamespacesOp):
        return tuple(tuple(c.path) for c in op.match_conditions or ())
    return ()


def _sweep(s: Any) -> Any:
    """Delete expired memories (and scratchpad entries): the core's retention, TTL part only."""
    done = s.run(gc(s.context, RetentionPolicy(expire_ttl=True)))
    if inspect.isawaitable(done):
        return _memory_count(done)
    return done.done.get("memory", 0)


async def _memory_count(report: Awaitable[GcReport]) -> int:
    return (await report).done.get("memory", 0)


class _SweeperFuture(concurrent.futures.Future[None]):
    """What ``start_ttl_sweeper`` returns: completes when the sweeper stops; ``await`` gives it back."""

    def __await__(self) -> Generator[Any, None, _SweeperFuture]:
        yield from ()
        return self


class _Sweeper:
    """A daemon thread sweeping expired items every ``interval`` seconds until ``stop`` is set."""

    def __init__(self, sweep: Callable[[], Any], interval: float) -> None:
        self.stop = threading.Event()
        self.done = _SweeperFuture()
        self._sweep = sweep
        self._interval = interval
        self._thread = threading.Thread(target=self._loop, name="pgagentstate-ttl-sweeper", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self.stop.wait(self._interval):
                try:
                    self._sweep()
                except Exception:  # a failed sweep is retried at the next interval
                    logger.exception("TTL sweep failed")
        finally:
            self.done.set_result(None)

    def join(self, timeout: float | None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()


def _call(op: Op, *, mode: str, owner: Callable[[tuple[str, ...]], str]) -> StoreCall:
    if isinstance(op, GetOp):
        return lambda s: s.get_memory(op.namespace, op.key, refresh_ttl=op.refresh_ttl)
    if isinstance(op, PutOp):
        if op.value is None:
            return lambda s: s.delete_memory(op.namespace, op.key)
        return lambda s: s.put_memory(
            op.namespace, op.key, op.value, ttl=_ttl_seconds(op.ttl), index=op.index, user_id=owner(op.namespace)
        )
    if isinstance(op, SearchOp):
        plain, compared = _split_filter(op.filter)
        limit, offset = (_OPERATOR_SCAN, 0) if compared else (op.limit, op.offset)
        # With an index, a query ranks by meaning only and scores are similarities (the peer's contract),
        # unless the index asks for hybrid search. Without one, LangGraph's stores ignore the query and
        # return the namespace's items: ours returns them too, those with the query's words first ("rank").
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
