"""Snapshots: chains of opaque framework checkpoints (LangGraph's) with pending writes.

A snapshot is an opaque ``(type, data)`` pair plus JSON ``metadata`` (filterable) and ``channel_versions``
(``{channel: version}``). The larger channel values travel as blobs: an ordered list of chunks, each stored
once per conversation under the hash of its bytes. A caller that splits a growing list into one chunk per
element makes every version share the chunks of the previous one, so a 50-turn message history costs its
messages once, not 50 times over. A blob may also name a ``base``: another version of its channel whose list
it extends, so that the list of hashes is not stored again either — only what was appended.

Chains do not fork silently: a snapshot that is not marked ``forked`` must be the only non-forked child of
its parent (and a parentless one the only non-forked root of its namespace), else
:class:`~pgagentstate.errors.VersionConflict` — two writers that loaded the same head cannot both win.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..codec import check_id, check_text, decode_text, encode
from ..crypto import AD, BYTES_MARKER, is_sealed_bytes
from ..errors import AlreadyExists, IntegrityError, InvalidInput, NotFound, PayloadTooLarge, VersionConflict
from ..sealing import ad, seal, unseal
from .base import Ctx, Op, Row, Stmt, Tx, json_b64, json_rows, json_str, many, one


@dataclass(frozen=True, slots=True)
class SnapshotBlob:
    """A channel value at a version: ``chunks`` concatenated or interpreted by the caller (per ``type``).

    Blobs returned by a read share their ``chunks`` objects: equal chunks are the same ``bytes`` object,
    so a caller may memoise decoding by ``id()`` for the duration of one call.
    """

    channel: str
    version: str
    type: str
    #: to store: bytes, or the hash (:func:`chunk_hash`) of a chunk known to be stored in the conversation
    chunks: tuple[bytes | str, ...]
    #: on reads: the hash of each chunk
    hashes: tuple[str, ...] = ()
    #: the version of the same channel (conversation and namespace) whose chunks come first. To store:
    #: ``chunks`` holds only the ones appended to it, and the store refuses the put (NotFound) unless that
    #: version is stored whole (without a base of its own). On reads: ``chunks`` is the whole list, of which
    #: the first ``base_len`` come from the base.
    base: str | None = None
    base_len: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotWrite:
    """A pending write of a task, stored against the snapshot it will be applied to."""

    task_id: str
    idx: int
    channel: str
    type: str
    data: bytes
    task_path: str = ""


@dataclass(frozen=True, slots=True)
class Snapshot:
    conversation_id: str
    namespace: str
    snapshot_id: str
    parent_id: str | None
    type: str
    data: bytes
    metadata: dict[str, Any]
    channel_versions: dict[str, Any]
    #: the blobs found for ``channel_versions``, by channel
    blobs: dict[str, SnapshotBlob] = field(default_factory=dict)
    #: ordered by (task_path, task_id, idx)
    writes: tuple[SnapshotWrite, ...] = ()
    #: no newer snapshot exists in its namespace (as of the read)
    is_head: bool = False


@dataclass(frozen=True, slots=True)
class ChannelHistory:
    """What one channel needs to be rebuilt at a snapshot: its nearest stored value among the ancestors
    (``seed``, None when the walk reached the root) and the writes after it, oldest first."""

    writes: tuple[SnapshotWrite, ...]
    seed: SnapshotBlob | None


PruneStrategy = Literal["keep_latest", "delete"]


def chunk_hash(data: bytes) -> str:
    """Content address of a chunk: 96 bits of BLAKE2b, base64 (16 characters). Addresses are per
    conversation, so a collision needs ~2^48 chunks in one conversation."""
    return base64.urlsafe_b64encode(hashlib.blake2b(data, digest_size=12).digest()).decode()


# --- encryption at rest ----------------------------------------------------------------------------
# With a cipher (the store's ``encryption=``), the checkpoint body, the metadata, every chunk and every
# pending write are sealed with AES-256-GCM, each bound to its place by the associated data below, so a
# ciphertext moved to another row fails with IntegrityError. Chunks are stored under a keyed id,
# HMAC(tenant, conversation, content hash), instead of the content hash the caller deals in: equal
# contents share a row within a conversation (that equality, and the sizes, stay visible) but cannot be
# matched across conversations or against guessed contents. Callers only ever see content hashes
# (:func:`chunk_hash`); the ids are mapped both ways here.


def data_ad(tenant: str, conv: str, ns: str, sid: str) -> AD:
    """Associated data of a snapshot's body (key rotation uses these four too)."""
    return ad(tenant, "snapshot", conv, ns, sid)


def meta_ad(tenant: str, conv: str, ns: str, sid: str) -> AD:
    return ad(tenant, "snapshot_metadata", conv, ns, sid)


def chunk_ad(tenant: str, conv: str, stored_id: str) -> AD:
    return ad(tenant, "snapshot_chunk", conv, stored_id)


def write_ad(tenant: str, conv: str, ns: str, sid: str, task_id: str, idx: int, channel: str, type_: str) -> AD:
    """A pending write's place; its ciphertext also vouches for its channel and type."""
    return ad(tenant, "snapshot_write", conv, ns, sid, task_id, str(idx), extra=(channel, type_))


def _seal(ctx: Ctx, data: bytes, where: AD) -> bytes:
    return data if ctx.cipher is None else ctx.cipher.seal_bytes(data, where)


def _open(ctx: Ctx, data: bytes, where: AD) -> bytes:
    if is_sealed_bytes(data):
        if ctx.cipher is None:
            raise IntegrityError("a stored value is encrypted; configure the store's encryption keys to read it")
        return ctx.cipher.open_bytes(data, where)
    if ctx.cipher is not None and ctx.cipher.required:
        raise IntegrityError("a stored value is not encrypted although this store requires encryption")
    return data


def stored_chunk_id(ctx: Ctx, conversation_id: str, content_hash: str) -> str:
    """The id a chunk with this :func:`chunk_hash` is stored under in a conversation: the hash itself
    without encryption, else a keyed HMAC of it (see above)."""
    if ctx.cipher is None:
        return content_hash
    digest = ctx.cipher.keyed_digest(
        "pgagentstate snapshot chunk id", f"{ctx.tenant}\x1f{conversation_id}\x1f{content_hash}".encode()
    )
    return base64.urlsafe_b64encode(digest[:12]).decode()


def _check_bytes(ctx: Ctx, value: object, path: str) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidInput(f"{path} must be bytes, not {type(value).__name__}", path=path)
    data = bytes(value)
    if len(data) > ctx.limits.max_payload_bytes:
        raise PayloadTooLarge(len(data), ctx.limits.max_payload_bytes, path=path)
    return data


def _ids(ctx: Ctx, conversation_id: str, namespace: str) -> None:
    check_id(conversation_id, "conversation_id", ctx.limits)
    check_text(namespace, "namespace", ctx.limits)


def put(
    ctx: Ctx,
    conversation_id: str,
    snapshot_id: str,
    *,
    namespace: str,
    parent_id: str | None,
    type: str,
    data: bytes,
    metadata: Mapping[str, Any],
    channel_versions: Mapping[str, Any],
    blobs: Sequence[SnapshotBlob],
    run_id: str | None,
    forked: bool | None,
    framework: str,
    user_id: str | None = None,
) -> Op[None]:
    lim = ctx.limits
    _ids(ctx, conversation_id, namespace)
    check_id(snapshot_id, "snapshot_id", lim)
    if user_id is not None:
        check_id(user_id, "user_id", lim)
    if parent_id is not None:
        check_id(parent_id, "parent_id", lim)
    if run_id is not None:
        check_text(run_id, "run_id", lim)
    chunks: dict[str, bytes] = {}  # stored id -> plaintext
    known: set[str] = set()
    sid_of: dict[str, str] = {}
    channels: list[str] = []
    versions: list[str] = []
    types: list[str] = []
    lists: list[str] = []
    bases: list[str | None] = []
    for i, blob in enumerate(blobs):
        hashes = []
        for j, piece in enumerate(blob.chunks):
            if isinstance(piece, str):
                h = sid_of.get(piece) or sid_of.setdefault(piece, stored_chunk_id(ctx, conversation_id, piece))
                known.add(h)
                hashes.append(h)
                continue
            piece = _check_bytes(ctx, piece, f"blobs[{i}].chunks[{j}]")
            h = stored_chunk_id(ctx, conversation_id, chunk_hash(piece))
            chunks.setdefault(h, piece)
            hashes.append(h)
        channels.append(check_text(blob.channel, f"blobs[{i}].channel", lim, allow_empty=False))
        versions.append(check_text(str(blob.version), f"blobs[{i}].version", lim, allow_empty=False))
        types.append(check_text(blob.type, f"blobs[{i}].type", lim))
        lists.append(" ".join(hashes))
        if blob.base is not None:
            check_text(blob.base, f"blobs[{i}].base", lim, allow_empty=False)
            if blob.base == versions[-1]:
                raise InvalidInput(f"blobs[{i}].base must be another version", path=f"blobs[{i}].base")
        bases.append(blob.base)
    place = (conversation_id, namespace, snapshot_id)
    params = {
        "conversation_id": conversation_id,
        "namespace": namespace,
        "snapshot_id": snapshot_id,
        "parent_id": parent_id,
        "run_id": run_id,
        "type": check_text(type, "type", lim),
        "data": _seal(ctx, _check_bytes(ctx, data, "data"), data_ad(ctx.tenant, *place)),
        "metadata": seal(ctx.cipher, dict(metadata), lim, meta_ad(ctx.tenant, *place), path="metadata"),
        "channel_versions": encode(dict(channel_versions), lim, path="channel_versions"),
        "forked": forked,
        "chunks": json_rows(
            (json_str(h), json_b64(_seal(ctx, c, chunk_ad(ctx.tenant, conversation_id, h))))
            for h, c in chunks.items()
        ),
        "known": sorted(known - chunks.keys()),
        "blobs": json_rows(
            (json_str(c), json_str(v), json_str(t), json_str(h), json_str(b))
            for c, v, t, h, b in zip(channels, versions, types, lists, bases, strict=True)
        ),
        "n_bases": sum(b is not None for b in bases),
    }
    stmts: tuple[Stmt, ...] = (Stmt("snapshot_put", params, "rowcount"),)
    # The conversation gets its user when a snapshot creates it: erase_user/export_user then cover the thread.
    conv = {
        "conversation_id": conversation_id, "framework": check_text(framework, "framework", lim),
        "user_id": user_id or "",
    }
    if parent_id is None:
        # A new chain: the only snapshot that may create its conversation (and undelete it).
        stmts = (
            Stmt("snapshot_conversation_ensure", {**conv, "revive": True}, "none"),
            Stmt("snapshot_tombstone_clear", conv, "none"),
            *stmts,
        )
    try:
        try:
            results = yield Tx(stmts)
        except NotFound:
            if parent_id is None:
                raise
            # The conversation does not exist: a first put that names a parent the thread never had
            # creates it, unless it was deleted (then this is a late write of a run still in flight, and
            # NotFound stands). Only on this path, so that a put costs one statement.
            ensure = Stmt("snapshot_conversation_ensure", {**conv, "revive": False}, "none")
            results = yield Tx((ensure, *stmts))
    except AlreadyExists:
        # snapshots_linear_child_idx: another writer continued this chain from the same parent first.
        head = yield from one("snapshot_head", conversation_id=conversation_id, namespace=namespace)
        raise VersionConflict(
            parent_id,
            head[0] if head else None,
            what=f"snapshot chain of {conversation_id!r} (namespace {namespace!r}): parent",
        ) from None
    if not results[-1]:
        raise NotFound(
            f"chunks passed by hash, or base versions of blobs, are not stored in conversation "
            f"{conversation_id!r}; send the whole blobs"
        )


def put_writes(
    ctx: Ctx,
    conversation_id: str,
    snapshot_id: str,
    *,
    namespace: str,
    writes: Sequence[SnapshotWrite],
    framework: str,
) -> Op[None]:
    lim = ctx.limits
    _ids(ctx, conversation_id, namespace)
    check_id(snapshot_id, "snapshot_id", lim)
    if not writes:
        return
    for i, w in enumerate(writes):
        if not isinstance(w, SnapshotWrite):
            raise InvalidInput(f"writes[{i}] must be a SnapshotWrite", path=f"writes[{i}]")
        check_id(w.task_id, f"writes[{i}].task_id", lim)
        check_text(w.channel, f"writes[{i}].channel", lim, allow_empty=False)
    # One row per (task, idx), as one statement cannot upsert a row twice: within a call as across calls,
    # a special write (negative idx, e.g. several interrupts of one task) replaces an earlier one and a
    # regular write does not.
    unique: dict[tuple[str, int], tuple[int, SnapshotWrite]] = {}
    for i, w in enumerate(writes):
        key = (w.task_id, int(w.idx))
        if key[1] < 0 or key not in unique:
            unique[key] = (i, w)
    params = {
        "conversation_id": conversation_id,
        "namespace": namespace,
        "snapshot_id": snapshot_id,
        "writes": json_rows(
            (json_str(w.task_id), str(int(w.idx)), json_str(w.channel), json_str(w.type),
             json_b64(_seal(ctx, _check_bytes(ctx, w.data, f"writes[{i}].data"),
                            write_ad(ctx.tenant, conversation_id, namespace, snapshot_id, w.task_id, int(w.idx),
                                     w.channel, w.type))),
             json_str(w.task_path))
            for i, w in unique.values()
        ),
    }
    (n,) = yield Tx((Stmt("snapshot_writes_put", params, "rowcount"),))
    if n:
        return
    # Nothing written: a retry of writes already stored, or the conversation does not exist yet (a run
    # saves writes in the background, so they can arrive before the first snapshot of a new thread) or
    # any more (deleted: then the ensure below does nothing and the writes are dropped).
    conv = {"conversation_id": conversation_id, "framework": check_text(framework, "framework", lim), "user_id": ""}
    try:
        yield Tx(
            (
                Stmt("snapshot_conversation_ensure", {**conv, "revive": False}, "none"),
                Stmt("snapshot_writes_put", params, "none"),
            )
        )
    except NotFound:
        return


_LENGTH = struct.Struct(">I")
#: (conversation, stored chunk id) -> (plaintext, content hash)
Chunks = dict[tuple[str, str], tuple[bytes, str]]


def _chunk(ctx: Ctx, chunks: Chunks, conv: str, stored_id: str, data: bytes) -> None:
    if ctx.cipher is None and not is_sealed_bytes(data):
        chunks[(conv, stored_id)] = (data, stored_id)
        return
    plain = _open(ctx, data, chunk_ad(ctx.tenant, conv, stored_id))
    chunks[(conv, stored_id)] = (plain, chunk_hash(plain))


def _rows_by_kind(ctx: Ctx, rows: Sequence[Row]) -> tuple[dict[str, list[Row]], Chunks]:
    kinds: dict[str, list[Row]] = {"s": [], "b": [], "w": [], "a": []}
    chunks: Chunks = {}
    for r in rows:
        if r[0] == "c":
            _chunk(ctx, chunks, r[1], r[5], bytes(r[7]))
        elif r[0] == "C":
            data, pos, conv = bytes(r[7]), 0, r[1]
            plain = ctx.cipher is None
            for h in r[8].split(" "):
                (n,) = _LENGTH.unpack_from(data, pos)
                piece = data[pos + 4 : pos + 4 + n]
                pos += 4 + n
                if plain and not piece.startswith(BYTES_MARKER):  # the common case, inline
                    chunks[(conv, h)] = (piece, h)
                else:
                    _chunk(ctx, chunks, conv, h, piece)
        else:
            kinds[r[0]].append(r)
    return kinds, chunks


BlobKey = tuple[str, str, str, str]


def _blob_rows(rows: Sequence[Row]) -> dict[BlobKey, Row]:
    return {(r[1], r[2], r[5], r[8]): r for r in rows}


def _blob(row: Row, rows: Mapping[BlobKey, Row], chunks: Chunks) -> SnapshotBlob:
    """The blob of a 'b' row with its whole list of chunks: its base's chunks (bases are whole), then its own."""
    stored: tuple[str, ...] = tuple(row[10])
    base_len = 0
    if row[9] is not None:
        base = rows.get((row[1], row[2], row[5], row[9]))
        if base is None:  # deleted under a concurrent prune
            raise NotFound(f"base {row[9]!r} of channel {row[5]!r} at version {row[8]!r} is missing")
        base_len = len(base[10])
        stored = tuple(base[10]) + stored
    # A chunk that is missing (deleted under a concurrent prune) makes the blob unreadable rather than wrong.
    found = [chunks[(row[1], h)] for h in stored if (row[1], h) in chunks]
    if len(found) != len(stored):
        raise NotFound(f"chunks of channel {row[5]!r} at version {row[8]!r} are missing")
    return SnapshotBlob(
        channel=row[5], version=row[8], type=row[6], chunks=tuple(c[0] for c in found),
        hashes=tuple(c[1] for c in found), base=row[9], base_len=base_len,
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
    rows = yield from many(
        "snapshot_read",
        binary=True,
        conversation_id=conversation_id,
        namespace=namespace,
        snapshot_id=snapshot_id,
        snapshot_ids=None if picked is None else sorted({p[2] for p in picked}),
        before=before,
        filter=pattern,
        limit=limit,
    )
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


def delete_conversation(ctx: Ctx, conversation_id: str) -> Op[bool]:
    """Delete the conversation with everything in it, and refuse late writes for it (a tombstone)."""
    check_id(conversation_id, "conversation_id", ctx.limits)
    (gone, _) = yield Tx(
        (
            Stmt("conversation_delete", {"id": conversation_id}, "one"),
            Stmt("snapshot_tombstone_put", {"conversation_id": conversation_id}, "none"),
        )
    )
    return bool(gone and gone[0])


def _gc(conversation_ids: Sequence[str]) -> tuple[Stmt, ...]:
    ids = {"conversation_ids": list(conversation_ids)}
    return (Stmt("snapshot_blobs_gc", ids, "none"), Stmt("snapshot_chunks_gc", ids, "none"))


def delete_runs(ctx: Ctx, run_ids: Sequence[str]) -> Op[None]:
    runs = [check_text(r, "run_ids", ctx.limits, allow_empty=False) for r in run_ids]
    if not runs:
        return
    (rows,) = yield Tx((Stmt("snapshot_delete_runs", {"run_ids": runs}, "all"),), hold=True)
    yield Tx(_gc([r[0] for r in rows]))


def copy(ctx: Ctx, source: str, target: str) -> Op[None]:
    check_id(source, "source", ctx.limits)
    check_id(target, "target", ctx.limits)
    if source == target:
        raise InvalidInput("cannot copy a conversation onto itself", path="target")
    p = {"source": source, "target": target}
    head = (
        Stmt("snapshot_copy_conversation", p, "none"),
        Stmt("snapshot_tombstone_clear", {"conversation_id": target}, "none"),
    )
    if ctx.cipher is None:
        yield Tx(
            (
                *head,
                Stmt("snapshot_copy_chunks", p, "none"),
                Stmt("snapshot_copy_blobs", p, "none"),
                Stmt("snapshot_copy_snapshots", p, "none"),
                Stmt("snapshot_copy_writes", p, "none"),
            )
        )
        return
    # Encrypted: every ciphertext is bound to its conversation and chunk ids are keyed by it, so the rows
    # are read, opened, sealed again for the target and inserted, in one transaction.
    cipher = ctx.cipher
    src = {"conversation_id": source}
    chunks, blobs, snaps, writes = yield Tx(
        (
            Stmt("snapshot_copy_read_chunks", src, binary=True),
            Stmt("snapshot_copy_read_blobs", src),
            Stmt("snapshot_copy_read_snapshots", src, binary=True),
            Stmt("snapshot_copy_read_writes", src, binary=True),
        ),
        hold=True,
    )
    ids: dict[str, str] = {}
    new_chunks: dict[str, bytes] = {}
    for stored_id, sealed in chunks:
        plain = _open(ctx, bytes(sealed), chunk_ad(ctx.tenant, source, stored_id))
        new_id = ids[stored_id] = stored_chunk_id(ctx, target, chunk_hash(plain))
        new_chunks[new_id] = cipher.seal_bytes(plain, chunk_ad(ctx.tenant, target, new_id))
    try:
        chunk_lists = [" ".join(ids[h] for h in b[4]) for b in blobs]
    except KeyError:
        raise NotFound(f"a chunk of conversation {source!r} is missing") from None

    def body(ns: str, sid: str, value: Any) -> bytes:
        plain = _open(ctx, bytes(value), data_ad(ctx.tenant, source, ns, sid))
        return _seal(ctx, plain, data_ad(ctx.tenant, target, ns, sid))

    def meta(ns: str, sid: str, text: str) -> str:
        value = unseal(cipher, text, meta_ad(ctx.tenant, source, ns, sid))
        return seal(cipher, value, ctx.limits, meta_ad(ctx.tenant, target, ns, sid), path="metadata")

    def write(w: Row) -> bytes:
        plain = _open(ctx, bytes(w[6]), write_ad(ctx.tenant, source, *w[:6]))
        return _seal(ctx, plain, write_ad(ctx.tenant, target, *w[:6]))

    yield Tx(
        (
            *head,
            Stmt("snapshot_copy_insert_chunks",
                 {"target": target, "hashes": list(new_chunks), "datas": list(new_chunks.values())}, "none"),
            Stmt("snapshot_copy_insert_blobs", {
                "target": target, "namespaces": [b[0] for b in blobs], "channels": [b[1] for b in blobs],
                "versions": [b[2] for b in blobs], "types": [b[3] for b in blobs], "chunk_lists": chunk_lists,
                "bases": [b[5] for b in blobs],
            }, "none"),
            Stmt("snapshot_copy_insert_snapshots", {
                "target": target, "namespaces": [r[0] for r in snaps], "snapshot_ids": [r[1] for r in snaps],
                "parent_ids": [r[2] for r in snaps], "run_ids": [r[3] for r in snaps],
                "types": [r[4] for r in snaps], "datas": [body(r[0], r[1], r[5]) for r in snaps],
                "metadatas": [meta(r[0], r[1], r[6]) for r in snaps], "channel_versions": [r[7] for r in snaps],
                "created": [r[8] for r in snaps], "forked": [r[9] for r in snaps],
            }, "none"),
            Stmt("snapshot_copy_insert_writes", {
                "target": target, "namespaces": [w[0] for w in writes], "snapshot_ids": [w[1] for w in writes],
                "task_ids": [w[2] for w in writes], "idxs": [w[3] for w in writes],
                "channels": [w[4] for w in writes], "types": [w[5] for w in writes],
                "datas": [write(w) for w in writes], "task_paths": [w[7] for w in writes],
            }, "none"),
        )
    )


def prune(ctx: Ctx, conversation_ids: Sequence[str], strategy: str) -> Op[None]:
    """``keep_latest``: each namespace keeps its head (and the ancestors its delta channels are rebuilt
    from, with their writes); ``delete``: every snapshot goes, the conversations stay."""
    ids = [check_id(c, "conversation_ids", ctx.limits) for c in conversation_ids]
    if strategy not in ("keep_latest", "delete"):
        raise InvalidInput(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'", path="strategy")
    if not ids:
        return
    if strategy == "delete":
        yield Tx((Stmt("snapshot_purge", {"conversation_ids": ids}, "none"),))
        return
    heads = yield from many("snapshot_prune_heads", conversation_ids=ids)
    keep: list[tuple[str, str, str]] = []
    for conv, ns, head, meta_text in heads:
        # Delta channels (LangGraph DeltaChannel) the head has not snapshotted: their values live in the
        # writes of ancestors, which keep_latest must keep. Read here: the metadata may be encrypted.
        meta = unseal(ctx.cipher, meta_text, meta_ad(ctx.tenant, conv, ns, head))
        counters = meta.get("counters_since_delta_snapshot") if isinstance(meta, dict) else None
        delta_channels = sorted(counters) if isinstance(counters, dict) else []
        if delta_channels:
            walked, _ = yield from chain(ctx, conv, head, delta_channels, namespace=ns, payload=False)
            keep += [(conv, ns, sid) for sid in walked]
    yield Tx(
        (
            Stmt(
                "snapshot_prune_keep",
                {
                    "head_conversations": [h[0] for h in heads],
                    "head_namespaces": [h[1] for h in heads],
                    "head_ids": [h[2] for h in heads],
                    "keep_conversations": [k[0] for k in keep],
                    "keep_namespaces": [k[1] for k in keep],
                    "keep_ids": [k[2] for k in keep],
                },
                "none",
            ),
            *_gc(ids),
        )
    )
