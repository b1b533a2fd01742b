"""``PostgresStore``: LangGraph's ``BaseStore`` (long-term memory) on the core's memory table.

Items are core memories: namespaced JSON values with TTL and full-text search, shared with the other
adapters. ``graph.compile(store=...)`` and ``create_react_agent(..., store=...)`` take it as they take
LangGraph's own PostgresStore. Search is full-text (``query`` ranks by matching words); vector indexes are
not supported (``index`` arguments are accepted and ignored).
"""

from __future__ import annotations

import operator
from collections.abc import Awaitable, Callable, Iterable, Mapping
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
from pgagentstate import AsyncStateStore, StateStore
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
    """

    supports_ttl = True

    def __init__(
        self,
        conn: ConnectionLike = None,
        *,
        store: StateStore | AsyncStateStore | None = None,
        ttl: TTLConfig | None = None,
        schema: str = "pgagentstate",
        tenant: str = "default",
        pgbouncer: bool | None = None,
        max_size: int = 10,
    ) -> None:
        self.ttl_config = ttl
        self._stores = Stores(conn, store, schema=schema, tenant=tenant, pgbouncer=pgbouncer, max_size=max_size)

    @classmethod
    def from_conn_string(cls, conn_string: str | None = None, **kwargs: Any) -> Opened[PostgresStore]:
        """``with PostgresStore.from_conn_string(dsn) as store:`` (or ``async with``)."""
        return Opened(cls(conn_string, **kwargs))

    def setup(self) -> Awaitable[None]:
        """Create or upgrade the schema (``store.setup()`` or ``await store.setup()``)."""
        return cast(Awaitable[None], self._stores.setup())

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [_result(op, self._stores.run(_call(op))) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return [_result(op, await self._stores.arun(_call(op))) for op in ops]


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


def _call(op: Op) -> StoreCall:
    if isinstance(op, GetOp):
        return lambda s: s.get_memory(op.namespace, op.key, refresh_ttl=op.refresh_ttl)
    if isinstance(op, PutOp):
        if op.value is None:
            return lambda s: s.delete_memory(op.namespace, op.key)
        return lambda s: s.put_memory(op.namespace, op.key, op.value, ttl=_ttl_seconds(op.ttl))
    if isinstance(op, SearchOp):
        plain, compared = _split_filter(op.filter)
        limit, offset = (_OPERATOR_SCAN, 0) if compared else (op.limit, op.offset)
        return lambda s: s.search_memory(op.namespace_prefix, query=op.query, filter=plain, limit=limit,
                                         offset=offset, refresh_ttl=op.refresh_ttl)
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
