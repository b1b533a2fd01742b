"""Pure mapping between LangGraph checkpoints and core snapshots (no I/O, shared by sync and async).

Storage layout of one checkpoint:

- ``data``: the checkpoint without its id and channel values, plus the small primitive values (None,
  bools, numbers, short strings) and the versions of those channels, serialised by the saver's ``serde``
  (so a user serde, e.g. encryption, covers them too), then deflated with a preset dictionary of
  LangGraph's keys when that is smaller;
- ``channel_versions``: the versions of the other channels, as JSON, so the store finds their blobs in
  the same query;
- one blob per other channel whose version changed. A list becomes one chunk per element: the core stores
  chunks by content hash, so a message list that only grew costs the new messages, not the whole list.
  Any other value is one chunk, deflated like ``data`` when that is smaller.
"""

from __future__ import annotations

import random
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pgagentstate.ops.snapshot_packing import compress as _compress
from pgagentstate.ops.snapshot_packing import decompress as _decompress
from pgagentstate.ops.snapshots import (
    ChannelHistory,
    Snapshot,
    SnapshotBlob,
    SnapshotWrite,
    chunk_hash,
    chunk_hashes,
)

from ._msgpack_lists import array_header, list_pieces, piece_of
from ._objcache import ObjectCache

#: Blob type of a list stored one element per chunk.
LIST_TYPE = "pgagentstate/list"
#: Strings up to this many characters stay inline in the checkpoint row.
INLINE_STR_MAX = 1024
FRAMEWORK = "langgraph"
#: LangGraph's channel of pending sends (``langgraph._internal._constants.TASKS``).
TASKS = "__pregel_tasks"


def thread_of(config: RunnableConfig) -> tuple[str, str, str | None]:
    """(thread_id, checkpoint_ns, checkpoint_id) of a config; thread ids of any type become strings."""
    conf = config.get("configurable") or {}
    if conf.get("thread_id") is None:
        raise ValueError("config['configurable']['thread_id'] is required by the checkpointer")
    return str(conf["thread_id"]), str(conf.get("checkpoint_ns") or ""), conf.get("checkpoint_id") or None


def make_config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(n: int) -> str:
    digits = ""
    while True:
        n, r = divmod(n, 36)
        digits = _B36[r] + digits
        if not n:
            return digits


def next_version(current: str | int | float | None) -> str:
    """A counter that sorts as a string, plus a random tag so that two branches writing the same channel at
    the same count never share a blob: ``"a5.k3j9zq"`` (9-10 characters, where PostgresSaver uses 49;
    versions are repeated in every checkpoint's channel_versions and versions_seen).

    The counter is base 36 after a letter that gives its length ('a' = 1 digit), so string order is numeric
    order, and every such version sorts after the zero-padded decimal ones of earlier releases
    (``"000000000012.1a2b3c4d"``), which it still reads."""
    if current is None:
        n = 0
    elif isinstance(current, int | float):
        n = int(current)
    else:
        head = str(current).split(".", 1)[0]
        n = int(head[1:], 36) if head[:1].isalpha() else int(head)
    digits = _base36(n + 1)
    return f"{chr(ord('a') + len(digits) - 1)}{digits}.{_base36(random.getrandbits(31)).rjust(6, '0')}"


def _inline(value: Any) -> bool:
    # Exact types: a str or int subclass (an enum) must keep its type through serde as a blob would.
    t = type(value)
    return value is None or t is bool or t is int or t is float or (t is str and len(value) <= INLINE_STR_MAX)


@dataclass(frozen=True, slots=True)
class PackedList(SnapshotBlob):
    """A list blob as a put made it, with the whole list as the one msgpack array it was serialised as
    (``JsonPlusSerializer`` packs a list in one call): the saver keeps the blobs it stored last (see
    ``_heads``), and decoding that array is one ``loads``, as PostgresSaver decodes its list blob, where
    rejoining 400 chunks first cost ~0.3 ms."""

    packed: bytes = b""


def dump_blob(
    serde: SerializerProtocol, channel: str, version: str, value: Any, cache: ObjectCache | None = None
) -> SnapshotBlob:
    """A list becomes one chunk per element (type-tagged), anything else one chunk. ``hashes`` is set for
    lists (the caller needs them; with a cache, most are known without hashing)."""
    if type(value) is not list:
        # One chunk, written once per version of its channel (a turn's input: ~420 bytes of msgpack
        # become ~150), so deflating it costs one call per write.
        typ, data = serde.dumps_typed(value)
        if len(data) > 64:
            typ, data = _compress(typ, data)
        return SnapshotBlob(channel, version, typ, (data,))
    if cache is None:
        pieces, packed = list_pieces(serde, value)
        if packed is not None:
            return PackedList(channel, version, LIST_TYPE, pieces, hashes=chunk_hashes(pieces), packed=packed)
        return SnapshotBlob(channel, version, LIST_TYPE, pieces, hashes=chunk_hashes(pieces))
    chunks: list[bytes] = []
    hashes: list[str] = []
    for v in value:
        entry = cache.chunk_of(v)
        if entry is None:
            piece = piece_of(serde, v)
            h = chunk_hash(piece)
            cache.add(v, piece, h)
            chunks.append(piece)
            hashes.append(h)
        else:
            chunks.append(entry.chunk)
            hashes.append(entry.hash)
    return SnapshotBlob(channel, version, LIST_TYPE, tuple(chunks), hashes=tuple(hashes))


class Decoder:
    """Decodes blobs, each distinct chunk once per call (a list() shares chunks across checkpoints).

    With LangGraph's own ``JsonPlusSerializer``, the msgpack chunks still to decode are decoded together,
    as one msgpack array in one call (as PostgresSaver decodes its list blob), rather than one call each.
    """

    def __init__(self, serde: SerializerProtocol, cache: ObjectCache | None = None) -> None:
        self.serde = serde
        self.cache = cache
        self._batch = type(serde) is JsonPlusSerializer
        self._pieces: dict[int, Any] = {}
        self._values: dict[int, Any] = {}

    def piece(self, chunk: bytes | str, hash: str | None = None) -> Any:
        assert isinstance(chunk, bytes)
        key = id(chunk)
        if key not in self._pieces:
            entry = None if self.cache is None or hash is None else self.cache.object_of(hash)
            if entry is not None:
                self._pieces[key] = entry.obj
            else:
                typ, _, data = chunk.partition(b"\0")
                obj = self._pieces[key] = self.serde.loads_typed((typ.decode(), data))
                if self.cache is not None and hash is not None:
                    self.cache.add(obj, chunk, hash)
        return self._pieces[key]

    def _decode_together(self, chunks: Sequence[bytes | str], hashes: Sequence[str] | None) -> None:
        """Decode the msgpack chunks not decoded yet (nor in the cache) in one call."""
        pieces = self._pieces
        # A list() decodes ~100 checkpoints whose lists share most chunks: the set difference (C speed)
        # finds the few not decoded yet without a Python step per chunk (list(limit=100) of a 50-turn
        # thread: 3-5% less client CPU, interleaved with the per-chunk loop in one process).
        missing = set(map(id, chunks)).difference(pieces)
        if len(missing) < 2:
            return
        todo: dict[int, tuple[bytes, str | None]] = {}
        cache = self.cache if hashes is not None else None
        for i, chunk in enumerate(chunks):
            key = id(chunk)
            if key not in missing or key in todo or not isinstance(chunk, bytes):
                continue
            h = hashes[i] if hashes is not None else None
            if cache is not None and h is not None:
                entry = cache.object_of(h)
                if entry is not None:
                    pieces[key] = entry.obj
                    continue
            if chunk.startswith(b"msgpack\0"):  # others are decoded one by one by piece()
                todo[key] = (chunk, h)
        if len(todo) < 2:
            return
        body = b"".join([memoryview(chunk)[8:] for chunk, _ in todo.values()])
        values = self.serde.loads_typed(("msgpack", array_header(len(todo)) + body))
        if type(values) is not list or len(values) != len(todo):  # pragma: no cover - malformed chunk
            return
        for (key, (chunk, h)), obj in zip(todo.items(), values, strict=True):
            pieces[key] = obj
            if self.cache is not None and h is not None:
                self.cache.add(obj, chunk, h)

    def blob(self, blob: SnapshotBlob) -> Any:
        if type(blob) is PackedList and self._batch and self.cache is None:
            return self.serde.loads_typed(("msgpack", blob.packed))
        if blob.type == LIST_TYPE:
            hashes = blob.hashes if len(blob.hashes) == len(blob.chunks) else None
            if self._batch:
                self._decode_together(blob.chunks, hashes)
            # A new list per checkpoint: the elements are shared, the list a graph appends to is not.
            if self.cache is None:
                pieces = self._pieces
                try:  # every element decoded already (the usual case): one pass at C speed
                    return list(map(pieces.__getitem__, map(id, blob.chunks)))
                except KeyError:
                    return [pieces[id(c)] if id(c) in pieces else self.piece(c) for c in blob.chunks]
            if hashes is not None:
                return [self.piece(c, h) for c, h in zip(blob.chunks, hashes, strict=True)]
            return [self.piece(c) for c in blob.chunks]
        key = id(blob)
        if key not in self._values:
            data = b"".join(cast(tuple[bytes, ...], blob.chunks))
            self._values[key] = self.serde.loads_typed(_decompress(blob.type, data))
        return self._values[key]


def dump_checkpoint(
    serde: SerializerProtocol, checkpoint: Checkpoint, new_versions: ChannelVersions,
    cache: ObjectCache | None = None,
) -> tuple[str, bytes, dict[str, Any], list[SnapshotBlob]]:
    """(type, data, blob versions, blobs) to store; blobs only for channels whose version moved.

    Only the versions of channels stored as blobs go to the store's channel_versions (it finds blobs by
    them); the others travel in ``data``, with the inline values. The id is the snapshot id: not repeated.
    """
    versions = checkpoint["channel_versions"]
    inline: dict[str, Any] = {}
    blob_versions: dict[str, Any] = {}
    blobs: list[SnapshotBlob] = []
    for channel, value in checkpoint["channel_values"].items():
        if _inline(value):
            inline[channel] = value
            continue
        version = versions.get(channel, new_versions.get(channel))
        if version is None:  # a value without a version: keep it with the checkpoint rather than lose it
            inline[channel] = value
            continue
        blob_versions[channel] = version
        if channel in new_versions:
            blobs.append(dump_blob(serde, channel, str(version), value, cache))
    body = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "channel_versions", "id")}
    body["channel_values"] = inline
    body["channel_versions"] = {k: v for k, v in versions.items() if k not in blob_versions}
    typ, data = _compress(*serde.dumps_typed(body))
    return typ, data, blob_versions, blobs


def load_checkpoint(decoder: Decoder, snap: Snapshot) -> Checkpoint:
    body: dict[str, Any] = decoder.serde.loads_typed(_decompress(snap.type, snap.data))
    values: dict[str, Any] = body.pop("channel_values", {})
    for channel, blob in snap.blobs.items():
        if channel not in values:
            values[channel] = decoder.blob(blob)
    body["channel_values"] = values
    versions: dict[str, Any] = body.pop("channel_versions", None) or {}
    versions.update(snap.channel_versions)
    body["channel_versions"] = versions
    body["id"] = snap.snapshot_id
    return body  # type: ignore[return-value]


def metadata_for(config: RunnableConfig, metadata: CheckpointMetadata) -> dict[str, Any]:
    return dict(get_serializable_checkpoint_metadata(config, metadata))


def owner(metadata: dict[str, Any]) -> str | None:
    """The user a thread belongs to: ``user_id`` of the run's configurable values, which LangGraph copies into
    the checkpoint's metadata (``config={"configurable": {"thread_id": ..., "user_id": ...}}``)."""
    user = metadata.get("user_id")
    return user if isinstance(user, str) and user else None


def load_write(serde: SerializerProtocol, w: SnapshotWrite) -> Any:
    return serde.loads_typed(_decompress(w.type, w.data))


def to_tuple(decoder: Decoder, snap: Snapshot) -> CheckpointTuple:
    writes: list[PendingWrite] = [(w.task_id, w.channel, load_write(decoder.serde, w)) for w in snap.writes]
    return CheckpointTuple(
        config=make_config(snap.conversation_id, snap.namespace, snap.snapshot_id),
        checkpoint=load_checkpoint(decoder, snap),
        metadata=snap.metadata,  # type: ignore[arg-type]
        parent_config=make_config(snap.conversation_id, snap.namespace, snap.parent_id) if snap.parent_id else None,
        pending_writes=writes,
    )


def dump_writes(
    serde: SerializerProtocol, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
) -> list[SnapshotWrite]:
    out = []
    for i, (channel, value) in enumerate(writes):
        typ, data = serde.dumps_typed(value)
        if len(data) > 64:
            typ, data = _compress(typ, data)
        out.append(SnapshotWrite(str(task_id), WRITES_IDX_MAP.get(channel, i), channel, typ, data, task_path))
    return out


def legacy_parent(tup: CheckpointTuple) -> str | None:
    """The parent of a checkpoint of format v < 4, which kept its pending sends as writes of its parent."""
    if tup.checkpoint.get("v", 4) >= 4 or tup.parent_config is None:
        return None
    return cast(str, tup.parent_config["configurable"]["checkpoint_id"])


def migrate_sends(serde: SerializerProtocol, checkpoint: Checkpoint, parent: Snapshot | None) -> None:
    """Move the sends a legacy checkpoint's parent holds into its TASKS channel, at the checkpoint's highest
    channel version (what PostgresSaver does, and LangGraph expects of a saver)."""
    sends = [load_write(serde, w) for w in parent.writes if w.channel == TASKS] if parent is not None else []
    if not sends:
        return
    checkpoint["channel_values"][TASKS] = sends
    versions = checkpoint["channel_versions"]
    versions[TASKS] = max(versions.values()) if versions else next_version(None)


def delta_history(
    serde: SerializerProtocol, history: Mapping[str, ChannelHistory]
) -> dict[str, DeltaChannelHistory]:
    decoder = Decoder(serde)
    out: dict[str, DeltaChannelHistory] = {}
    for channel, h in history.items():
        entry: DeltaChannelHistory = {
            "writes": [(w.task_id, w.channel, load_write(serde, w)) for w in h.writes]
        }
        if h.seed is not None:
            entry["seed"] = decoder.blob(h.seed)
        out[channel] = entry
    return out


def matches(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Top-level metadata containment, for the one listing the store does not filter itself."""
    return not filter or all(metadata.get(k) == v for k, v in filter.items())


#: A list blob is stored as the last list stored whole (its base) plus what was appended, as long as that
#: is at most this many elements; else whole, and it becomes the base. Bases are whole, so a read follows
#: one base at most, and a list of n elements costs O(n) hashes per version only once every
#: ``MAX_APPENDED`` versions.
MAX_APPENDED = 16


class _Thread:
    __slots__ = ("bases", "chunks")

    def __init__(self) -> None:
        self.chunks: set[str] = set()
        #: (namespace, channel) -> (version, chunk hashes) of the last list seen stored whole
        self.bases: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}


#: (channel if the blob is a list stored whole else "", version, every chunk hash of the blob)
Stored = tuple[str, str, tuple[str, ...]]


class KnownChunks:
    """What this saver has seen stored, per thread, so that a put sends little more than what is new:

    - chunks already stored go by hash, not bytes (each message's bytes are sent once);
    - a list that extends the last list of its channel stored whole goes as that ``base`` plus the chunks
      appended, so the store does not repeat the list of hashes either.

    Only an optimisation: the store checks that every chunk and base sent by reference still exists and
    refuses the put otherwise (then the saver sends whole blobs). The lock guards dicts for microseconds,
    never I/O.
    """

    def __init__(self, max_threads: int = 1024, max_chunks: int = 50_000) -> None:
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        self._lock = threading.Lock()
        self._max_threads = max_threads
        self._max_chunks = max_chunks

    def substitute(
        self, thread_id: str, namespace: str, blobs: Sequence[SnapshotBlob]
    ) -> tuple[list[SnapshotBlob], list[Stored]]:
        """(blobs to send, what :meth:`remember` needs once they are stored)."""
        hashed = [
            blob.hashes or tuple(p if isinstance(p, str) else chunk_hash(p) for p in blob.chunks) for blob in blobs
        ]
        with self._lock:  # membership tests only: no copy of the thread's sets
            state = self._threads.get(thread_id)
            known = set() if state is None else {h for hs in hashed for h in hs if h in state.chunks}
            bases = [None if state is None else state.bases.get((namespace, b.channel)) for b in blobs]
        out: list[SnapshotBlob] = []
        stored: list[Stored] = []
        for blob, hashes, base in zip(blobs, hashed, bases, strict=True):
            pieces: Sequence[bytes | str] = blob.chunks
            if (
                blob.type == LIST_TYPE
                and base is not None
                and base[0] != blob.version
                and len(base[1]) <= len(hashes) <= len(base[1]) + MAX_APPENDED
                and hashes[: len(base[1])] == base[1]
            ):
                n = len(base[1])
                sent = tuple(h if h in known else p for p, h in zip(pieces[n:], hashes[n:], strict=True))
                out.append(SnapshotBlob(blob.channel, blob.version, blob.type, sent, base=base[0]))
                stored.append(("", "", hashes))
                continue
            sent = tuple(h if h in known else p for p, h in zip(pieces, hashes, strict=True))
            out.append(SnapshotBlob(blob.channel, blob.version, blob.type, sent))
            stored.append((blob.channel if blob.type == LIST_TYPE else "", blob.version, hashes))
        return out, stored

    def remember(self, thread_id: str, namespace: str, stored: Iterable[Stored]) -> None:
        """Chunks now stored; lists now stored whole (``channel`` set) become their channel's base."""
        with self._lock:
            state = self._threads.pop(thread_id, None) or _Thread()
            for channel, version, hashes in stored:
                state.chunks.update(hashes)
                if channel:
                    state.bases[(namespace, channel)] = (version, hashes)
            if len(state.chunks) > self._max_chunks:
                state = _Thread()
            self._threads[thread_id] = state
            while len(self._threads) > self._max_threads:
                self._threads.popitem(last=False)

    def remember_read(self, snap: Snapshot) -> None:
        """Chunks and list versions of a snapshot just read: the next put of its thread builds on them."""
        stored: list[Stored] = []
        for b in snap.blobs.values():
            if b.type != LIST_TYPE:
                stored.append(("", "", b.hashes))
            elif b.base is None:
                stored.append((b.channel, b.version, b.hashes))
            else:
                stored.append((b.channel, b.base, b.hashes[: b.base_len]))
                stored.append(("", "", b.hashes[b.base_len :]))
        self.remember(snap.conversation_id, snap.namespace, stored)

    def forget(self, thread_ids: Iterable[str] | None = None) -> None:
        with self._lock:
            if thread_ids is None:
                self._threads.clear()
            for t in thread_ids or ():
                self._threads.pop(t, None)


def all_whole(blobs: Sequence[SnapshotBlob]) -> list[Stored]:
    """What :meth:`KnownChunks.remember` needs after ``blobs`` (bytes, no base) were stored."""
    out: list[Stored] = []
    for b in blobs:
        hashes = b.hashes or tuple(p if isinstance(p, str) else chunk_hash(p) for p in b.chunks)
        out.append((b.channel if b.type == LIST_TYPE else "", b.version, hashes))
    return out
