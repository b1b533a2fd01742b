"""Pure mapping between LangGraph checkpoints and core snapshots (no I/O, shared by sync and async).

Storage layout of one checkpoint:

- ``data``: the checkpoint without its channel values, plus the small primitive values (None, bools,
  numbers, short strings), serialised by the saver's ``serde`` (so a user serde, e.g. encryption, covers
  them too);
- ``channel_versions``: JSON, so the store can find the blobs in the same query;
- one blob per other channel whose version changed. A list becomes one chunk per element: the core stores
  chunks by content hash, so a message list that only grew costs the new messages, not the whole list.
"""

from __future__ import annotations

import random
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig

from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from pgagentstate.ops.snapshots import ChannelHistory, Snapshot, SnapshotBlob, SnapshotWrite, chunk_hash

#: Config key set on configs of checkpoints that are not the head of their namespace. A run that loaded
#: such a checkpoint on purpose (time travel, update_state on an old checkpoint, get_state_history) and
#: then saves a child of it is starting a branch, not racing another writer: that child is stored as a fork.
FORK_FROM = "__pgagentstate_fork_from__"
#: Blob type of a list stored one element per chunk.
LIST_TYPE = "pgagentstate/list"
#: Strings up to this many characters stay inline in the checkpoint row.
INLINE_STR_MAX = 1024
FRAMEWORK = "langgraph"


def thread_of(config: RunnableConfig) -> tuple[str, str, str | None]:
    """(thread_id, checkpoint_ns, checkpoint_id) of a config; thread ids of any type become strings."""
    conf = config.get("configurable") or {}
    if conf.get("thread_id") is None:
        raise ValueError("config['configurable']['thread_id'] is required by the checkpointer")
    return str(conf["thread_id"]), str(conf.get("checkpoint_ns") or ""), conf.get("checkpoint_id") or None


def make_config(thread_id: str, ns: str, checkpoint_id: str, *, fork_point: bool) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
    if fork_point:
        conf[FORK_FROM] = checkpoint_id
    return {"configurable": conf}


def next_version(current: str | int | float | None) -> str:
    """Zero-padded counter (string order = numeric order) plus a random tag, so that two branches writing
    the same channel at the same count never share a blob. 21 characters, where PostgresSaver uses 49:
    versions are repeated in every checkpoint's channel_versions and versions_seen."""
    if current is None:
        n = 0
    elif isinstance(current, int | float):
        n = int(current)
    else:
        n = int(str(current).split(".", 1)[0])
    return f"{n + 1:012d}.{random.getrandbits(32):08x}"


def _inline(value: Any) -> bool:
    # Exact types: a str or int subclass (an enum) must keep its type through serde as a blob would.
    t = type(value)
    return value is None or t is bool or t is int or t is float or (t is str and len(value) <= INLINE_STR_MAX)


def _piece(serde: SerializerProtocol, value: Any) -> bytes:
    typ, data = serde.dumps_typed(value)
    return typ.encode() + b"\0" + data


def dump_blob(serde: SerializerProtocol, channel: str, version: str, value: Any) -> SnapshotBlob:
    """A list becomes one chunk per element (type-tagged), anything else one chunk."""
    if type(value) is list:
        return SnapshotBlob(channel, version, LIST_TYPE, tuple(_piece(serde, v) for v in value))
    typ, data = serde.dumps_typed(value)
    return SnapshotBlob(channel, version, typ, (data,))


class Decoder:
    """Decodes blobs, each distinct chunk once per call (a list() shares chunks across checkpoints)."""

    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde
        self._pieces: dict[int, Any] = {}
        self._values: dict[int, Any] = {}

    def piece(self, chunk: bytes | str) -> Any:
        assert isinstance(chunk, bytes)
        key = id(chunk)
        if key not in self._pieces:
            typ, _, data = chunk.partition(b"\0")
            self._pieces[key] = self.serde.loads_typed((typ.decode(), data))
        return self._pieces[key]

    def blob(self, blob: SnapshotBlob) -> Any:
        if blob.type == LIST_TYPE:
            # A new list per checkpoint: the elements are shared, the list a graph appends to is not.
            return [self.piece(c) for c in blob.chunks]
        key = id(blob)
        if key not in self._values:
            self._values[key] = self.serde.loads_typed((blob.type, b"".join(cast(tuple[bytes, ...], blob.chunks))))
        return self._values[key]


def dump_checkpoint(
    serde: SerializerProtocol, checkpoint: Checkpoint, new_versions: ChannelVersions
) -> tuple[str, bytes, dict[str, Any], list[SnapshotBlob]]:
    """(type, data, channel_versions, blobs) to store; blobs only for channels whose version moved."""
    versions = dict(checkpoint["channel_versions"])
    inline: dict[str, Any] = {}
    blobs: list[SnapshotBlob] = []
    for channel, value in checkpoint["channel_values"].items():
        if _inline(value):
            inline[channel] = value
        elif channel in new_versions:
            blobs.append(dump_blob(serde, channel, str(versions.get(channel, new_versions[channel])), value))
    body = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "channel_versions")}
    body["channel_values"] = inline
    typ, data = serde.dumps_typed(body)
    return typ, data, versions, blobs


def load_checkpoint(decoder: Decoder, snap: Snapshot) -> Checkpoint:
    body: dict[str, Any] = decoder.serde.loads_typed((snap.type, snap.data))
    values: dict[str, Any] = body.pop("channel_values", {})
    for channel, blob in snap.blobs.items():
        if channel not in values:
            values[channel] = decoder.blob(blob)
    body["channel_values"] = values
    body["channel_versions"] = dict(snap.channel_versions)
    return body  # type: ignore[return-value]


def metadata_for(config: RunnableConfig, metadata: CheckpointMetadata) -> dict[str, Any]:
    return dict(get_serializable_checkpoint_metadata(config, metadata))


def is_fork(config: RunnableConfig, metadata: Mapping[str, Any]) -> bool:
    """Whether a put starts a branch on purpose (stored as a fork) rather than continuing the chain.

    With a parent: the run loaded that parent while it was not the head (see FORK_FROM). Without one: any
    checkpoint but a run's first (step -1) — a run's first checkpoint claims an empty thread, and two of
    those racing would otherwise fork the thread from its first turn.
    """
    conf = config.get("configurable") or {}
    parent = conf.get("checkpoint_id")
    if parent:
        return bool(conf.get(FORK_FROM) == parent)
    return metadata.get("step") != -1


def to_tuple(decoder: Decoder, snap: Snapshot) -> CheckpointTuple:
    writes: list[PendingWrite] = [
        (w.task_id, w.channel, decoder.serde.loads_typed((w.type, w.data))) for w in snap.writes
    ]
    return CheckpointTuple(
        config=make_config(snap.conversation_id, snap.namespace, snap.snapshot_id, fork_point=not snap.is_head),
        checkpoint=load_checkpoint(decoder, snap),
        metadata=snap.metadata,  # type: ignore[arg-type]
        parent_config=(
            make_config(snap.conversation_id, snap.namespace, snap.parent_id, fork_point=True)
            if snap.parent_id
            else None
        ),
        pending_writes=writes,
    )


def dump_writes(
    serde: SerializerProtocol, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
) -> list[SnapshotWrite]:
    out = []
    for i, (channel, value) in enumerate(writes):
        typ, data = serde.dumps_typed(value)
        out.append(SnapshotWrite(str(task_id), WRITES_IDX_MAP.get(channel, i), channel, typ, data, task_path))
    return out


def delta_history(
    serde: SerializerProtocol, history: Mapping[str, ChannelHistory]
) -> dict[str, DeltaChannelHistory]:
    decoder = Decoder(serde)
    out: dict[str, DeltaChannelHistory] = {}
    for channel, h in history.items():
        entry: DeltaChannelHistory = {
            "writes": [(w.task_id, w.channel, serde.loads_typed((w.type, w.data))) for w in h.writes]
        }
        if h.seed is not None:
            entry["seed"] = decoder.blob(h.seed)
        out[channel] = entry
    return out


def matches(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Top-level metadata containment, for the one listing the store does not filter itself."""
    return not filter or all(metadata.get(k) == v for k, v in filter.items())


class KnownChunks:
    """Chunk hashes this saver has seen stored, per thread, so that a put sends each message's bytes once.

    Only an optimisation: the store checks that every chunk sent by hash still exists and refuses the put
    otherwise (then the saver sends the bytes). The lock guards a dict for microseconds, never I/O.
    """

    def __init__(self, max_threads: int = 1024, max_chunks: int = 50_000) -> None:
        self._threads: OrderedDict[str, set[str]] = OrderedDict()
        self._lock = threading.Lock()
        self._max_threads = max_threads
        self._max_chunks = max_chunks

    def substitute(self, thread_id: str, blobs: Sequence[SnapshotBlob]) -> tuple[list[SnapshotBlob], list[str]]:
        """(blobs with known chunks replaced by their hash, every chunk hash of ``blobs``)."""
        with self._lock:
            known: set[str] | frozenset[str] = self._threads.get(thread_id, frozenset())
        out: list[SnapshotBlob] = []
        hashes: list[str] = []
        for blob in blobs:
            pieces: list[bytes | str] = []
            for piece in blob.chunks:
                h = piece if isinstance(piece, str) else chunk_hash(piece)
                hashes.append(h)
                pieces.append(h if h in known else piece)
            out.append(SnapshotBlob(blob.channel, blob.version, blob.type, tuple(pieces)))
        return out, hashes

    def remember(self, thread_id: str, hashes: Iterable[str]) -> None:
        with self._lock:
            known = self._threads.pop(thread_id, set())
            known.update(hashes)
            if len(known) > self._max_chunks:
                known = set()
            self._threads[thread_id] = known
            while len(self._threads) > self._max_threads:
                self._threads.popitem(last=False)

    def forget(self, thread_ids: Iterable[str] | None = None) -> None:
        with self._lock:
            if thread_ids is None:
                self._threads.clear()
            for t in thread_ids or ():
                self._threads.pop(t, None)
