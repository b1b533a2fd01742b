"""``PostgresCheckpointer``: LangGraph's ``BaseCheckpointSaver`` on the pgagentstate core, sync and async.

Threads are core conversations (``framework="langgraph"``); checkpoints are core snapshots. One instance
serves ``invoke`` and ``ainvoke`` alike and holds no lock of its own: on a pool, concurrent runs proceed
concurrently, and conflicting ones are told apart by the database (see ``docs/langgraph.md``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from langchain_core.runnables import RunnableConfig

from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from pgagentstate import AsyncStateStore, StateStore
from pgagentstate.crypto import Encryption
from pgagentstate.errors import NotFound
from pgagentstate.ops.snapshots import Snapshot, SnapshotBlob

from . import _codec as codec
from ._forks import ForkPoints
from ._heads import DEFAULT_BYTES, HeadCache
from ._new_chains import NewChains
from ._objcache import ObjectCache
from ._stores import ConnectionLike, HasStores, Opened, StoreCall, Stores


class PostgresCheckpointer(HasStores, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on Postgres, usable by sync and async graphs alike.

    ``conn`` is a DSN (a sync and an async pool are opened on first use of each API), a psycopg
    ``Connection`` / ``ConnectionPool`` (the async API runs it in a thread) or an ``AsyncConnection`` /
    ``AsyncConnectionPool`` (the sync API may be used from other threads while its event loop runs).
    ``store=`` passes a core ``StateStore`` or ``AsyncStateStore`` instead. ``serde`` defaults to
    LangGraph's ``JsonPlusSerializer``; ``schema`` and ``tenant`` say where threads live.

    ``encryption=`` (:class:`pgagentstate.crypto.Encryption`) encrypts checkpoints, channel values, pending
    writes and metadata at rest with the core's keys, each ciphertext bound to its place (a store passed
    as ``store=`` brings its own). See ``docs/langgraph.md``, "Encryption at rest".

    ``message_cache=N`` (off by default) keeps up to N messages (list elements) deserialised and
    serialised in memory, so that a step does not serialise or deserialise the unchanged history again.
    Only for graphs whose nodes never mutate a message in place: the same message objects are then
    shared by successive runs of a thread (see ``docs/langgraph.md``).

    ``head_cache`` (bytes, 32 MiB by default; 0 turns it off) keeps the checkpoint this saver stored last
    in each thread, so that the next run's ``get_tuple`` of the thread reads only the head's id, stamp and
    pending writes (one small statement) and decodes the kept bytes, instead of reading the whole
    checkpoint back. A head that another writer moved or stored again is read from the database.

        with PostgresCheckpointer.from_conn_string(DB_URI) as checkpointer:
            checkpointer.setup()
            graph = builder.compile(checkpointer=checkpointer)
    """

    def __init__(
        self,
        conn: ConnectionLike = None,
        pipe: Any = None,
        serde: SerializerProtocol | None = None,
        *,
        store: StateStore | AsyncStateStore | None = None,
        schema: str = "pgagentstate",
        tenant: str = "default",
        pgbouncer: bool | None = None,
        max_size: int = 10,
        message_cache: int = 0,
        head_cache: int = DEFAULT_BYTES,
        encryption: Encryption | None = None,
    ) -> None:
        # ``pipe`` (a psycopg pipeline on ``conn``) is accepted as PostgresSaver's signature has it: the
        # driver pipelines each operation's statements itself.
        del pipe
        super().__init__(serde=serde)
        kw: dict[str, Any] = {"schema": schema, "tenant": tenant, "pgbouncer": pgbouncer, "max_size": max_size}
        if encryption is not None:
            if store is not None:
                raise TypeError("pass encryption= to the StateStore given as store=, not to the checkpointer")
            kw["encryption"] = encryption
        self._stores = Stores(conn, store, **kw)
        self._known = codec.KnownChunks()
        self._heads = HeadCache(head_cache)
        self._forks = ForkPoints()
        self._new_chains = NewChains()
        self._cache = ObjectCache(message_cache) if message_cache > 0 else None

    @classmethod
    def from_conn_string(
        cls, conn_string: str | None = None, *, pipeline: bool = False, **kwargs: Any
    ) -> Opened[PostgresCheckpointer]:
        """``with PostgresCheckpointer.from_conn_string(dsn) as saver:`` or ``async with ...``: a saver
        with its own pools, closed on exit. ``pipeline`` is accepted for PostgresSaver's signature (every
        operation is pipelined already)."""
        del pipeline
        return Opened(cls(conn_string, **kwargs))

    def setup(self) -> Awaitable[None]:
        """Create or upgrade the schema; safe from many processes at once (advisory-locked migrations).

        Runs at once when a sync connection is available and returns a completed awaitable, so both
        ``saver.setup()`` (PostgresSaver's spelling) and ``await saver.setup()`` (AsyncPostgresSaver's)
        work; with only an async connection it returns a coroutine to await.
        """
        return cast(Awaitable[None], self._stores.setup())

    async def asetup(self) -> None:
        await self._stores.arun(lambda s: s.setup())

    def _run(self, call: StoreCall) -> Any:
        return self._stores.run(call)

    async def _arun(self, call: StoreCall) -> Any:
        return await self._stores.arun(call)

    # --- BaseCheckpointSaver ----------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the latest of its thread and namespace, in one round trip."""
        thread_id, ns, checkpoint_id = codec.thread_of(config)
        kept = None if checkpoint_id is not None else self._heads.kept(thread_id, ns)
        if kept is not None:
            head = self._heads.current(kept, self._run(lambda s: s.get_snapshot_head(thread_id, namespace=ns)))
            if head is not None and (kept_tuple := self._decoded(head)) is not None:
                return kept_tuple
        snap = self._run(lambda s: s.get_snapshot(thread_id, namespace=ns, snapshot_id=checkpoint_id))
        tup = self._loaded(snap, checkpoint_id is not None)
        if tup is not None and (parent_id := codec.legacy_parent(tup)):
            codec.migrate_sends(self.serde, tup.checkpoint, self._run(_get_snapshot(thread_id, ns, parent_id)))
        return tup

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns, checkpoint_id = codec.thread_of(config)
        kept = None if checkpoint_id is not None else self._heads.kept(thread_id, ns)
        if kept is not None:
            head = self._heads.current(
                kept, await self._arun(lambda s: s.get_snapshot_head(thread_id, namespace=ns))
            )
            if head is not None and (kept_tuple := self._decoded(head)) is not None:
                return kept_tuple
        snap = await self._arun(lambda s: s.get_snapshot(thread_id, namespace=ns, snapshot_id=checkpoint_id))
        tup = self._loaded(snap, checkpoint_id is not None)
        if tup is not None and (parent_id := codec.legacy_parent(tup)):
            parent = await self._arun(_get_snapshot(thread_id, ns, parent_id))
            codec.migrate_sends(self.serde, tup.checkpoint, parent)
        return tup

    def _loaded(self, snap: Snapshot | None, named: bool) -> CheckpointTuple | None:
        if snap is None:
            return None
        self._forks.read(snap, named)
        self._known.remember_read(snap)
        return codec.to_tuple(codec.Decoder(self.serde, self._cache), snap)

    def _decoded(self, head: Snapshot) -> CheckpointTuple | None:
        """The thread's head as this saver stored it (checked current: see ``_heads``); None for a legacy
        checkpoint (format < 4), whose pending sends come from its parent's writes: read from the store."""
        tup = codec.to_tuple(codec.Decoder(self.serde, self._cache), head)
        if codec.legacy_parent(tup):
            return None
        self._forks.read(head, False)
        return tup

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first; one query however many, each distinct message decoded once."""
        call, post = _list_call(config, filter, before, limit)
        snaps = post(self._run(call))
        decoder = codec.Decoder(self.serde, self._cache)
        for snap in snaps:
            tup = codec.to_tuple(decoder, snap)
            if parent_id := codec.legacy_parent(tup):
                parent = _listed(snaps, snap, parent_id) or self._run(_get_snapshot(*_where(snap), parent_id))
                codec.migrate_sends(self.serde, tup.checkpoint, parent)
            yield tup

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        call, post = _list_call(config, filter, before, limit)
        snaps = post(await self._arun(call))
        decoder = codec.Decoder(self.serde, self._cache)
        for snap in snaps:
            tup = codec.to_tuple(decoder, snap)
            if parent_id := codec.legacy_parent(tup):
                parent = _listed(snaps, snap, parent_id) or await self._arun(_get_snapshot(*_where(snap), parent_id))
                codec.migrate_sends(self.serde, tup.checkpoint, parent)
            yield tup

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; ``pgagentstate.errors.VersionConflict`` if another writer already continued
        the thread from the same parent (see docs/langgraph.md, "Forks and conflicts")."""
        where = thread_id, ns, parent_id = codec.thread_of(config)
        with self._new_chains.storing(thread_id, parent_id):
            self._run(self._put_call(where, config, checkpoint, metadata, new_versions))
        return codec.make_config(thread_id, ns, checkpoint["id"])

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        where = thread_id, ns, parent_id = codec.thread_of(config)
        with self._new_chains.storing(thread_id, parent_id):
            await self._arun(self._put_call(where, config, checkpoint, metadata, new_versions))
        return codec.make_config(thread_id, ns, checkpoint["id"])

    def _put_call(
        self, where: tuple[str, str, str | None], config: RunnableConfig, checkpoint: Checkpoint,
        metadata: CheckpointMetadata, new_versions: ChannelVersions,
    ) -> StoreCall:
        """``where``: the thread, namespace and parent id, as ``codec.thread_of(config)`` parsed them."""
        thread_id, ns, parent_id = where
        typ, data, versions, blobs = codec.dump_checkpoint(self.serde, checkpoint, new_versions, self._cache)
        sendable, stored = self._known.substitute(thread_id, ns, blobs)
        meta = codec.metadata_for(config, metadata)
        run_id = meta.get("run_id")
        kw = {
            "namespace": ns, "parent_id": parent_id, "type": typ, "data": data, "metadata": meta,
            "channel_versions": versions, "run_id": None if run_id is None else str(run_id),
            "forked": self._forks.is_fork(thread_id, ns, config, meta), "framework": codec.FRAMEWORK,
            "user_id": codec.owner(meta),
        }
        # Some chunks or bases go by reference: a NotFound may mean they were deleted meanwhile.
        retry = any(b.base is not None or any(isinstance(p, str) for p in b.chunks) for b in sendable)
        sid = checkpoint["id"]

        def keep(stamp: str) -> None:
            self._heads.stored(
                thread_id, ns, snapshot_id=sid, parent_id=parent_id, type=typ, data=data, metadata=meta,
                channel_versions=versions, blobs=blobs, stamp=stamp,
            )

        def call(s: Any) -> Any:
            if isinstance(s, AsyncStateStore):
                return self._aput_snapshot(s, thread_id, sid, kw, sendable, blobs if retry else None, stored, keep)
            try:
                stamp = s.put_snapshot(thread_id, sid, blobs=sendable, **kw)
            except NotFound:
                if not retry:
                    raise
                self._known.forget([thread_id])
                stamp = s.put_snapshot(thread_id, sid, blobs=blobs, **kw)
                stored[:] = codec.all_whole(blobs)
            self._known.remember(thread_id, ns, stored)
            keep(stamp)

        return call

    async def _aput_snapshot(
        self, store: AsyncStateStore, thread_id: str, sid: str, kw: dict[str, Any],
        sendable: Sequence[SnapshotBlob], full: Sequence[SnapshotBlob] | None,
        stored: Sequence[codec.Stored], keep: Callable[[str], None],
    ) -> None:
        try:
            stamp = await store.put_snapshot(thread_id, sid, blobs=sendable, **kw)
        except NotFound:
            if full is None:
                raise
            self._known.forget([thread_id])
            stamp = await store.put_snapshot(thread_id, sid, blobs=full, **kw)
            stored = codec.all_whole(full)
        self._known.remember(thread_id, kw["namespace"], stored)
        keep(stamp)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes: regular channels keep the first value written, special ones (error,
        interrupt, resume, scheduled) the last. Writes for a deleted thread are dropped, not resurrected,
        unless this saver is storing the first checkpoint of a new run of it (they wait for it)."""
        thread_id, call = self._writes_call(config, writes, task_id, task_path)
        mark = self._new_chains.mark()
        if not self._run(call) and (first := self._new_chains.revivals(thread_id, mark)) is not None:
            concurrent.futures.wait(first)
            self._run(call)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id, call = self._writes_call(config, writes, task_id, task_path)
        mark = self._new_chains.mark()
        if not await self._arun(call) and (first := self._new_chains.revivals(thread_id, mark)) is not None:
            if first:
                await asyncio.wait([asyncio.wrap_future(f) for f in first])
            await self._arun(call)

    def _writes_call(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> tuple[str, StoreCall]:
        thread_id, ns, checkpoint_id = codec.thread_of(config)
        if checkpoint_id is None:
            raise ValueError("put_writes needs config['configurable']['checkpoint_id']")
        rows = codec.dump_writes(self.serde, writes, task_id, task_path)
        return thread_id, lambda s: s.put_snapshot_writes(thread_id, checkpoint_id, rows, namespace=ns,
                                                          framework=codec.FRAMEWORK)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread (its conversation, checkpoints and writes); late writes of runs still in
        flight are dropped instead of recreating it."""
        self._known.forget([str(thread_id)])
        self._heads.forget([str(thread_id)])
        self._run(lambda s: s.delete_snapshot_conversation(str(thread_id)))

    async def adelete_thread(self, thread_id: str) -> None:
        self._known.forget([str(thread_id)])
        self._heads.forget([str(thread_id)])
        await self._arun(lambda s: s.delete_snapshot_conversation(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) saved by these runs."""
        self._known.forget(None)
        self._run(lambda s: s.delete_snapshot_runs([str(r) for r in run_ids]))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._known.forget(None)
        await self._arun(lambda s: s.delete_snapshot_runs([str(r) for r in run_ids]))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (the whole parent chain) and write of a thread to another thread."""
        self._run(lambda s: s.copy_snapshots(str(source_thread_id), str(target_thread_id)))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._arun(lambda s: s.copy_snapshots(str(source_thread_id), str(target_thread_id)))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep the latest checkpoint per namespace (plus the ancestors a DeltaChannel is
        rebuilt from); ``delete``: remove every checkpoint. Threads stay."""
        self._known.forget([str(t) for t in thread_ids])
        self._run(lambda s: s.prune_snapshots([str(t) for t in thread_ids], strategy=strategy))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._known.forget([str(t) for t in thread_ids])
        await self._arun(lambda s: s.prune_snapshots([str(t) for t in thread_ids], strategy=strategy))

    def prune_idle(self, older_than: timedelta, *, strategy: str = "keep_latest") -> int:
        """Retention: prune (``strategy="delete"``: delete) up to ``limit`` threads not written for
        ``older_than``. Returns how many were handled; run it from a scheduled job until it returns 0."""
        cutoff = datetime.now(UTC) - older_than
        idle = self._run(lambda s: s.list_conversations(framework=codec.FRAMEWORK, updated_before=cutoff))
        for call in _retire_calls([c.id for c in idle], strategy):
            self._run(call)
        return len(idle)

    async def aprune_idle(self, older_than: timedelta, *, strategy: str = "keep_latest") -> int:
        cutoff = datetime.now(UTC) - older_than
        idle = await self._arun(lambda s: s.list_conversations(framework=codec.FRAMEWORK, updated_before=cutoff))
        for call in _retire_calls([c.id for c in idle], strategy):
            await self._arun(call)
        return len(idle)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        """Writes and seed of each channel along the parent chain, in one query (not one per ancestor)."""
        if not channels:
            return {}
        thread_id, ns, checkpoint_id = codec.thread_of(config)
        if checkpoint_id is None:
            head = self.get_tuple(config)
            if head is None:
                return {c: {"writes": []} for c in channels}
            checkpoint_id = head.checkpoint["id"]
        target = checkpoint_id
        history = self._run(lambda s: s.snapshot_channel_history(thread_id, target, list(channels), namespace=ns))
        return codec.delta_history(self.serde, history)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        if not channels:
            return {}
        thread_id, ns, checkpoint_id = codec.thread_of(config)
        if checkpoint_id is None:
            head = await self.aget_tuple(config)
            if head is None:
                return {c: {"writes": []} for c in channels}
            checkpoint_id = head.checkpoint["id"]
        target = checkpoint_id
        history = await self._arun(
            lambda s: s.snapshot_channel_history(thread_id, target, list(channels), namespace=ns)
        )
        return codec.delta_history(self.serde, history)

    def get_next_version(self, current: str | None, channel: None) -> str:
        return codec.next_version(current)


def _get_snapshot(thread_id: str, ns: str, snapshot_id: str) -> StoreCall:
    return lambda s: s.get_snapshot(thread_id, namespace=ns, snapshot_id=snapshot_id)


def _where(snap: Snapshot) -> tuple[str, str]:
    return snap.conversation_id, snap.namespace


def _listed(snaps: list[Snapshot], child: Snapshot, snapshot_id: str) -> Snapshot | None:
    """The parent of a listed snapshot when it is listed too (legacy sends: no second read)."""
    return next((s for s in snaps if s.snapshot_id == snapshot_id and _where(s) == _where(child)), None)


def _retire_calls(thread_ids: list[str], strategy: str) -> list[StoreCall]:
    if not thread_ids:
        return []
    if strategy == "delete":
        return [functools.partial(_delete_thread, thread_id=t) for t in thread_ids]
    return [lambda s: s.prune_snapshots(thread_ids, strategy=strategy)]


def _delete_thread(store: Any, *, thread_id: str) -> Any:
    return store.delete_snapshot_conversation(thread_id)


def _list_call(
    config: RunnableConfig | None, filter: dict[str, Any] | None, before: RunnableConfig | None,
    limit: int | None,
) -> tuple[StoreCall, Callable[[list[Snapshot]], list[Snapshot]]]:
    """The store call of a list(), and the filtering left to Python (only when a checkpoint_id is named)."""
    thread_id: str | None = None
    ns: str | None = None
    checkpoint_id: str | None = None
    if config is not None:
        conf = config.get("configurable") or {}
        if conf.get("thread_id") is not None:
            thread_id = str(conf["thread_id"])
        if conf.get("checkpoint_ns") is not None:
            ns = str(conf["checkpoint_ns"])
        checkpoint_id = conf.get("checkpoint_id") or None
    before_id = (before.get("configurable") or {}).get("checkpoint_id") if before else None
    if checkpoint_id is not None and thread_id is not None:
        tid, cid = thread_id, checkpoint_id

        def one(snaps: list[Snapshot]) -> list[Snapshot]:
            return [s for s in snaps if codec.matches(s.metadata, filter)
                    and (before_id is None or s.snapshot_id < before_id)][: limit if limit is not None else None]

        def get(s: Any) -> Any:
            return _maybe_list(s.get_snapshot(tid, namespace=ns or "", snapshot_id=cid))

        return get, one
    return (
        lambda s: s.list_snapshots(thread_id, namespace=ns, before=before_id, filter=filter, limit=limit),
        lambda snaps: snaps,
    )


def _maybe_list(found: Any) -> Any:
    """``[snapshot]`` or ``[]`` from a get_snapshot result that may still be a coroutine (async store)."""
    if asyncio.iscoroutine(found):
        async def wrap() -> list[Snapshot]:
            snap = await found
            return [snap] if snap else []

        return wrap()
    return [found] if found else []
