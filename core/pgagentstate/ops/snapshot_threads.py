"""Whole threads of snapshots: delete one (with a tombstone, so late writes of a run in flight do not bring
it back), delete by run, copy to another conversation, prune old snapshots. The snapshots themselves:
:mod:`pgagentstate.ops.snapshots`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..codec import check_id, check_text
from ..errors import InvalidInput, NotFound
from ..sealing import seal, unseal
from .base import Ctx, Op, Row, Stmt, Tx, many
from .snapshot_reads import chain
from .snapshots import _open, _seal, chunk_ad, chunk_hash, data_ad, meta_ad, split_hashes, stored_chunk_id, write_ad


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
    return (
        Stmt("snapshot_gc_hash_joins", {}, "none"),
        Stmt("snapshot_blobs_gc", ids, "none"),
        Stmt("snapshot_chunks_gc", ids, "none"),
    )


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
        chunk_lists = ["".join(ids[h] for h in split_hashes(b[4])) for b in blobs]
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
