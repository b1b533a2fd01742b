"""The checkpoint this saver stored last in each thread, kept to answer the next ``get_tuple`` of the thread.

Every invoke starts with ``get_tuple(thread)``, and in a process that runs the thread's turns its answer is
the checkpoint this saver stored at the end of the previous invoke. Reading it back costs the store's full
read (the snapshot, its blobs and every message chunk gathered in order: ~0.45 ms of server time at 100
messages against PostgresSaver's ~0.2 ms for its one blob) and turning the rows back into blobs. With the
checkpoint kept as it was stored, the read is one small statement that returns the head's id and stamp and
its pending writes; the checkpoint is then decoded from the kept bytes, as from a read (fresh objects every
time: nothing is shared between two reads).

Only a hint: the head's id and stamp (a hash of what a read of the snapshot row returns) must match what
the put returned, else the saver reads the store (another process continued the thread, stored the same
checkpoint again with other contents, deleted or pruned it). Entries are bounded by the bytes they hold.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pgagentstate.codec import decode_text, encode
from pgagentstate.errors import PgAgentStateError
from pgagentstate.ops.snapshots import Snapshot, SnapshotBlob, SnapshotHead

from ._codec import PackedList

#: When a thread's turns go to several processes in turn (a load balancer without affinity), what this saver
#: kept is stale at every next turn, and checking it costs a round trip before the full read. Every stale
#: entry costs 2 credits and every current one earns 1 (at most CREDIT); with none left, lookups skip the
#: cache, but for 1 in PROBE, whose hits bring it back.
CREDIT, PROBE = 8, 16

#: Default bound of a saver's kept checkpoints: 32 MiB holds the latest checkpoint of ~160 threads of 200
#: turns (~200 KiB each) or ~650 of 50 turns.
DEFAULT_BYTES = 32 * 1024 * 1024


def _kept_blob(blob: SnapshotBlob) -> tuple[SnapshotBlob, int] | None:
    """What to keep of a blob a put stored, and its bytes; None when a chunk went by hash (nothing to decode
    it from). A list packed in one call keeps only that array (what decoding needs), not its chunks too."""
    if type(blob) is PackedList:
        return PackedList(blob.channel, blob.version, blob.type, (), packed=blob.packed), len(blob.packed)
    if str in set(map(type, blob.chunks)):
        return None
    return blob, sum(map(len, blob.chunks))


class _Entry:
    __slots__ = ("json", "size", "sizes", "snap", "stamp")

    def __init__(self, snap: Snapshot, stamp: str, sizes: dict[str, int], json: tuple[str, str]) -> None:
        self.snap, self.stamp, self.sizes, self.json = snap, stamp, sizes, json
        self.size = len(snap.data) + sum(sizes.values()) + len(json[0]) + len(json[1])


class HeadCache:
    """(thread, namespace) -> the snapshot this saver stored last there, as a read would return it (without
    pending writes), and the stamp its put returned."""

    def __init__(self, max_bytes: int = DEFAULT_BYTES) -> None:
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._bytes = 0
        self.max_bytes = max_bytes
        self._credit = CREDIT
        self._skipped = 0

    def stored(
        self,
        thread_id: str,
        namespace: str,
        *,
        snapshot_id: str,
        parent_id: str | None,
        type: str,
        data: bytes,
        metadata: Mapping[str, Any],
        channel_versions: Mapping[str, Any],
        blobs: Sequence[SnapshotBlob],
        stamp: str,
    ) -> None:
        """A put succeeded: keep what a read of the thread would now return. The blobs of channels that did
        not move come from the kept parent; without it (or with a chunk passed by hash) nothing is kept.
        Linear in the blobs that moved only (a put costs ~10 us more), not in the thread's history."""
        if self.max_bytes <= 0:
            return
        key = (thread_id, namespace)
        with self._lock:
            prev = self._entries.pop(key, None)
            if prev is not None:
                self._bytes -= prev.size
        parent = prev if prev is not None and prev.snap.snapshot_id == parent_id else None
        moved = {b.channel: b for b in blobs}
        kept: dict[str, SnapshotBlob] = {}
        sizes: dict[str, int] = {}
        for channel, version in channel_versions.items():
            blob = moved.get(channel)
            if blob is not None:
                kept_blob = _kept_blob(blob)
                if kept_blob is None:
                    return
                blob, size = kept_blob
            else:
                blob = None if parent is None else parent.snap.blobs.get(channel)
                if parent is None or blob is None or blob.version != str(version):
                    return  # stored by a checkpoint this saver did not keep
                size = parent.sizes[channel]
            kept[channel], sizes[channel] = blob, size
        try:  # as JSON text: what the store hands back (JSON values), and safe from later changes
            texts = encode(dict(metadata)), encode(dict(channel_versions))
        except PgAgentStateError:  # beyond the default limits (a store with larger ones took it): not kept
            return
        snap = Snapshot(thread_id, namespace, snapshot_id, parent_id, type, data, {}, dict(channel_versions), kept,
                        is_head=True)  # fmt: skip
        entry = _Entry(snap, stamp, sizes, texts)
        if entry.size > self.max_bytes // 4:
            return  # one thread must not evict every other
        with self._lock:
            self._entries[key] = entry
            self._bytes += entry.size
            while self._bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= dropped.size

    def kept(self, thread_id: str, namespace: str) -> _Entry | None:
        with self._lock:
            if self._credit <= 0:
                self._skipped += 1
                if self._skipped % PROBE:
                    return None
            entry = self._entries.get((thread_id, namespace))
            if entry is not None:
                self._entries.move_to_end((thread_id, namespace))
            return entry

    def current(self, kept: _Entry, head: SnapshotHead | None) -> Snapshot | None:
        """The kept snapshot with the head's pending writes, if the head is still that stored version."""
        snap = kept.snap
        if head is None or head.snapshot_id != snap.snapshot_id or head.stamp != kept.stamp:
            with self._lock:
                self._credit = max(0, self._credit - 2)
            self.forget([snap.conversation_id])
            return None
        with self._lock:
            self._credit = min(CREDIT, self._credit + 1)
        metadata, versions = kept.json
        return replace(snap, metadata=decode_text(metadata), channel_versions=decode_text(versions),
                       writes=head.writes)  # fmt: skip

    def forget(self, thread_ids: Sequence[str] | None = None) -> None:
        with self._lock:
            for key in [k for k in self._entries if thread_ids is None or k[0] in thread_ids]:
                self._bytes -= self._entries.pop(key).size
