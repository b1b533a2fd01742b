"""AsyncStateStore: the asyncio store.

This file is the source of truth for both stores: ``sync.py`` (``StateStore``) is generated from it by
``tools/gen_sync.py``, and CI checks that the two have not drifted. Everything here is I/O plumbing and
one-line methods; what each operation does lives once in :mod:`pgagentstate.ops`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import dataclasses
import inspect
import json
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from time import monotonic
from types import TracebackType
from typing import Any, TypeVar, cast

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from . import arguments
from .checkout_queue import CheckoutQueue  # sync: from .checkout_queue import ThreadCheckout as CheckoutQueue
from .codec import DEFAULT_LIMITS, Limits, check_id, check_schema_name
from .connect import (
    DEADLINE,
    FAILOVER_WAIT,
    POOL_WAIT,
    REFUSED_RETRY,
    behind_pgbouncer,
    connect_failure,
    first_connect_kwargs,
    idle_connection_is_dead,
    pool_kwargs,
    refused,
    resolve_dsn,
    unreachable,
)
from .crypto import Cipher, Encryption
from .deadlines import watchdog
from .distill import DISTILL_CHANNEL, Distiller, DistillResult
from .embedding import Embedder, MemoryIndex
from .errors import (
    ConnectionLost,
    DeadlineExceeded,
    InvalidInput,
    LeaseLost,
    PgAgentStateError,
    PoolDeadlock,
    ServerRefused,
    translate,
)
from .loops import LoopCloser
from .models import (
    Accepted,
    Conversation,
    Event,
    InboxMessage,
    InboxMetrics,
    LedgerEntry,
    LoadedConversation,
    Memory,
    NewEvent,
    StateDoc,
    StateRef,
    Step,
)
from .ops import context_cache, snapshot_reads, snapshot_threads
from .ops import conversations as conv_ops
from .ops import distill as distill_ops
from .ops import events as event_ops
from .ops import inbox as inbox_ops
from .ops import ledger as ledger_ops
from .ops import memory as memory_ops
from .ops import memory_index as index_ops
from .ops import migrations as migration_ops
from .ops import rotation as rotation_ops
from .ops import scratchpad as scratch_ops
from .ops import snapshots as snapshot_ops
from .ops import state as state_ops
from .ops import turn as turn_ops
from .ops import workflow as workflow_ops
from .ops.base import Cache, Call, Command, Ctx, Op, Sleep, Stmt, Tx, read_again, unencodable
from .queries import query, with_schema
from .redis_tier import RedisTier
from .sanitize import Sanitizer
from .sealing import lock_key
from .telemetry import Telemetry
from .validation import StateSchema
from .workers import TaskRuntime as _Runtime  # sync: from .workers import ThreadRuntime as _Runtime

T = TypeVar("T")

IDLE, INTRANS, INERROR = TransactionStatus.IDLE, TransactionStatus.INTRANS, TransactionStatus.INERROR
_BEGIN = b"BEGIN"
_BEGIN_SNAPSHOT = b"BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
_COMMIT = b"COMMIT"

_cursors: weakref.WeakKeyDictionary[AsyncConnection[Any], psycopg.AsyncCursor[Any]] = weakref.WeakKeyDictionary()

_NEEDS_PLAIN_FUNCTION = "StateStore runs plain functions; coroutine functions need the asyncio store"
_inbox_log = logging.getLogger("pgagentstate.inbox")

ConnectionLike = str | AsyncConnection[Any] | AsyncConnectionPool[Any] | None

#: The connection sources (by id) whose connections the current task or thread holds in lock blocks: a copy
#: per task, so a lock held by another task (which will let go) does not count.
_LOCKS_HELD: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar("pgagentstate_locks", default=())


def _running_loop() -> Any:
    """The event loop a pool belongs to: its connections and workers cannot serve another loop."""
    return asyncio.get_running_loop()  # sync: return None


def _checkout_queue(pool: AsyncConnectionPool[Any]) -> CheckoutQueue:
    """Where the store's calls wait for a connection of ``pool`` (see checkout_queue), for as long as the
    pool's own timeout (``POOL_WAIT`` in the pools the store makes) sees connections come back."""
    return CheckoutQueue(lambda: pool.max_size, stall=pool.timeout)


@dataclasses.dataclass
class _LoopPool:
    """The pool a store owns in one event loop."""

    pool: AsyncConnectionPool[Any]
    closer: LoopCloser | None = None
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    opened: bool = False
    queue: CheckoutQueue = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.queue = _checkout_queue(self.pool)


class _AsyncSource:
    """Hands out connections: from a pool (shared by many tasks, no store-wide lock) or one connection.

    A pool the store builds from a DSN is opened in the event loop that uses it, and each other loop
    that uses the store (a thread running its own loop, a second ``asyncio.run``) gets a pool of its
    own: one store serves any loop, as the frameworks' own session services do. A pool or connection
    passed in belongs to the loop it was made in.
    """

    def __init__(self, conn: ConnectionLike, *, min_size: int, max_size: int, pgbouncer: bool) -> None:
        self.pool: AsyncConnectionPool[Any] | None = None
        self._queue: CheckoutQueue | None = None  # the pool's, when a pool is passed in
        self.conn: AsyncConnection[Any] | None = None
        self.owned = False
        self._dsn = ""  # of the pools the store owns
        self._probed = False
        # A single connection runs one transaction at a time; a pool needs no lock at all.
        self._conn_lock = asyncio.Lock()
        self._pools: dict[Any, _LoopPool] = {}
        self._returned = 0  # connections handed back to a pool so far: a long wait that saw some is a queue
        # Set when a connection was found dead (after a restart, a failover, a partition): until a pooled
        # connection is handed out again, a call that finds none ready connects itself (see _getconn).
        self._trouble = False
        self._direct: set[AsyncConnection[Any]] = set()  # such connections in use, closed after their call
        if isinstance(conn, AsyncConnectionPool):
            self.pool = conn
            self._queue = _checkout_queue(conn)
        elif isinstance(conn, AsyncConnection):
            self.conn = conn
        else:
            dsn = self._dsn = resolve_dsn(conn)
            self._new_pool: Callable[..., AsyncConnectionPool[Any]] = lambda **configure: AsyncConnectionPool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                open=False,
                kwargs=pool_kwargs(pgbouncer=pgbouncer, dsn=dsn),
                timeout=POOL_WAIT,
                name="pgagentstate",
                **configure,
            )
            self.owned = True

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        conn, pool, queue = await self.acquire()
        try:
            yield conn
        finally:
            await self.release(conn, pool, queue)

    async def acquire(
        self,
    ) -> tuple[AsyncConnection[Any], AsyncConnectionPool[Any] | None, CheckoutQueue | None]:
        """A connection for one call, with the pool and queue it came from: hand all three back to
        :meth:`release`. (What :meth:`connection` does, without a generator-based context manager: the
        store's own calls take this path, ~2 us a call less.)"""
        pool, queue = (await self._own_pool()) if self.owned else (self.pool, self._queue)
        locks = _LOCKS_HELD.get()
        if locks:
            held = locks.count(id(self))
            if held and held >= (1 if pool is None else pool.max_size):
                # Waiting would end in a pool timeout (a retryable ConnectionLost after 30 s, whose retry
                # waits again) or, on a single connection, never.
                raise PoolDeadlock(
                    f"this task holds all {held} connection(s) of the store in conversation_lock/advisory_lock "
                    "blocks, so a call inside them can never get one: make the call outside the lock, or give "
                    "the pool more connections (max_size)"
                )
        if pool is None:
            assert self.conn is not None
            await self._conn_lock.acquire()
            return self.conn, None, None
        assert queue is not None
        await queue.__aenter__()
        try:
            return await self._live_connection(pool), pool, queue
        except BaseException:
            await queue.__aexit__(None, None, None)
            raise

    async def release(
        self, conn: AsyncConnection[Any], pool: AsyncConnectionPool[Any] | None, queue: CheckoutQueue | None
    ) -> None:
        """Hand back what :meth:`acquire` returned."""
        if pool is None:
            self._conn_lock.release()
            return
        assert queue is not None
        try:
            if conn in self._direct:
                self._direct.discard(conn)
                await conn.close()
            else:
                if conn.closed:  # it died during the call: the server or the path to it is in trouble
                    self._trouble = True
                await pool.putconn(conn)
                self._returned += 1
        finally:
            await queue.__aexit__(None, None, None)

    async def _own_pool(self) -> tuple[AsyncConnectionPool[Any], CheckoutQueue]:
        """The open pool of the running loop (made on its first use there) and its checkout queue."""
        loop = _running_loop()
        entry = self._pools.get(loop)
        if entry is None:
            # The pools of loops that have closed since (a loop closed without cancelling its tasks
            # first, as asyncio.run does, left its connections open).
            for gone in [other for other in list(self._pools) if other is not None and other.is_closed()]:
                dropped = self._pools.pop(gone, None)
                if dropped is not None and dropped.closer is not None:
                    dropped.closer.finish()
            closer = LoopCloser()  # sync: -
            new = _LoopPool(self._new_pool(configure=closer.track), closer)  # sync: new = _LoopPool(self._new_pool())
            entry = self._pools.setdefault(loop, new)
        if not entry.opened:
            async with entry.lock:
                if not entry.opened:
                    if not self._probed:
                        await self._first_connection(self._dsn)
                        self._probed = True
                    # Wait for the first connection: a call made while it is still being made has the pool
                    # start a second one, which a loop shut down right after the call left half-made (an
                    # open server session held by the log record of its cancellation: 1 run in 3).
                    try:
                        await entry.pool.open(wait=True, timeout=POOL_WAIT)
                    except PoolTimeout:
                        self._pools.pop(loop, None)  # a pool that timed out is closed: the next call makes another
                        raise
                    cast(LoopCloser, entry.closer).start(entry.pool)  # sync: -
                    entry.opened = True
        return entry.pool, entry.queue

    @staticmethod
    async def _first_connection(dsn: str) -> None:
        """Connect once before starting the first pool, so that a wrong DSN or a server that is down fails
        the first call at once with the reason. The pool itself retries in the background for its whole
        timeout (30 s), logs a warning per attempt and ends in a PoolTimeout that does not say why."""
        conn = await _reach(dsn, first_connect_kwargs(dsn))
        await conn.close()

    async def _live_connection(self, pool: AsyncConnectionPool[Any]) -> AsyncConnection[Any]:
        """A pooled connection that the server has not closed while it sat idle.

        After a restart, a failover or a mass ``pg_terminate_backend`` every idle connection is dead.
        Each is closed and handed back (the pool replaces it in the background) and the next one is tried
        at once: psycopg_pool's own ``check=`` sleeps 1, 2, 4, 8 s between failed checks, which stalled
        every request for up to 95 s in the reliability tests.
        """
        conn: AsyncConnection[Any]
        for _ in range(pool.max_size):
            conn = await self._getconn(pool)
            if not idle_connection_is_dead(conn):
                return conn
            self._trouble = True
            await conn.close()
            if conn in self._direct:  # connected by this call, not the pool's: the pool would refuse it
                self._direct.discard(conn)
            else:
                await pool.putconn(conn)
        conn = await self._getconn(pool)  # new connections by now; a failure on it is reported as ConnectionLost
        return conn

    async def _getconn(self, pool: AsyncConnectionPool[Any]) -> AsyncConnection[Any]:
        """A connection from the pool, waiting for as long as the pool makes progress.

        The pool's timeout (30 s) counts from the request: a burst of many more tasks than connections
        (upstream's test_large_batches_async gathers 60,000 store calls on 10 connections: 78 s of work
        on a loaded 2-core machine) made the last ones fail although every connection was busy and
        coming back. Only a wait during which none of this store's connections came back is a stall
        (PoolTimeout, then ConnectionLost): a server that hangs, or every connection held elsewhere.
        """
        conn: AsyncConnection[Any]
        if self._trouble and len(self._direct) < pool.max_size and isinstance(pool.conninfo, str):
            # The pool replaces dead connections in the background, retrying a refused server after 1, 2,
            # 4, 8... s: waiting for it cost a call the whole pool wait (10 s) while the server was down,
            # and up to 3.6 s once it was back. A call that finds no connection ready connects itself.
            try:
                conn = await pool.getconn(timeout=0.01)
            except PoolTimeout:
                conn = await _reach(pool.conninfo, pool.kwargs if isinstance(pool.kwargs, dict) else {})
                self._direct.add(conn)
                return conn
            self._trouble = False
            return conn
        while True:
            returned = self._returned
            try:
                conn = await pool.getconn()
                return conn
            except PoolTimeout:
                if self._returned == returned:
                    raise

    async def close(self) -> None:
        """Close the pools the store owns (the pool of another loop in that loop)."""
        here = _running_loop()
        for loop, entry in list(self._pools.items()):
            if loop is here:
                await entry.pool.close()
                if entry.closer is not None:
                    entry.closer.stop()
            else:  # sync: -block
                # A loop that is idle may never run again (Runner.run_sync leaves one behind) and a closed
                # one cannot: close the connections now; the pool itself closes if its loop runs again.
                if not loop.is_running() and entry.closer is not None:
                    entry.closer.finish()
                if not loop.is_closed():
                    asyncio.run_coroutine_threadsafe(entry.pool.close(), loop)


class _Deadline:
    """The store's deadline over one block (see :meth:`AsyncStateStore._bounded`). A class rather than a
    generator-based context manager: every transaction goes through one (~1.5 us less a call)."""

    __slots__ = ("_conn", "_seconds", "_token")

    def __init__(self, conn: AsyncConnection[Any], seconds: float | None) -> None:
        self._conn, self._seconds = conn, seconds
        self._token = None if seconds is None else watchdog.arm(conn, seconds)

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        # The watchdog cut the connection (the block failed with a driver error): say so.
        if self._token is not None and watchdog.disarm(self._token) and isinstance(exc, psycopg.Error):
            raise DeadlineExceeded(self._seconds or 0.0, _address(self._conn)) from exc


def _address(conn: AsyncConnection[Any]) -> str:
    try:
        return f"{conn.info.host}:{conn.info.port}"
    except psycopg.Error:
        return "the server"


async def _reach(conninfo: str, kwargs: dict[str, Any]) -> AsyncConnection[Any]:
    """A new connection, or a typed error within a bounded time: refused or reset on every attempt for
    ``REFUSED_RETRY`` s, ``ServerRefused``; a server that cannot take the session yet (starting up, a
    standby about to be promoted) is tried again for ``FAILOVER_WAIT`` s; anything else (no answer within
    ``connect_timeout``, a wrong password) is a ``ConnectionLost`` at once."""
    began = monotonic()
    pause = 0.05
    while True:
        try:
            conn: AsyncConnection[Any] = await AsyncConnection.connect(conninfo, **kwargs)
            return conn
        except psycopg.OperationalError as exc:
            kind = connect_failure(exc)
            limit = REFUSED_RETRY if kind == "refused" else FAILOVER_WAIT if kind == "not_yet" else 0.0
            if monotonic() - began + pause > limit:
                if kind == "refused":
                    raise ServerRefused(refused(conninfo, exc)) from None
                raise ConnectionLost(unreachable(conninfo, exc)) from None
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.5)


async def _fetch(cur: psycopg.AsyncCursor[Any], stmt: Stmt) -> Any:
    if stmt.fetch == "all":
        return await cur.fetchall()
    if stmt.fetch == "one":
        return await cur.fetchone()
    if stmt.fetch == "rowcount":
        return cur.rowcount
    return None


def _conversation_of(ref: StateRef) -> str | None:
    """The conversation whose cached context a write of ``ref`` changes."""
    return ref.subject if ref.scope == "conversation" else None


class AsyncStateStore:
    """Durable agent state on Postgres: conversations, event log, versioned state, workflow steps,
    idempotent side effects, long-term memory and scratch_ops.

    ``conn`` is a DSN, a psycopg ``AsyncConnection``, a psycopg_pool ``AsyncConnectionPool`` or None
    (then ``$PGAGENTSTATE_DSN``, ``$DATABASE_URL``, or an embedded Postgres). A DSN gets a pool owned by
    the store and closed by :meth:`close`. ``tenant`` scopes every read and write. ``tenant_isolation``
    sets ``pgagentstate.tenant`` in every transaction for row-level security (needed when the database
    role is not the tables' owner). ``pgbouncer`` disables server-side prepared statements (default:
    ``$PGAGENTSTATE_PGBOUNCER``). ``replica``
    (a DSN, connection or pool of a streaming replica) serves history reads: ``list_events``,
    ``list_event_payloads``, ``state_history``, ``get_state_at``, ``list_conversations`` and
    ``search_memory``; everything a turn must read fresh stays on the primary. ``encryption``
    (:class:`~pgagentstate.crypto.Encryption`) encrypts user content at rest with AES-256-GCM.
    ``state_schemas`` maps state document names to schemas (:mod:`pgagentstate.validation`) that every
    write and read of those documents must fit; ``sanitizer`` cleans the text of appended events.
    ``cache`` (:class:`~pgagentstate.redis_tier.RedisTier`, ``pip install 'pgagentstate[redis]'``) serves
    a turn's load from Redis and, with ``scratchpad=True``, keeps the scratchpad there; Postgres stays the
    truth (every write is version-checked there) and takes over whenever Redis fails.
    ``memory_index`` (:class:`~pgagentstate.embedding.MemoryIndex`) embeds memories as they are written
    and makes :meth:`search_memory` search by meaning (pgvector's HNSW index when the server has it).
    ``deadline`` (seconds, default 15; None for none) bounds each transaction a call sends: with no answer
    by then its connection is cut and the call fails with the retryable
    :class:`~pgagentstate.errors.DeadlineExceeded` (a hung proxy or pooler; TCP cannot see those).
    """

    def __init__(
        self,
        conn: ConnectionLike = None,
        *,
        tenant: str = "default",
        schema: str = "pgagentstate",
        limits: Limits | None = None,
        min_size: int = 1,
        max_size: int = 10,
        pgbouncer: bool | None = None,
        tenant_isolation: bool = False,
        replica: ConnectionLike = None,
        encryption: Encryption | None = None,
        state_schemas: Mapping[str, StateSchema] | None = None,
        sanitizer: Sanitizer | None = None,
        cache: RedisTier | None = None,
        memory_index: MemoryIndex | None = None,
        deadline: float | None = DEADLINE,
    ) -> None:
        self._limits = limits or DEFAULT_LIMITS
        self._deadline = arguments.optional_duration(deadline, "deadline")
        self._tenant = check_id(tenant, "tenant", self._limits)
        self._schema = check_schema_name(schema)
        self._pgbouncer = behind_pgbouncer() if pgbouncer is None else pgbouncer
        self._isolation = tenant_isolation
        self._source = _AsyncSource(conn, min_size=min_size, max_size=max_size, pgbouncer=self._pgbouncer)
        # History reads that may lag (list_events, state_history, ...) go to the replica when there is one;
        # a turn's load, every write and every version check stay on the primary.
        self._replica = (
            None
            if replica is None
            else _AsyncSource(replica, min_size=min_size, max_size=max_size, pgbouncer=self._pgbouncer)
        )
        self._cipher = Cipher(encryption) if encryption is not None else None
        self._telemetry = Telemetry()
        self._tier = cache
        self._ctx = Ctx(
            tenant=self._tenant,
            limits=self._limits,
            cipher=self._cipher,
            schemas=dict(state_schemas or {}),
            sanitizer=sanitizer,
            cache=None if cache is None else cache.keys(self._cipher),
            scratch_in_redis=cache is not None and cache.scratchpad,
            memory_index=self._vector_settings(memory_index),
        )

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, conn_string: str | None = None, **kwargs: Any) -> AsyncIterator[AsyncStateStore]:
        """``async with AsyncStateStore.from_conn_string(dsn) as store:`` — a store with its own pool."""
        store = cls(conn_string, **kwargs)
        try:
            yield store
        finally:
            await store.close()

    @property
    def tenant(self) -> str:
        return self._tenant

    @property
    def schema(self) -> str:
        return self._schema

    @property
    def limits(self) -> Limits:
        return self._limits

    @property
    def context(self) -> Ctx:
        """What operations need to know about this store (tenant, limits); for :meth:`run`."""
        return self._ctx

    def with_tenant(self, tenant: str) -> AsyncStateStore:
        """A store for another tenant that shares this store's connections."""
        clone = copy.copy(self)
        clone._tenant = check_id(tenant, "tenant", self._limits)
        clone._ctx = dataclasses.replace(self._ctx, tenant=clone._tenant)
        return clone

    def with_context_tenant(self, tenant: str) -> AsyncStateStore:
        """A store for a tenant named by request data (an agent run's context, a header): on a store with
        ``tenant_isolation`` only its own tenant, as such data must not choose whose rows it reaches
        (:class:`~pgagentstate.errors.InvalidInput`); otherwise as :meth:`with_tenant`."""
        check_id(tenant, "tenant", self._limits)
        if tenant == self._tenant:
            return self
        if self._isolation:
            raise InvalidInput(
                f"this store isolates tenant {self._tenant!r}: a tenant from request data cannot change it",
                path="tenant",
            )
        return self.with_tenant(tenant)

    @property
    def cache(self) -> RedisTier | None:
        """The Redis tier, if the store has one."""
        return self._tier

    def with_memory_index(self, memory_index: MemoryIndex | None) -> AsyncStateStore:
        """A store that shares this store's connections and embeds memories with ``memory_index`` (an
        adapter's own index on a store the application passed in). Call :meth:`setup` on it to create the
        index's ANN index."""
        clone = copy.copy(self)
        clone._ctx = dataclasses.replace(self._ctx, memory_index=self._vector_settings(memory_index))
        return clone

    def _vector_settings(self, memory_index: MemoryIndex | None) -> index_ops.VectorSettings | None:
        if memory_index is None:
            return None
        if not isinstance(memory_index, MemoryIndex):
            raise InvalidInput("memory_index must be a pgagentstate.MemoryIndex", path="memory_index")
        asynchronous = True  # sync: asynchronous = False
        return index_ops.VectorSettings(memory_index, Embedder(memory_index, asynchronous=asynchronous), self._schema)

    def stats(self) -> dict[str, Any]:
        """Operation counts, conflicts, retries and errors of this process's store (and its tenant clones);
        with a Redis tier, ``cache``: its state and counters (:meth:`RedisTier.status`)."""
        out = self._telemetry.snapshot()
        if self._tier is not None:
            out["cache"] = dataclasses.asdict(self._tier.status())
        return out

    async def close(self) -> None:
        """Close the pool if the store created it (a pool or connection passed in stays open)."""
        await self._source.close()
        if self._replica is not None:
            await self._replica.close()

    async def __aenter__(self) -> AsyncStateStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- running operations -------------------------------------------------------------------------

    async def run(self, op: Op[T], *, changes: str | None = None) -> T:
        """Run an operation generator (see :mod:`pgagentstate.ops`) to completion. ``changes``: the
        conversation it writes, whose Redis entry is dropped afterwards (whether it succeeded or not)."""
        if changes is not None and self._tier is not None:
            try:
                return await self._run(op)
            finally:
                drop = context_cache.forget_cmd(self._ctx, changes)
                if drop is not None:
                    await self._tier.aexecute(drop)
        return await self._run(op)

    async def _run(self, op: Op[T]) -> T:
        held: AsyncExitStack | None = None
        held_conn: AsyncConnection[Any] | None = None
        result: Any = None
        error: BaseException | None = None
        observation = self._telemetry.observe(op, self._tenant)
        again: Tx | None = None  # a read to run once more on a new connection (see ops.base.read_again)
        retried_read = False
        cmd: Command
        try:
            while True:
                if again is not None:
                    cmd, again = again, None
                    observation.retried()
                else:
                    try:
                        cmd = op.throw(error) if error is not None else op.send(result)
                    except StopIteration as stop:
                        observation.finish(None)
                        return stop.value  # type: ignore[no-any-return]
                    if error is not None:  # the operation recovered from the error: a retry or a fallback
                        observation.retried()
                result, error = None, None
                alone = isinstance(cmd, Tx) and held is None and not cmd.hold
                try:
                    if isinstance(cmd, Tx):
                        if held is None and cmd.hold:
                            held = AsyncExitStack()
                            held_conn = await held.enter_async_context(self._source.connection())
                            with self._bounded(held_conn, cmd):
                                await held.enter_async_context(held_conn.transaction())
                                await self._prelude(held_conn, cmd.snapshot)
                        if held is not None:
                            assert held_conn is not None
                            with self._bounded(held_conn, cmd):
                                result = await self._execute(held_conn, cmd.stmts)
                                if not cmd.hold:
                                    done, held = held, None
                                    await done.aclose()  # commits
                        else:
                            source = self._replica if cmd.replica and self._replica is not None else self._source
                            conn, pool, queue = await source.acquire()
                            try:
                                with self._bounded(conn, cmd):
                                    result = await self._execute_tx(conn, cmd)
                            finally:
                                await source.release(conn, pool, queue)
                    elif isinstance(cmd, Cache):
                        tier = self._tier
                        result = cmd.default if tier is None else await tier.aexecute(cmd)
                    elif isinstance(cmd, Call):
                        result = cmd.fn(*cmd.args)
                        if inspect.isawaitable(result):
                            result = await result  # sync: raise TypeError(_NEEDS_PLAIN_FUNCTION)
                    elif isinstance(cmd, Sleep):
                        await asyncio.sleep(cmd.seconds)
                    else:  # pragma: no cover - a programming error in an operation
                        raise TypeError(f"unknown command {cmd!r}")
                except Exception as exc:
                    if held is not None:
                        done, held = held, None
                        await done.__aexit__(type(exc), exc, exc.__traceback__)  # rolls back
                    error = translate(exc) if isinstance(exc, psycopg.Error) else exc
                    if isinstance(exc, UnicodeEncodeError) and isinstance(cmd, Tx):
                        error = unencodable(cmd)  # the driver could not send a parameter: nothing was run
                    if error is not exc:
                        error.__cause__ = exc
                    if alone and read_again(cmd, error) and not retried_read:
                        again, error, retried_read = cmd, None, True
        except BaseException as exc:
            observation.finish(exc)
            raise
        finally:
            if held is not None:
                stop_exc = RuntimeError("operation abandoned")
                await held.__aexit__(RuntimeError, stop_exc, None)
            op.close()

    def _bounded(self, conn: AsyncConnection[Any], tx: Tx) -> _Deadline:
        """Run the block under the store's deadline (``with``): past it, the watchdog cuts the connection
        (the wait returns at once with a driver error), reported as ``DeadlineExceeded``."""
        return _Deadline(conn, None if tx.patient else self._deadline)

    async def _prelude(self, conn: AsyncConnection[Any], snapshot: bool = False) -> None:
        """First statements of every transaction: isolation level, then the tenant for row-level security."""
        if snapshot:
            await conn.execute(query("repeatable_read", self._schema), prepare=self._prepare)
        if self._isolation:
            await conn.execute(query("set_tenant", self._schema), {"tenant": self._tenant}, prepare=self._prepare)

    @property
    def _prepare(self) -> bool | None:
        return False if self._pgbouncer else None

    async def _execute_tx(self, conn: AsyncConnection[Any], tx: Tx) -> list[Any]:
        """Run a transaction in one round trip (a migration script aside)."""
        stmts = tx.stmts
        if len(stmts) == 1 and conn.autocommit and not (self._isolation or tx.snapshot) and stmts[0].script is None:
            return [await self._one(conn, stmts[0])]  # a statement on its own is a transaction
        if any(s.script is not None for s in stmts):
            async with conn.transaction():
                await self._prelude(conn, tx.snapshot)
                return await self._execute(conn, stmts)
        if conn.pgconn.transaction_status != IDLE:
            # Inside the caller's own transaction (a connection passed in): a savepoint of it.
            async with conn.pipeline(), conn.transaction():
                await self._prelude(conn, tx.snapshot)
                cursors = [await self._send(conn, s) for s in stmts]
            return [await _fetch(c, s) for c, s in zip(cursors, stmts, strict=True)]
        flip = not conn.autocommit
        if flip:  # an idle connection passed in without autocommit: the same transaction, fewer messages
            await conn.set_autocommit(True)
        try:
            if len(stmts) == 1 and not (self._isolation or tx.snapshot):
                return [await self._one(conn, stmts[0])]
            return await self._pipelined(conn, tx)
        finally:
            if flip and conn.pgconn.transaction_status == IDLE:
                await conn.set_autocommit(False)

    async def _pipelined(self, conn: AsyncConnection[Any], tx: Tx) -> list[Any]:
        """The transaction's statements, BEGIN and COMMIT included, sent in one batch with one Sync.

        psycopg's ``conn.transaction()`` inside a pipeline syncs after BEGIN, after the block, after
        COMMIT and at the pipeline's end: four round trips where one does. Here BEGIN and COMMIT are plain
        statements of the batch. Whatever fails — a statement on the server (which then skips the rest of
        the batch, COMMIT included) or Python code between two statements — the transaction is left open
        or aborted and rolled back (one more round trip, on that path only): nothing half-done commits.
        A single statement needs no BEGIN: the statements before a Sync are one implicit transaction,
        and the tenant prelude alone, should it run without the statement, changes nothing.
        """
        stmts = tx.stmts
        explicit = len(stmts) > 1 or tx.snapshot
        try:
            async with conn.pipeline():
                if explicit:
                    await conn.execute(_BEGIN_SNAPSHOT if tx.snapshot else _BEGIN, prepare=False)
                if self._isolation:
                    await self._prelude(conn)
                cursors = [await self._send(conn, s) for s in stmts]
                if explicit:
                    await conn.execute(_COMMIT, prepare=False)
        except BaseException:
            if not conn.closed and conn.pgconn.transaction_status in (INTRANS, INERROR):
                with contextlib.suppress(psycopg.Error):
                    await conn.rollback()
            raise
        return [await _fetch(c, s) for c, s in zip(cursors, stmts, strict=True)]

    async def _execute(self, conn: AsyncConnection[Any], stmts: tuple[Stmt, ...]) -> list[Any]:
        """Run ``stmts`` inside the transaction already open on ``conn``."""
        if len(stmts) > 1 and all(s.script is None for s in stmts):
            async with conn.pipeline():
                cursors = [await self._send(conn, s) for s in stmts]
            return [await _fetch(c, s) for c, s in zip(cursors, stmts, strict=True)]
        return [await self._one(conn, s) for s in stmts]

    async def _send(
        self, conn: AsyncConnection[Any], stmt: Stmt, cur: psycopg.AsyncCursor[Any] | None = None
    ) -> psycopg.AsyncCursor[Any]:
        """Execute ``stmt`` on ``cur`` (a new cursor when None: each statement of a pipeline needs its own)."""
        if cur is None:
            cur = conn.cursor(row_factory=tuple_row)
        if stmt.script is not None:  # several statements: never prepared, whatever the connection's threshold
            return await cur.execute(with_schema(stmt.script, self._schema), prepare=False)
        params = {"tenant": self._tenant, **stmt.params}
        return await cur.execute(
            query(stmt.name, self._schema, stmt.subs),
            params,
            prepare=False if stmt.custom_plan else self._prepare,
            binary=stmt.binary,
        )

    async def _one(self, conn: AsyncConnection[Any], stmt: Stmt) -> Any:
        # One cursor per connection for statements run one at a time: a cursor per statement costs ~20
        # Python calls, a third of psycopg's client time for a small statement (42 vs 80 us measured).
        cur = _cursors.get(conn)
        if cur is None:
            cur = _cursors[conn] = conn.cursor(row_factory=tuple_row)
        if conn.pgconn.pipeline_status:
            # A connection the caller put in pipeline mode (PostgresSaver(conn, pipe=conn.pipeline())): a
            # result, and its error, only arrives at a sync, so a rowcount read without one saw no error
            # and the next call raised it. A nested pipeline syncs when it ends.
            async with conn.pipeline():
                await self._send(conn, stmt, cur)
            return await _fetch(cur, stmt)
        return await _fetch(await self._send(conn, stmt, cur), stmt)

    # --- schema --------------------------------------------------------------------------------------

    async def setup(self) -> list[int]:
        """Create or upgrade the schema (safe to call from many processes at once). Returns the
        migration versions applied by this call. With a ``memory_index``, also installs pgvector when the
        server has it (and the role may) and creates the index's HNSW/IVFFlat index."""
        applied = await self.run(migration_ops.migrate(self._schema))
        if self._ctx.memory_index is not None:
            await self.run(index_ops.setup(self._ctx))
        return applied

    async def migration_status(self) -> tuple[list[int], list[int]]:
        """(applied, pending) migration versions."""
        return await self.run(migration_ops.status(self._schema))

    # --- conversations -------------------------------------------------------------------------------

    async def create_conversation(
        self,
        conversation_id: str,
        *,
        app: str = "",
        framework: str = "",
        user_id: str = "",
        channel: str = "",
        status: str = "active",
        metadata: Mapping[str, Any] | None = None,
        state_patches: Sequence[tuple[StateRef, Mapping[str, Any]]] = (),
    ) -> Conversation:
        """Create a conversation; :class:`~pgagentstate.errors.AlreadyExists` if the id is taken.

        ``state_patches`` merge top-level keys into state documents (its own, its user's, its app's) in the
        same transaction: either the conversation and all of them are written, or nothing is."""
        return await self.run(
            conv_ops.create(
                self._ctx,
                conversation_id,
                ensure=False,
                state_patches=state_patches,
                app=app,
                framework=framework,
                user_id=user_id,
                channel=channel,
                status=status,
                metadata=metadata,
            )
        )

    async def ensure_conversation(
        self,
        conversation_id: str,
        *,
        app: str = "",
        framework: str = "",
        user_id: str = "",
        channel: str = "",
        status: str = "active",
        metadata: Mapping[str, Any] | None = None,
    ) -> Conversation:
        """Return the conversation, creating it with these fields if it does not exist."""
        return await self.run(
            conv_ops.create(
                self._ctx,
                conversation_id,
                ensure=True,
                app=app,
                framework=framework,
                user_id=user_id,
                channel=channel,
                status=status,
                metadata=metadata,
            )
        )

    async def get_conversation(self, conversation_id: str) -> Conversation | None:
        return await self.run(conv_ops.get(self._ctx, conversation_id))

    async def list_conversations(
        self,
        *,
        app: str | None = None,
        framework: str | None = None,
        user_id: str | None = None,
        status: str | None = None,
        updated_before: datetime | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Conversation]:
        """Conversations of this tenant, most recently updated first."""
        return await self.run(
            conv_ops.list_(
                self._ctx,
                app=app,
                framework=framework,
                user_id=user_id,
                status=status,
                updated_before=updated_before,
                limit=limit,
                offset=offset,
            )
        )

    async def update_conversation(
        self,
        conversation_id: str,
        *,
        status: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        expected_version: int | None = None,
    ) -> Conversation:
        """Change status and/or merge metadata keys; with ``expected_version``, only from that version."""
        return await self.run(
            conv_ops.update(
                self._ctx, conversation_id, status=status, metadata=metadata, expected_version=expected_version
            ),
            changes=conversation_id,
        )

    async def delete_conversation(self, conversation_id: str) -> bool:
        """Delete a conversation and everything that belongs to it. False if it did not exist."""
        return await self.run(conv_ops.delete(self._ctx, conversation_id), changes=conversation_id)

    # --- event log -----------------------------------------------------------------------------------

    async def append_events(
        self,
        conversation_id: str,
        events: Sequence[NewEvent],
        *,
        expected_seq: int | None = None,
        state_patches: Sequence[tuple[StateRef, Mapping[str, Any]]] = (),
    ) -> list[Event]:
        """Append events atomically, in order; already-stored event ids are skipped (idempotent).

        ``state_patches`` merge top-level keys into state documents in the same statement, only when
        something was appended (a re-delivered event does not apply its state change twice).
        """
        return await self.run(
            event_ops.append(self._ctx, conversation_id, events, expected_seq, state_patches), changes=conversation_id
        )

    async def list_events(
        self,
        conversation_id: str,
        *,
        limit: int | None = None,
        after_seq: int | None = None,
        since: datetime | None = None,
        kinds: Sequence[str] | None = None,
        decode: bool = True,
    ) -> list[Event]:
        """The newest ``limit`` events (all if None), oldest first. ``decode=False`` leaves each payload as
        JSON text (for callers that parse JSON themselves, e.g. with pydantic)."""
        return await self.run(
            event_ops.list_(
                self._ctx, conversation_id, limit=limit, after_seq=after_seq, since=since, kinds=kinds, decode=decode
            )
        )

    async def list_event_payloads(self, conversation_id: str, *, limit: int | None = None) -> list[Any]:
        """Only the payloads of the newest ``limit`` events, oldest first (the cheapest history read)."""
        return await self.run(event_ops.payloads(self._ctx, conversation_id, limit=limit))

    async def load_conversation(
        self,
        conversation_id: str,
        *,
        limit: int | None = None,
        since: datetime | None = None,
        kinds: Sequence[str] | None = None,
        states: Sequence[StateRef] = (),
        decode: bool = True,
        payloads_only: bool = False,
    ) -> LoadedConversation:
        """The conversation, its newest ``limit`` events and ``states`` documents: one round trip, one
        snapshot (``conversation`` is None when it does not exist). ``payloads_only``: only the events'
        ``(seq, payload as JSON text)``, in ``payloads`` (for callers that parse the JSON themselves; a
        1,000-event load receives and builds much less)."""
        return await self.run(
            turn_ops.load_conversation(
                self._ctx,
                conversation_id,
                limit=limit,
                since=since,
                kinds=kinds,
                states=states,
                decode=decode,
                payloads_only=payloads_only,
            )
        )

    async def pop_event(self, conversation_id: str) -> Event | None:
        """Remove and return the newest event. Its seq is not reused: the conversation's ``last_seq``
        (the log's position) moves forward, so an ``expected_seq`` read before the pop fails."""
        return await self.run(event_ops.pop(self._ctx, conversation_id), changes=conversation_id)

    async def clear_events(self, conversation_id: str) -> int:
        """Remove every event of the conversation; returns how many."""
        return await self.run(event_ops.clear(self._ctx, conversation_id), changes=conversation_id)

    async def replace_events(
        self,
        conversation_id: str,
        events: Sequence[NewEvent],
        *,
        tail: Sequence[str] | None = None,
        prune: Callable[[Event], bool] | None = None,
    ) -> list[Event] | None:
        """Replace the newest events with ``events`` in one transaction: a crash leaves the old history or
        the new one, never a cleared log (compaction, summarisation).

        ``tail``: the ids of the newest events to replace, oldest first (read earlier, e.g. with
        :meth:`list_events`); None replaces the whole history. Returns the new events, or None, with nothing
        changed, when the newest events are no longer ``tail`` (an append or a pop got there first).
        ``prune``: events older than the tail, oldest first, are deleted too for as long as it returns True
        (e.g. expired items). The new events take new seq numbers (a seq is never reused), so a reader's
        ``after_seq`` cursor sees them and an ``expected_seq`` read before the replacement fails.
        """
        return await self.run(
            event_ops.replace(self._ctx, conversation_id, events, tail, prune), changes=conversation_id
        )

    # --- state documents -----------------------------------------------------------------------------

    async def get_state(self, ref: StateRef) -> StateDoc | None:
        (doc,) = await self.run(state_ops.get_many(self._ctx, [ref]))
        return doc

    async def get_states(self, refs: Sequence[StateRef]) -> list[StateDoc | None]:
        """Several documents in one round trip (e.g. session, user and app state)."""
        return await self.run(state_ops.get_many(self._ctx, refs))

    async def put_state(
        self,
        ref: StateRef,
        data: Mapping[str, Any],
        *,
        expected_version: int | None = None,
    ) -> StateDoc:
        """Replace a document. ``expected_version``: None = unconditional, 0 = must not exist, n = must be at
        n; otherwise :class:`~pgagentstate.errors.VersionConflict`."""
        return await self.run(
            state_ops.write(self._ctx, ref, data, (), replace=True, expected_version=expected_version),
            changes=_conversation_of(ref),
        )

    async def patch_state(
        self,
        ref: StateRef,
        set: Mapping[str, Any] | None = None,
        delete: Iterable[str] = (),
        *,
        expected_version: int | None = None,
    ) -> StateDoc:
        """Set and delete top-level keys, merged on the server: concurrent patches never lose each other."""
        return await self.run(
            state_ops.write(self._ctx, ref, set, delete, replace=False, expected_version=expected_version),
            changes=_conversation_of(ref),
        )

    async def state_history(self, ref: StateRef, *, limit: int | None = None) -> list[StateDoc]:
        """Every stored version of a document, newest first."""
        return await self.run(state_ops.history(self._ctx, ref, limit=limit))

    async def get_state_at(
        self,
        ref: StateRef,
        *,
        version: int | None = None,
        at: datetime | None = None,
    ) -> StateDoc | None:
        """The document as it was at ``version`` or at time ``at``."""
        found = await self.run(state_ops.history(self._ctx, ref, limit=1, version=version, at=at))
        return found[0] if found else None

    # --- turns ---------------------------------------------------------------------------------------

    def turn(
        self,
        conversation_id: str,
        *,
        recent: int = 20,
        state_name: str = "state",
        create: bool = False,
        **conversation_fields: Any,
    ) -> AsyncTurn:
        """``async with store.turn(cid) as t:`` — load, let the agent work, save atomically on exit."""
        fields = None
        if create:
            fields = {
                "app": "",
                "framework": "",
                "user_id": "",
                "channel": "",
                "status": "active",
                "metadata": None,
                **conversation_fields,
            }
        return AsyncTurn(self, conversation_id, recent=recent, state_name=state_name, create=fields)

    @asynccontextmanager
    async def conversation_lock(self, conversation_id: str, *, timeout: float | None = None) -> AsyncIterator[None]:
        """Hold a lock on the conversation across processes for the duration of the block (e.g. to run
        one turn at a time per conversation). ``timeout`` (seconds) raises ConflictError when exceeded."""
        check_id(conversation_id, "conversation_id", self._limits)
        timeout = arguments.optional_duration(timeout, "timeout")
        async with self._advisory_lock(lock_key(self._cipher, self._tenant, "conversation", conversation_id), timeout):
            yield

    @asynccontextmanager
    async def advisory_lock(self, name: str, *, timeout: float | None = None) -> AsyncIterator[None]:
        """Hold a named lock of this tenant across processes for the duration of the block (e.g. one
        retention job at a time per tenant, from cron on several hosts)."""
        check_id(name, "name", self._limits)
        timeout = arguments.optional_duration(timeout, "timeout")
        async with self._advisory_lock(lock_key(self._cipher, self._tenant, "named", name), timeout):
            yield

    @asynccontextmanager
    async def _advisory_lock(self, key: int, timeout: float | None) -> AsyncIterator[None]:
        # A transaction-level advisory lock in a transaction kept open on one pooled connection: it works
        # behind PgBouncer in transaction mode, where a session-level lock could land on another client.
        async with self._source.connection() as conn:
            token = _LOCKS_HELD.set((*_LOCKS_HELD.get(), id(self._source)))
            try:
                async with conn.transaction():
                    await self._prelude(conn)
                    if timeout is not None:
                        await conn.execute(
                            query("lock_timeout", self._schema),
                            {"timeout": f"{max(1, int(timeout * 1000))}ms"},
                            prepare=self._prepare,
                        )
                    await conn.execute(query("advisory_lock", self._schema), {"key": key}, prepare=self._prepare)
                    yield
            except psycopg.Error as exc:
                raise translate(exc) from exc
            finally:
                _LOCKS_HELD.reset(token)

    # --- workflow steps ------------------------------------------------------------------------------

    async def start_step(
        self,
        conversation_id: str,
        workflow: str,
        step: str,
        *,
        position: int = 0,
        lease: float = 60.0,
    ) -> Step:
        """Mark a step in progress (attempts + 1); a completed step is returned untouched."""
        return await self.run(
            workflow_ops.start(self._ctx, conversation_id, workflow, step, position=position, lease=lease)
        )

    async def complete_step(
        self,
        conversation_id: str,
        workflow: str,
        step: str,
        result: Any = None,
        *,
        position: int = 0,
    ) -> Step:
        return await self.run(
            workflow_ops.set_status(
                self._ctx, conversation_id, workflow, step, "completed", result=result, position=position
            )
        )

    async def fail_step(self, conversation_id: str, workflow: str, step: str, error: str, *, position: int = 0) -> Step:
        return await self.run(
            workflow_ops.set_status(
                self._ctx, conversation_id, workflow, step, "failed", error=error, position=position
            )
        )

    async def set_step_status(
        self,
        conversation_id: str,
        workflow: str,
        step: str,
        status: str,
        *,
        position: int = 0,
    ) -> Step:
        return await self.run(
            workflow_ops.set_status(self._ctx, conversation_id, workflow, step, status, position=position)
        )

    async def get_workflow(self, conversation_id: str, workflow: str | None = None) -> list[Step]:
        """The steps of one workflow (or all workflows) of a conversation, in order."""
        return await self.run(workflow_ops.list_(self._ctx, conversation_id, workflow))

    async def run_step(
        self,
        conversation_id: str,
        workflow: str,
        step: str,
        fn: Callable[[], Awaitable[T]] | Callable[[], T],
        *,
        position: int = 0,
        lease: float = 60.0,
    ) -> T:
        """Run ``fn`` as a step unless it already completed (then return its recorded result)."""
        result: T = await self.run(
            workflow_ops.run(self._ctx, conversation_id, workflow, step, fn, position=position, lease=lease)
        )
        return result

    # --- idempotency ledger --------------------------------------------------------------------------

    async def run_once(
        self,
        key: str,
        fn: Callable[[str], Awaitable[T]] | Callable[[str], T],
        *,
        api: str = "",
        request: Any = None,
        conversation_id: str | None = None,
        lease: float = 30.0,
        wait: float | None = None,
    ) -> T:
        """Run the side effect ``fn(key)`` at most once per key while it succeeds; replay its result after.

        Pass ``key`` on to the external API as its idempotency key: a crash between the call and the
        record re-sends the same key after the ``lease`` expires, and the API deduplicates.
        """
        result: T = await self.run(
            ledger_ops.run_once(
                self._ctx, key, fn, api=api, request=request, conversation_id=conversation_id, lease=lease, wait=wait
            )
        )
        return result

    async def get_ledger_entry(self, key: str) -> LedgerEntry | None:
        return await self.run(ledger_ops.get(self._ctx, key))

    async def list_ledger(self, *, conversation_id: str | None = None) -> list[LedgerEntry]:
        return await self.run(ledger_ops.list_(self._ctx, conversation_id))

    # --- durable inbox -------------------------------------------------------------------------------

    async def accept(
        self,
        conversation_id: str,
        message: Any,
        *,
        key: str,
        app: str = "",
        framework: str = "",
        user_id: str = "",
        channel: str = "",
    ) -> Accepted:
        """Store an inbound message durably before any agent runs: once this returns, the webhook can answer
        200 and the message will be worked (:meth:`inbox`) even if this process dies. It is the next message
        of the conversation (created with these fields if missing) in arrival order. ``key`` is the
        channel's id of the delivery (a WhatsApp ``wamid``): the same delivery accepted again is the same
        message (``duplicate=True``, nothing written); another message under a used key is
        :class:`~pgagentstate.errors.IdempotencyConflict`."""
        return await self.run(
            inbox_ops.accept(
                self._ctx,
                conversation_id,
                message,
                key=key,
                app=app,
                framework=framework,
                user_id=user_id,
                channel=channel,
            )
        )

    async def claim_message(self, *, lease: float = 30.0, owner: str | None = None) -> InboxMessage | None:
        """Claim the next message of the conversation that waited longest, among those no other worker's
        live lease holds, for ``lease`` seconds; None when no message is ready. Finish it with
        :meth:`finish_message` or :meth:`fail_message` (:meth:`inbox` does all of this)."""
        return await self.run(inbox_ops.claim(self._ctx, lease=lease, owner=owner))

    async def renew_message(self, message: InboxMessage, *, lease: float = 30.0) -> bool:
        """Extend a claimed turn's lease to ``lease`` seconds from now; False when it was taken over."""
        return await self.run(inbox_ops.renew(self._ctx, message, lease=lease))

    async def finish_message(self, message: InboxMessage, result: Any = None) -> None:
        """Record a claimed turn's ``result`` (JSON) and move its conversation on to the next message;
        :class:`~pgagentstate.errors.LeaseLost` when another worker took the turn over."""
        await self.run(inbox_ops.finish(self._ctx, message, result))

    async def fail_message(
        self, message: InboxMessage, error: BaseException | str, *, retry_in: float | None = None
    ) -> None:
        """Record a claimed turn's failure. ``retry_in`` (seconds): the same message is claimable again
        then (the conversation waits for it); None: give up on it, and the conversation moves on."""
        if retry_in is None:
            text = error if isinstance(error, str) else ledger_ops.error_text(error)
            await self.run(inbox_ops.finish(self._ctx, message, None, error=text))
        else:
            await self.run(inbox_ops.release(self._ctx, message, error, delay=retry_in))

    async def list_messages(self, conversation_id: str) -> list[InboxMessage]:
        """The inbox messages of a conversation, in arrival order."""
        return await self.run(inbox_ops.list_(self._ctx, conversation_id))

    async def get_message(self, conversation_id: str, key: str) -> InboxMessage | None:
        """The inbox message accepted under delivery ``key``, with its status and result."""
        return await self.run(inbox_ops.get(self._ctx, conversation_id, key))

    async def inbox_metrics(self) -> InboxMetrics:
        """The tenant's inbox: queue depth, the oldest unanswered message's age, stale leases, recoveries."""
        return await self.run(inbox_ops.metrics(self._ctx))

    def inbox(
        self,
        *,
        lease: float = 30.0,
        concurrency: int = 1,
        poll: float = 0.5,
        max_attempts: int = 3,
        retry_delay: float = 1.0,
    ) -> AsyncInbox:
        """Workers for this store's durable inbox: ``await store.inbox(concurrency=4).work(handler)``."""
        return AsyncInbox(
            self, lease=lease, concurrency=concurrency, poll=poll, max_attempts=max_attempts, retry_delay=retry_delay
        )

    # --- long-term memory ----------------------------------------------------------------------------

    async def put_memory(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        *,
        ttl: float | None = None,
        user_id: str = "",
        expected_version: int | None = None,
        index: bool | Sequence[str] | None = None,
    ) -> Memory:
        """Store a memory item; ``ttl`` in seconds. ``expected_version`` as for :meth:`put_state`. With a
        memory index, ``index`` picks what is embedded: None (the index's fields), a list of field paths, or
        False (nothing: found by words and filters only)."""
        return await self.run(
            memory_ops.put(
                self._ctx,
                namespace,
                key,
                value,
                ttl=ttl,
                user_id=user_id,
                expected_version=expected_version,
                index=index,
            )
        )

    async def put_memories(
        self,
        items: Sequence[memory_ops.Item],
        *,
        ttl: float | None = None,
        user_id: str = "",
        if_absent: bool = False,
    ) -> int:
        """Store many ``(namespace, key, value)`` (or ``(namespace, key, value, index)``) items in one
        statement, with their embeddings when the store has a memory index (embedded in batches);
        ``if_absent`` keeps items that are stored already. Returns how many were written."""
        return await self.run(memory_ops.put_many(self._ctx, items, ttl=ttl, user_id=user_id, if_absent=if_absent))

    async def get_memory(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool = True) -> Memory | None:
        return await self.run(memory_ops.get(self._ctx, namespace, key, refresh_ttl=refresh_ttl))

    async def delete_memory(self, namespace: Sequence[str], key: str) -> bool:
        return await self.run(memory_ops.delete(self._ctx, namespace, key))

    async def search_memory(
        self,
        namespace_prefix: Sequence[str] = (),
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        user_id: str | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool = False,
        mode: str = "auto",
    ) -> list[Memory]:
        """Items under a namespace prefix, filtered by value containment, ranked by ``query``.

        ``mode``: ``"text"`` ranks by the query's words (Unicode-normalised, see
        :mod:`pgagentstate.textsearch`), leaving out the items with none of them; ``"rank"`` likewise but
        keeps those (score 0, after the others); ``"vector"`` by meaning (needs a memory index; ``score`` is the
        similarity); ``"hybrid"`` fuses both by reciprocal rank; ``"auto"`` (default) is hybrid with a
        memory index, else text. Without a query, the newest items first."""
        return await self.run(
            memory_ops.search(
                self._ctx,
                namespace_prefix,
                query=query,
                filter=filter,
                user_id=user_id,
                limit=limit,
                offset=offset,
                refresh_ttl=refresh_ttl,
                mode=mode,
            )
        )

    async def memory_search_mode(self) -> index_ops.VectorMode | None:
        """What search by meaning uses on this server (pgvector and its index, or exact search); None
        without a memory index. Checked again on every call."""
        if self._ctx.memory_index is None:
            return None
        self._ctx.memory_index.mode = None
        return await self.run(index_ops.detect(self._ctx))

    async def list_memory_namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        return await self.run(
            memory_ops.namespaces(
                self._ctx, prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
            )
        )

    # --- distillation --------------------------------------------------------------------------------

    async def distill(self, conversation_id: str, distiller: Distiller | None = None) -> DistillResult | None:
        """Turn the conversation's events past its watermark into facts in its user's long-term memory
        (see :mod:`pgagentstate.distill`): once per log position (``run_once``), consolidated, committed
        with the watermark. None when the conversation does not exist. Meant for a worker, not a request."""
        d = distiller or Distiller()
        p = await self.run(distill_ops.plan(self._ctx, conversation_id))
        if p is None:
            return None
        if p.seq <= p.watermark:
            return distill_ops.result(p, None, skipped=True)

        async def work(key: str) -> dict[str, Any]:
            del key
            return await self.run(distill_ops.work(self._ctx, p, d))

        outcome: dict[str, Any] = await self.run_once(
            p.key, work, api="distill", conversation_id=conversation_id, lease=d.lease
        )
        return distill_ops.result(p, outcome)

    async def pending_distillations(self, limit: int = 100) -> list[str]:
        """Conversations whose event log moved past their distillation watermark, least recently done first."""
        return await self.run(distill_ops.pending(self._ctx, limit))

    async def request_distill(self, conversation_id: str) -> None:
        """Wake the distillation workers for this conversation (a NOTIFY: the after-turn hook of the
        adapters). Costs one round trip and nothing else; a worker also finds the work without it."""
        await self.run(distill_ops.notify(self._ctx, conversation_id, DISTILL_CHANNEL))

    # --- encryption ----------------------------------------------------------------------------------

    async def rotate_keys(
        self,
        *,
        all_tenants: bool = False,
        batch_size: int = 500,
        include_plaintext: bool = False,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> dict[str, int]:
        """Re-encrypt every stored ciphertext (of this tenant, or all) with the active key, in batches.
        ``include_plaintext`` also encrypts rows written before encryption was turned on. Safe to
        interrupt and run again; safe while the application runs."""
        return await self.run(
            rotation_ops.rotate(
                self._ctx,
                all_tenants=all_tenants,
                batch_size=batch_size,
                include_plaintext=include_plaintext,
                progress=progress,
            )
        )

    # --- scratchpad ----------------------------------------------------------------------------------

    async def put_scratch(self, conversation_id: str, key: str, value: Any, *, ttl: float | None = None) -> None:
        await self.run(scratch_ops.put(self._ctx, conversation_id, key, value, ttl=ttl))

    async def get_scratch(self, conversation_id: str, key: str) -> Any | None:
        found = await self.run(scratch_ops.list_(self._ctx, conversation_id, key))
        return found.get(key)

    async def list_scratch(self, conversation_id: str) -> dict[str, Any]:
        return await self.run(scratch_ops.list_(self._ctx, conversation_id))

    async def delete_scratch(self, conversation_id: str, key: str) -> bool:
        return await self.run(scratch_ops.delete(self._ctx, conversation_id, key))

    # --- snapshots -----------------------------------------------------------------------------------
    # Chains of opaque framework checkpoints (LangGraph) per (conversation, namespace); see
    # pgagentstate.ops.snapshots. Written by the LangGraph adapter work.

    async def put_snapshot(
        self,
        conversation_id: str,
        snapshot_id: str,
        *,
        namespace: str = "",
        parent_id: str | None = None,
        type: str,
        data: bytes,
        metadata: Mapping[str, Any] | None = None,
        channel_versions: Mapping[str, Any] | None = None,
        blobs: Sequence[snapshot_ops.SnapshotBlob] = (),
        run_id: str | None = None,
        forked: bool | None = False,
        framework: str = "",
        user_id: str | None = None,
    ) -> str:
        """Store a snapshot and the blobs of the channels that changed, in one statement.

        A blob's chunks may be passed by hash when stored in the conversation already, and a blob may
        extend a ``base`` version of its channel stored whole (see :class:`SnapshotBlob`); if any of those
        is missing (pruned meanwhile), nothing is stored and :class:`~pgagentstate.errors.NotFound` is
        raised: send the whole blobs. ``parent_id`` None starts a chain and creates the conversation (with
        ``framework``, and ``user_id`` as its owner, whom ``pgagentstate export`` / ``erase`` follow)
        if needed; with a parent the conversation must exist (:class:`~pgagentstate.errors.NotFound`). Unless
        ``forked``, the snapshot must be the only non-forked child of its parent (the only non-forked root
        of its namespace when parentless): else :class:`~pgagentstate.errors.VersionConflict`. ``forked=None``
        decides at write time: not a fork if the namespace has no snapshot yet (so that of two first snapshots
        of a new thread only one wins), else a fork. Storing the same ``snapshot_id`` again replaces its data
        and metadata.
        Returns the stored version's stamp (see :meth:`get_snapshot_head`).
        """
        return await self.run(
            snapshot_ops.put(
                self._ctx,
                conversation_id,
                snapshot_id,
                namespace=namespace,
                parent_id=parent_id,
                type=type,
                data=data,
                metadata=metadata or {},
                channel_versions=channel_versions or {},
                blobs=blobs,
                run_id=run_id,
                forked=forked,
                framework=framework,
                user_id=user_id,
            )
        )

    async def put_snapshot_writes(
        self,
        conversation_id: str,
        snapshot_id: str,
        writes: Sequence[snapshot_ops.SnapshotWrite],
        *,
        namespace: str = "",
        framework: str = "",
    ) -> bool:
        """Store pending writes against a snapshot (which may not be stored yet). Writes with idx >= 0 keep
        the first value stored; negative idx (special channels) are overwritten. Writes for a conversation
        deleted with :meth:`delete_snapshot_conversation` are dropped (False; until a new chain of snapshots
        starts it again: see :meth:`put_snapshot`); True otherwise."""
        return await self.run(
            snapshot_ops.put_writes(
                self._ctx, conversation_id, snapshot_id, namespace=namespace, writes=writes, framework=framework
            )
        )

    async def get_snapshot(
        self, conversation_id: str, *, namespace: str = "", snapshot_id: str | None = None
    ) -> snapshot_ops.Snapshot | None:
        """One snapshot (the newest of the namespace when ``snapshot_id`` is None) with its blobs and
        writes, in one round trip."""
        found = await self.run(
            snapshot_reads.read(
                self._ctx,
                conversation_id=conversation_id,
                namespace=namespace,
                snapshot_id=snapshot_id,
                before=None,
                filter=None,
                limit=1,
            )
        )
        return found[0] if found else None

    async def get_snapshot_head(
        self, conversation_id: str, *, namespace: str = ""
    ) -> snapshot_ops.SnapshotHead | None:
        """The newest snapshot's id, stamp and pending writes, without its blobs: one small statement for a
        caller that kept what it stored (a stamp equal to the one :meth:`put_snapshot` returned means the
        head is still that very version). None when the namespace has no snapshot."""
        return await self.run(snapshot_reads.head(self._ctx, conversation_id, namespace=namespace))

    async def list_snapshots(
        self,
        conversation_id: str | None = None,
        *,
        namespace: str | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int | None = None,
    ) -> list[snapshot_ops.Snapshot]:
        """Snapshots newest first (all conversations when ``conversation_id`` is None), ``filter`` matched
        by metadata containment; each distinct blob and chunk is fetched once."""
        return await self.run(
            snapshot_reads.read(
                self._ctx,
                conversation_id=conversation_id,
                namespace=namespace,
                snapshot_id=None,
                before=before,
                filter=filter,
                limit=limit,
            )
        )

    async def snapshot_channel_history(
        self, conversation_id: str, snapshot_id: str, channels: Sequence[str], *, namespace: str = ""
    ) -> dict[str, snapshot_ops.ChannelHistory]:
        """Per channel, the nearest ancestor value of the snapshot and the writes after it, in one query."""
        _, history = await self.run(
            snapshot_reads.chain(self._ctx, conversation_id, snapshot_id, channels, namespace=namespace)
        )
        return history

    async def delete_snapshot_conversation(self, conversation_id: str) -> bool:
        """Delete the conversation like :meth:`delete_conversation`, and drop late snapshot writes for it
        until a new chain starts there. False if it did not exist."""
        return await self.run(snapshot_threads.delete_conversation(self._ctx, conversation_id), changes=conversation_id)

    async def delete_snapshot_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the snapshots (and their writes) of these runs, and the blobs and chunks no longer used."""
        await self.run(snapshot_threads.delete_runs(self._ctx, run_ids))

    async def copy_snapshots(self, source_conversation_id: str, target_conversation_id: str) -> None:
        """Copy every snapshot, blob, chunk and write of a conversation to another (created like the
        source when missing)."""
        await self.run(snapshot_threads.copy(self._ctx, source_conversation_id, target_conversation_id))

    async def prune_snapshots(
        self, conversation_ids: Sequence[str], *, strategy: snapshot_ops.PruneStrategy = "keep_latest"
    ) -> None:
        """``keep_latest``: keep the newest snapshot of each namespace (and what its delta channels are
        rebuilt from); ``delete``: remove every snapshot. The conversations themselves stay."""
        await self.run(snapshot_threads.prune(self._ctx, conversation_ids, strategy))


class AsyncTurn:
    """One turn of a conversation: loaded on enter, saved atomically on a clean exit.

    ``state`` is a plain dict to mutate; ``append`` queues events; ``set_status`` changes the
    conversation's status. Nothing reaches the database until the block ends without an exception.
    """

    def __init__(
        self,
        store: AsyncStateStore,
        conversation_id: str,
        *,
        recent: int,
        state_name: str,
        create: Mapping[str, Any] | None,
    ) -> None:
        self._store = store
        self._id = conversation_id
        self._recent = recent
        self._state_name = state_name
        self._create = create
        self._loaded: turn_ops.Loaded | None = None
        self._original: dict[str, Any] = {}
        self._new_events: list[NewEvent] = []
        self._status: str | None = None
        self.state: dict[str, Any] = {}
        self.appended: list[Event] = []

    @property
    def conversation(self) -> Conversation:
        if self._loaded is None:
            raise RuntimeError("the turn is not loaded yet: use it as a context manager")
        return self._loaded.conversation

    @property
    def events(self) -> list[Event]:
        """The newest events loaded with the turn (not including the ones appended in it)."""
        return self._loaded.events if self._loaded else []

    @property
    def state_version(self) -> int:
        return self._loaded.state.version if self._loaded and self._loaded.state else 0

    def append(self, payload: Any, *, kind: str = "message", author: str = "", event_id: str | None = None) -> None:
        self._new_events.append(NewEvent(payload=payload, kind=kind, author=author, event_id=event_id))

    def set_status(self, status: str) -> None:
        self._status = conv_ops.check_status(status)

    async def load(self) -> AsyncTurn:
        self._loaded = await self._store.run(
            turn_ops.load(
                self._store._ctx, self._id, recent=self._recent, state_name=self._state_name, create=self._create
            )
        )
        # The loaded document is this turn's own: no copy for the caller, and the one kept to see whether
        # it changed is a JSON round trip (the data is JSON), ~3x cheaper than copy.deepcopy.
        self.state = self._loaded.state.data if self._loaded.state else {}
        self._original = json.loads(json.dumps(self.state))
        return self

    async def commit(self) -> list[Event]:
        if self._loaded is None:
            raise RuntimeError("the turn is not loaded yet")
        changed = self.state != self._original
        self.appended = await self._store.run(
            turn_ops.commit(
                self._store._ctx,
                self._loaded,
                new_events=self._new_events,
                state_name=self._state_name,
                new_state=self.state if changed else None,
                status=self._status,
            )
        )
        return self.appended

    async def __aenter__(self) -> AsyncTurn:
        return await self.load()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.commit()


class AsyncInbox:
    """Workers for a store's durable inbox (:meth:`AsyncStateStore.accept` puts messages in).

    ``await inbox.work(handler)`` runs ``concurrency`` loops; each claims one conversation's next message
    at a time, calls ``handler(message)`` (an :class:`~pgagentstate.models.InboxMessage`; a coroutine
    function or a plain one) and records what it returns (JSON) as the message's result. While the handler
    runs, the lease is renewed every third of ``lease``; a worker that dies stops renewing, and when the
    lease runs out another worker claims the same message with ``message.resumed`` True: the handler must
    resume from the turn's last durable step (run side effects through ``run_once`` / ``run_step``, which
    replay what was done). A handler that raises is retried after ``retry_delay`` x attempts seconds, up to
    ``max_attempts`` claims; then the message is ``failed`` and its conversation moves on. A turn that
    kills its worker every time is given up on the same way. ``stop()`` ends the loops gracefully: no new
    claim, turns under way finish and are recorded, then ``work`` returns how many messages it handled.
    """

    def __init__(
        self,
        store: AsyncStateStore,
        *,
        lease: float = 30.0,
        concurrency: int = 1,
        poll: float = 0.5,
        max_attempts: int = 3,
        retry_delay: float = 1.0,
    ) -> None:
        self.store = store
        self.lease = arguments.duration(lease, "lease")
        self.concurrency = arguments.integer(concurrency, "concurrency", low=1, high=1000)
        self.poll = arguments.duration(poll, "poll")
        self.max_attempts = arguments.integer(max_attempts, "max_attempts", low=1, high=arguments.INT)
        self.retry_delay = arguments.duration(retry_delay, "retry_delay")
        self._stop = _Runtime.event()

    def stop(self) -> None:
        """Claim nothing more; :meth:`work` returns once the turns under way are recorded. (Asyncio: call
        it in the loop's thread — from a signal handler, ``loop.add_signal_handler(SIGTERM, inbox.stop)``.)"""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def work(self, handler: Callable[[InboxMessage], Any], *, until_idle: bool = False) -> int:
        """Work messages until :meth:`stop` (or, with ``until_idle``, until no message is ready to claim);
        returns how many this call handled."""
        loops = [_Runtime.start(self._loop, handler, until_idle) for _ in range(self.concurrency)]
        counts: list[int] = await _Runtime.join(loops)
        return sum(counts)

    async def work_one(self, handler: Callable[[InboxMessage], Any]) -> InboxMessage | None:
        """Claim one message, run ``handler`` on it and record the outcome; None when none was ready."""
        msg = await self.store.claim_message(lease=self.lease)
        if msg is None:
            return None
        if msg.attempts > self.max_attempts:
            await self._record(msg, None, f"given up: claimed {msg.attempts} times, never finished")
            return msg
        done = _Runtime.event()
        keeper = _Runtime.start(self._keep, msg, done)
        result: Any = None
        error: BaseException | None = None
        try:
            result = handler(msg)
            if inspect.isawaitable(result):
                result = await result  # sync: raise TypeError(_NEEDS_PLAIN_FUNCTION)
        except Exception as exc:
            _inbox_log.warning("inbox: message %s of %r failed: %r", msg.seq, msg.conversation_id, exc)
            error = exc
        finally:
            done.set()
            await _Runtime.join([keeper])
        await self._record(msg, result, error)
        return msg

    async def _record(self, msg: InboxMessage, result: Any, error: BaseException | str | None) -> None:
        try:
            if error is None:
                try:
                    await self.store.finish_message(msg, result)
                except InvalidInput as exc:  # the result is not JSON: the turn cannot be recorded as done
                    await self.store.fail_message(msg, f"result not recordable: {exc}")
            elif isinstance(error, BaseException) and msg.attempts < self.max_attempts:
                await self.store.fail_message(msg, error, retry_in=self.retry_delay * msg.attempts)
            else:
                await self.store.fail_message(msg, error)
        except LeaseLost:
            _inbox_log.warning(
                "inbox: message %s of %r was taken over by another worker (its lease of %ss ran out)",
                msg.seq,
                msg.conversation_id,
                self.lease,
            )

    async def _keep(self, msg: InboxMessage, done: Any) -> None:
        """Renew the turn's lease every third of it until ``done``: two renewals can fail (Postgres
        restarting) before the lease runs out."""
        while not await _Runtime.wait(done, self.lease / 3):
            try:
                if not await self.store.renew_message(msg, lease=self.lease):
                    return  # taken over: recording the outcome will say so
            except PgAgentStateError as exc:
                _inbox_log.warning("inbox: could not renew the lease of %r: %s", msg.conversation_id, exc)

    async def _loop(self, handler: Callable[[InboxMessage], Any], until_idle: bool) -> int:
        handled = 0
        while not self._stop.is_set():
            try:
                msg = await self.work_one(handler)
            except PgAgentStateError as exc:
                if until_idle:
                    raise
                # Postgres unreachable or restarting: the leases keep every turn safe; try again later.
                _inbox_log.warning("inbox: claim failed, trying again in %ss: %s", self.poll, exc)
                await _Runtime.wait(self._stop, self.poll)
                continue
            if msg is not None:
                handled += 1
            elif until_idle:
                break
            else:
                await _Runtime.wait(self._stop, self.poll)
        return handled
