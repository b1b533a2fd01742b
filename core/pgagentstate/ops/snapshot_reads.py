"""Reading snapshots: one snapshot with its blobs and pending writes (``read``), a chain of them (``chain``),
decrypted and reassembled from their chunks. The snapshots themselves and how they are written:
:mod:`pgagentstate.ops.snapshots`."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from ..codec import check_id, check_text, decode_text, encode
from ..crypto import BYTES_MARKER, is_sealed_bytes
from ..errors import InvalidInput, NotFound
from ..sealing import unseal
from .base import Ctx, Op, Row, Stmt, Tx, many
from .snapshots import (
    ChannelHistory,
    Snapshot,
    SnapshotBlob,
    SnapshotHead,
    SnapshotWrite,
    _ids,
    _open,
    chunk_ad,
    chunk_hash,
    data_ad,
    meta_ad,
    split_hashes,
    write_ad,
)

_LENGTH = struct.Struct(">I")
#: conversation -> stored chunk id -> (plaintext, content hash)
Chunks = dict[str, dict[str, tuple[bytes, str]]]


def _chunk(ctx: Ctx, chunks: dict[str, tuple[bytes, str]], conv: str, stored_id: str, data: bytes) -> None:
    if ctx.cipher is None and not is_sealed_bytes(data):
        chunks[stored_id] = (data, stored_id)
        return
    plain = _open(ctx, data, chunk_ad(ctx.tenant, conv, stored_id))
    chunks[stored_id] = (plain, chunk_hash(plain))


def _rows_by_kind(ctx: Ctx, rows: Sequence[Row]) -> tuple[dict[str, list[Row]], Chunks]:
    kinds: dict[str, list[Row]] = {"s": [], "b": [], "w": [], "a": []}
    chunks: Chunks = {}
    unpack = _LENGTH.unpack_from
    for r in rows:
        if r[0] == "c":
            _chunk(ctx, chunks.setdefault(r[1], {}), r[1], r[5], bytes(r[7]))
        elif r[0] == "C":
            data, pos, conv = bytes(r[7]), 0, r[1]
            mine = chunks.setdefault(conv, {})
            plain = ctx.cipher is None
            for h in split_hashes(r[8]):
                (n,) = unpack(data, pos)
                pos += 4
                piece = data[pos : pos + n]
                pos += n
                if plain and not piece.startswith(BYTES_MARKER):  # the common case, inline
                    mine[h] = (piece, h)
                else:
                    _chunk(ctx, mine, conv, h, piece)
        else:
            kinds[r[0]].append(r)
    return kinds, chunks


BlobKey = tuple[str, str, str, str]

_KEY_SQL = ("AND s.conversation_id = %(conversation_id)s", "AND s.namespace = %(namespace)s",
            "AND s.snapshot_id = {schema}.id_bytes(%(snapshot_id)s)")  # fmt: skip
#: snapshot_read's {snapshot_keys} for each combination of (thread, namespace, snapshot) a call gives: plain
#: equalities, which a generic plan can use in its index scan (see sql/snapshots.sql).
_KEYS: dict[tuple[bool, bool, bool], tuple[tuple[str, str], ...]] = {
    (c, n, i): (("snapshot_keys", " ".join(sql for sql, given in zip(_KEY_SQL, (c, n, i), strict=True) if given)),)
    for c in (False, True) for n in (False, True) for i in (False, True)
}


def _blob_rows(rows: Sequence[Row]) -> dict[BlobKey, Row]:
    return {(r[1], r[2], r[5], r[8]): r for r in rows}


def _blob(row: Row, rows: Mapping[BlobKey, Row], chunks: Chunks) -> SnapshotBlob:
    """The blob of a 'b' row with its whole list of chunks: its base's chunks (bases are whole), then its own."""
    stored = split_hashes(row[4])
    base_len = 0
    if row[9] is not None:
        base = rows.get((row[1], row[2], row[5], row[9]))
        if base is None:  # deleted under a concurrent prune
            raise NotFound(f"base {row[9]!r} of channel {row[5]!r} at version {row[8]!r} is missing")
        base_hashes = split_hashes(base[4])
        base_len = len(base_hashes)
        stored = base_hashes + stored
    # A chunk that is missing (deleted under a concurrent prune) makes the blob unreadable rather than wrong.
    mine = chunks.get(row[1], {})
    try:
        found = [mine[h] for h in stored]
    except KeyError:
        raise NotFound(f"chunks of channel {row[5]!r} at version {row[8]!r} are missing") from None
    pieces, hashes = zip(*found, strict=True) if found else ((), ())
    return SnapshotBlob(
        channel=row[5], version=row[8], type=row[6], chunks=pieces, hashes=hashes, base=row[9], base_len=base_len,
    )


def _write(ctx: Ctx, row: Row) -> SnapshotWrite:
    task_id, idx = row[8], row[11]
    data = _open(ctx, bytes(row[7]), write_ad(ctx.tenant, row[1], row[2], row[3], task_id, idx, row[5], row[6]))
    return SnapshotWrite(task_id=task_id, idx=idx, channel=row[5], type=row[6], data=data, task_path=row[4] or "")


def _write_key(w: SnapshotWrite) -> tuple[str, str, int]:
    return (w.task_path, w.task_id, w.idx)


def contains(value: Any, pattern: Any) -> bool:
    """Postgres's ``jsonb @>`` on decoded values: objects by key, arrays by element, scalars by equality."""
    if isinstance(pattern, dict):
        return isinstance(value, dict) and all(k in value and contains(value[k], v) for k, v in pattern.items())
    if isinstance(pattern, list):
        if not isinstance(value, list):
            return False
        return all(any(contains(v, p) for v in value) for p in pattern)
    if isinstance(value, bool) or isinstance(pattern, bool):
        return type(value) is type(pattern) and value == pattern
    return bool(value == pattern) and not isinstance(value, dict | list)


def read(
    ctx: Ctx,
    *,
    conversation_id: str | None,
    namespace: str | None,
    snapshot_id: str | None,
    before: str | None,
    filter: Mapping[str, Any] | None,
    limit: int | None,
) -> Op[list[Snapshot]]:
    """Snapshots newest first, with their blobs and writes, in one statement (two when the metadata is
    encrypted and filtered: the metadata is matched here, after decrypting, then the matches are read)."""
    if conversation_id is not None:
        check_id(conversation_id, "conversation_id", ctx.limits)
    if namespace is not None:
        check_text(namespace, "namespace", ctx.limits)
    if limit is not None and limit < 0:
        raise InvalidInput("limit must not be negative", path="limit")
    # An empty filter matches everything (and must: encrypted metadata is a JSON string, not an object).
    pattern = encode(dict(filter), ctx.limits, path="filter") if filter else None
    picked: set[tuple[str, str, str]] | None = None
    if ctx.cipher is not None and filter:
        metas = yield from many(
            "snapshot_metadata_list", conversation_id=conversation_id, namespace=namespace,
            snapshot_id=snapshot_id, before=before,
        )
        want = dict(filter)
        picked = set()
        for conv, ns, sid, text in metas:
            if limit is not None and len(picked) >= limit:
                break
            if contains(unseal(ctx.cipher, text, meta_ad(ctx.tenant, conv, ns, sid)), want):
                picked.add((conv, ns, sid))
        if not picked:
            return []
        pattern = limit = None
    params = {
        "conversation_id": conversation_id,
        "namespace": namespace,
        "snapshot_id": snapshot_id,
        "snapshot_ids": None if picked is None else sorted({p[2] for p in picked}),
        "before": before,
        "filter": pattern,
        "limit": limit,
    }
    keys = _KEYS[conversation_id is not None, namespace is not None, snapshot_id is not None]
    (rows,) = yield Tx((Stmt("snapshot_read", params, "all", binary=True, subs=keys),))
    kinds, chunks = _rows_by_kind(ctx, rows)
    blob_rows = _blob_rows(kinds["b"])
    blobs: dict[BlobKey, SnapshotBlob] = {}
    writes: dict[tuple[str, str, str], list[SnapshotWrite]] = {}
    for r in kinds["w"]:
        writes.setdefault((r[1], r[2], r[3]), []).append(_write(ctx, r))
    out: list[Snapshot] = []
    for r in sorted(kinds["s"], key=lambda r: r[3], reverse=True):
        conv, ns, sid = r[1], r[2], r[3]
        if picked is not None and (conv, ns, sid) not in picked:
            continue  # a copy of a picked snapshot in another conversation
        versions = decode_text(r[9])
        found = {}
        for ch, v in versions.items():
            key = (conv, ns, ch, str(v))
            blob = blobs.get(key)
            if blob is None and key in blob_rows:
                blob = blobs[key] = _blob(blob_rows[key], blob_rows, chunks)
            if blob is not None:
                found[ch] = blob
        out.append(
            Snapshot(
                conversation_id=conv,
                namespace=ns,
                snapshot_id=sid,
                parent_id=r[4],
                type=r[6],
                data=_open(ctx, bytes(r[7]), data_ad(ctx.tenant, conv, ns, sid)),
                metadata=unseal(ctx.cipher, r[8], meta_ad(ctx.tenant, conv, ns, sid)),
                channel_versions=versions,
                blobs=found,
                writes=tuple(sorted(writes.get((conv, ns, sid), ()), key=_write_key)),
                is_head=bool(r[12]),
            )
        )
    return out


def head(ctx: Ctx, conversation_id: str, *, namespace: str) -> Op[SnapshotHead | None]:
    """The newest snapshot's id and stamp, with its pending writes, without its contents: one small
    statement, for a caller that holds the contents of the snapshot it stored last (a stamp that still
    matches means the head is that very version)."""
    _ids(ctx, conversation_id, namespace)
    rows = yield from many("snapshot_head_writes", binary=True, conversation_id=conversation_id, namespace=namespace)
    found = [r for r in rows if r[0] == "h"]
    if not found:
        return None
    writes = sorted((_write(ctx, r) for r in rows if r[0] == "w"), key=_write_key)
    return SnapshotHead(snapshot_id=found[0][3], stamp=found[0][8], writes=tuple(writes))


def chain(
    ctx: Ctx,
    conversation_id: str,
    snapshot_id: str,
    channels: Sequence[str],
    *,
    namespace: str,
    payload: bool = True,
) -> Op[tuple[list[str], dict[str, ChannelHistory]]]:
    """The ancestors of a snapshot walked until every channel has a seed, nearest first, and per channel
    its seed and the writes after it (oldest first). One statement however long the chain is."""
    _ids(ctx, conversation_id, namespace)
    check_id(snapshot_id, "snapshot_id", ctx.limits)
    names = [check_text(c, "channels", ctx.limits, allow_empty=False) for c in channels]
    if not names:
        return [], {}
    rows = yield from many(
        "snapshot_chain",
        binary=True,
        conversation_id=conversation_id,
        namespace=namespace,
        snapshot_id=snapshot_id,
        channels=names,
        payload=payload,
    )
    kinds, chunks = _rows_by_kind(ctx, rows)
    ancestors = sorted(kinds["a"], key=lambda r: r[11])
    depth = {r[3]: r[11] for r in ancestors}
    blob_rows = _blob_rows(kinds["b"])
    seeds = {r[5]: _blob(r, blob_rows, chunks) for r in kinds["b"] if r[12]}
    per_channel: dict[str, list[tuple[int, SnapshotWrite]]] = {c: [] for c in names}
    for r in kinds["w"]:
        if r[5] in per_channel:
            per_channel[r[5]].append((depth[r[3]], _write(ctx, r)))
    history = {
        c: ChannelHistory(
            # Oldest ancestor first; within a snapshot in the order its tasks were applied.
            writes=tuple(w for _, w in sorted(per_channel[c], key=lambda dw: (-dw[0], _write_key(dw[1])))),
            seed=seeds.get(c),
        )
        for c in names
    }
    return [r[3] for r in ancestors], history
