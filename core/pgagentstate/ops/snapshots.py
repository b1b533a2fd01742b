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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..codec import check_id, check_text, encode
from ..crypto import AD, is_sealed_bytes
from ..errors import AlreadyExists, IntegrityError, InvalidInput, NotFound, PayloadTooLarge, VersionConflict
from ..sealing import ad, seal
from .base import Ctx, Op, Stmt, Tx, json_b64, json_rows, json_str, one


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
class SnapshotHead:
    """The newest snapshot of a namespace, without its contents: its id, its ``stamp`` (the same string
    :func:`put` returned when it stored this version of the snapshot; storing the snapshot again changes
    it) and its pending writes."""

    snapshot_id: str
    stamp: str
    writes: tuple[SnapshotWrite, ...] = ()


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


#: Hashes of chunks hashed lately, by content. A message list is hashed again on every put that changes
#: it, and all but its newest elements were hashed before: a dict lookup (SipHash of the bytes) costs
#: ~0.2 us where BLAKE2b and base64 cost ~1.2 us, 120 of a 100-message list's 510 us on the put path.
#: Chunks over ``_MEMO_CHUNK`` bytes are not kept (they are rare and would pin memory); the dict is
#: emptied when full. Its operations are atomic, so threads share it without a lock.
_memo: dict[bytes, str] = {}
_MEMO_SIZE = 8192
_MEMO_CHUNK = 4096


def chunk_hashes(chunks: Sequence[bytes]) -> tuple[str, ...]:
    """:func:`chunk_hash` of each chunk, the new ones encoded in one base64 call (12-byte digests are 16
    characters each, so the encoding of their concatenation is the concatenation of their encodings)."""
    memo = _memo
    found = [memo.get(c) for c in chunks]
    todo = [c for c, h in zip(chunks, found, strict=True) if h is None]
    if not todo:
        return tuple(found)  # type: ignore[arg-type]
    digest = hashlib.blake2b
    joined = base64.urlsafe_b64encode(b"".join([digest(c, digest_size=12).digest() for c in todo])).decode()
    if len(memo) + len(todo) > _MEMO_SIZE:
        memo.clear()
    new = iter(range(0, len(joined), 16))
    out: list[str] = []
    for c, h in zip(chunks, found, strict=True):
        if h is None:
            i = next(new)
            h = joined[i : i + 16]
            if len(c) <= _MEMO_CHUNK:
                memo[c] = h
        out.append(h)
    return tuple(out)


_HASH = re.compile(".{16}", re.DOTALL)


def split_hashes(joined: str | None) -> tuple[str, ...]:
    """A list of chunk hashes as the statements return it (the stored 12-byte hashes, base64 in one go):
    16-character hashes, concatenated. (One regex pass: half the time of slicing in a loop, which was a
    quarter of a 400-message read's row processing.)"""
    return tuple(_HASH.findall(joined)) if joined else ()


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
) -> Op[str]:
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
    params: dict[str, Any] = {
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
    }
    if blobs:
        named = known - chunks.keys()  # stored chunks the blobs name by hash
        params |= {
            "chunks": json_rows(
                (json_str(h), json_b64(_seal(ctx, c, chunk_ad(ctx.tenant, conversation_id, h))))
                for h, c in chunks.items()
            ),
            "known": json_rows((json_str(h),) for h in named),
            "n_known": len(named),
            "blobs": json_rows(
                (json_str(c), json_str(v), json_str(t), json_str(h), json_str(b))
                for c, v, t, h, b in zip(channels, versions, types, lists, bases, strict=True)
            ),
            "n_bases": sum(b is not None for b in bases),
        }
        stmts: tuple[Stmt, ...] = (Stmt("snapshot_put", params, "one"),)
    else:  # nothing but the row: see snapshot_put_lean
        stmts = (Stmt("snapshot_put_lean", params, "one"),)
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
    return str(results[-1][0])


def put_writes(
    ctx: Ctx,
    conversation_id: str,
    snapshot_id: str,
    *,
    namespace: str,
    writes: Sequence[SnapshotWrite],
    framework: str,
) -> Op[bool]:
    lim = ctx.limits
    _ids(ctx, conversation_id, namespace)
    check_id(snapshot_id, "snapshot_id", lim)
    if not writes:
        return True
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
        return True
    # Nothing written: a retry of writes already stored, or the conversation does not exist yet (a run
    # saves writes in the background, so they can arrive before the first snapshot of a new thread) or
    # any more (deleted: then the ensure below does nothing and the writes are dropped: False).
    conv = {"conversation_id": conversation_id, "framework": check_text(framework, "framework", lim), "user_id": ""}
    try:
        # Checked before the insert: a snapshot committing in between may make the insert store the writes
        # after the check said the conversation was gone (then the caller stores them again, a no-op).
        _, exists, _ = yield Tx(
            (
                Stmt("snapshot_conversation_ensure", {**conv, "revive": False}, "none"),
                Stmt("snapshot_conversation_exists", {"conversation_id": conversation_id}, "one"),
                Stmt("snapshot_writes_put", params, "none"),
            )
        )
    except NotFound:
        return False
    return bool(exists[0])
