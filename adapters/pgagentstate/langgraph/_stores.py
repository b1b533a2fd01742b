"""The core store(s) behind a LangGraph saver or store: sync, async, or both from one DSN.

LangGraph calls the sync API from worker threads (``invoke``) and the async API from the event loop
(``ainvoke``), on the same object. A DSN gives each API its own pool, opened on first use; a sync
connection/pool serves the async API through a thread; an async connection/pool serves the sync API from
other threads while its loop runs. There is no lock here: concurrency is the pool's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator, Mapping
from types import TracebackType
from typing import Any, Generic, TypeVar

from psycopg import AsyncConnection, Connection
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgagentstate import AsyncStateStore, StateStore

ConnectionLike = (
    str | Connection[Any] | ConnectionPool[Any] | AsyncConnection[Any] | AsyncConnectionPool[Any] | None
)
#: A call on a store: returns a value (StateStore) or an awaitable (AsyncStateStore).
StoreCall = Callable[[Any], Any]
S = TypeVar("S", bound="HasStores")


class Done:
    """An awaitable that is already complete: lets ``await x.setup()`` work after a sync setup."""

    def __await__(self) -> Generator[Any, None, None]:
        yield from ()


class Ready(int):
    """A number that is also a completed awaitable: ``store.sweep_ttl()`` (PostgresStore's spelling) and
    ``await store.sweep_ttl()`` (AsyncPostgresStore's) both give it."""

    def __await__(self) -> Generator[Any, None, int]:
        yield from ()
        return int(self)


def pool_options(pool_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Our pool sizes for the peer's ``pool_config`` (``min_size``, ``max_size``, ``kwargs``). Connection
    ``kwargs`` are not needed: our pools set autocommit and prepared statements themselves."""
    config = dict(pool_config or {})
    unknown = set(config) - {"min_size", "max_size", "kwargs"}
    if unknown:
        raise TypeError(f"unknown pool_config keys: {sorted(unknown)} (min_size, max_size, kwargs)")
    return {k: int(config[k]) for k in ("min_size", "max_size") if config.get(k) is not None}


class Stores:
    def __init__(self, conn: ConnectionLike, store: StateStore | AsyncStateStore | None,
                 **store_kw: Any) -> None:
        self.dsn: str | None = None
        self.sync: StateStore | None = None
        self.async_: AsyncStateStore | None = None
        self.owned: list[StateStore | AsyncStateStore] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._kw = store_kw
        self._slots: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}
        # How many calls may run at once on one event loop: as many as the pool has connections.
        self._width = int(store_kw.get("max_size") or 10)
        if isinstance(conn, AsyncConnectionPool | ConnectionPool):
            self._width = conn.max_size
        elif isinstance(conn, AsyncConnection | Connection):
            self._width = 1
        if store is not None:
            if conn is not None:
                raise TypeError("pass either a connection or store=, not both")
            if isinstance(store, StateStore):
                self.sync = store
            elif isinstance(store, AsyncStateStore):
                self.async_ = store
            else:
                raise TypeError(f"store must be a StateStore or AsyncStateStore, not {type(store).__name__}")
        elif isinstance(conn, Connection | ConnectionPool):
            self.sync = StateStore(conn, **store_kw)
        elif isinstance(conn, AsyncConnection | AsyncConnectionPool):
            self.async_ = AsyncStateStore(conn, **store_kw)
            try:
                self.loop = asyncio.get_running_loop()
            except RuntimeError:
                self.loop = None
        elif conn is None or isinstance(conn, str):
            self.dsn = conn or ""
        else:
            raise TypeError(f"expected a DSN, a psycopg connection or pool, not {type(conn).__name__}")

    def sync_store(self) -> StateStore | None:
        if self.sync is None and self.dsn is not None:
            with self._lock:
                if self.sync is None:
                    self.sync = StateStore(self.dsn or None, **self._kw)
                    self.owned.append(self.sync)
        return self.sync

    def async_store(self) -> AsyncStateStore | None:
        if self.async_ is None and self.dsn is not None:
            with self._lock:
                if self.async_ is None:
                    self.async_ = AsyncStateStore(self.dsn or None, **self._kw)
                    self.owned.append(self.async_)
        return self.async_

    def run(self, call: StoreCall) -> Any:
        sync = self.sync_store()
        if sync is not None:
            return call(sync)
        assert self.async_ is not None
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop or not loop.is_running():
            raise RuntimeError(
                "only an async connection was given: use the async API (ainvoke, astream, aget_state), call "
                "the sync API from another thread while the event loop runs, or pass a DSN or a sync "
                "connection/pool"
            )
        return asyncio.run_coroutine_threadsafe(call(self.async_), loop).result()

    async def arun(self, call: StoreCall) -> Any:
        store = self.async_store()
        if store is not None:
            if self.loop is None:
                self.loop = asyncio.get_running_loop()
            return await call(store)
        assert self.sync is not None
        return await asyncio.to_thread(call, self.sync)

    def slot(self) -> asyncio.Semaphore:
        """Entered around an async call: at most as many calls run at once on this event loop as the pool
        has connections; the others wait here, before doing any work.

        60,000 ``aput``/``aget``/``asearch`` calls gathered at once (upstream's test_large_batches_async)
        otherwise all ran their first steps before any could get a connection: the event loop was so
        busy that the pool's first connection timed out (10 s). The peer queues such calls in one task.
        """
        loop = asyncio.get_running_loop()
        slots = self._slots.get(loop)
        if slots is None:
            for gone in [other for other in self._slots if other.is_closed()]:
                del self._slots[gone]
            slots = self._slots.setdefault(loop, asyncio.Semaphore(self._width))
        return slots

    def any_store(self) -> StateStore | AsyncStateStore:
        """A store for what needs no connection (its limits, to check input before anything runs)."""
        store = self.sync or self.async_ or self.async_store()
        assert store is not None
        return store

    def async_only(self) -> bool:
        """Only an async connection or pool was given: the sync API needs its event loop."""
        return self.sync is None and self.dsn is None

    def now_or_later(self, call: StoreCall) -> Any:
        """``call``'s result now (a :class:`Ready`), or a coroutine when called on an event loop that an
        async store can serve (the loop is not blocked) or when only an async connection was given."""
        if self.async_only() or (self.sync is None and on_loop_thread()):
            return self.arun(call)
        sync = self.sync_store()
        assert sync is not None
        return Ready(call(sync))

    def setup(self) -> Any:
        """Apply migrations now if a sync store is available (then return a completed awaitable), else
        return the coroutine that does it."""
        sync = self.sync_store()
        if sync is not None:
            sync.setup()
            return Done()
        return self.arun(lambda s: s.setup())

    def close(self) -> None:
        for store in self.owned:
            if isinstance(store, StateStore):
                store.close()
        self.owned = [s for s in self.owned if isinstance(s, AsyncStateStore)]

    async def aclose(self) -> None:
        for store in self.owned:
            if isinstance(store, AsyncStateStore):
                await store.close()
            else:
                store.close()
        self.owned = []


def on_loop_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class HasStores:
    _stores: Stores

    def close(self) -> None:
        """Close the pools this object opened (connections and pools passed in stay open)."""
        self._stores.close()

    async def aclose(self) -> None:
        await self._stores.aclose()


class Opened(Generic[S]):
    """What ``from_conn_string`` returns: a context manager for ``with`` and ``async with`` alike."""

    def __init__(self, obj: S) -> None:
        self.obj = obj

    def __enter__(self) -> S:
        return self.obj

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.obj.close()

    async def __aenter__(self) -> S:
        return self.obj

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.obj.aclose()
