"""Export and erase of everything stored about one user (``pgagentstate export`` / ``erase``: GDPR)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ...codec import check_id, decode_text
from ...crypto import AD
from ...models import StateRef
from ...sealing import ad, unseal, unseal_doc
from .. import inbox as inbox_ops
from .. import state as state_ops
from ..base import Ctx, Op, Stmt, Tx
from ..conversations import conversation_from_row
from ..events import event_ad, event_from_row
from ..ledger import entry_from_row, open_error
from ..memory_rows import memory_ad
from ..workflow import step_from_row
from .jsonable import to_jsonable


def export_user(ctx: Ctx, user_id: str) -> Op[dict[str, Any]]:
    """Everything stored about one user as one JSON-ready document, read from one snapshot: their
    conversations (``user_id``) with events, state versions, workflow steps, scratchpad, ledger entries and
    checkpoints (bytes as base64), their user-scope state documents, memories with their ``user_id``, and
    their archived conversations."""
    check_id(user_id, "user_id", ctx.limits)
    params = {"user_id": user_id}
    names = (
        "ops_user_conversations",
        "ops_user_events",
        "ops_user_state_versions",
        "ops_user_steps",
        "ops_user_scratch",
        "ops_user_ledger",
        "ops_user_memories",
        "ops_user_snapshots",
        "ops_user_snapshot_blobs",
        "ops_user_snapshot_chunks",
        "ops_user_snapshot_writes",
        "ops_user_archived",
        "ops_user_inbox",
    )
    convs, events, versions, steps, scratch, ledger, memories, snaps, blobs, chunks, writes, archived, inbox = yield Tx(
        tuple(Stmt(n, params, "all") for n in names), snapshot=True
    )
    by_id: dict[str, dict[str, Any]] = {}
    for row in convs:
        c = conversation_from_row(ctx, row)
        by_id[c.id] = {
            **to_jsonable(c),
            "events": [],
            "state_versions": [],
            "steps": [],
            "scratchpad": [],
            "ledger": [],
            "snapshots": [],
            "snapshot_blobs": [],
            "snapshot_chunks": [],
            "snapshot_writes": [],
            "inbox": [],
        }
    for row in inbox:
        message = inbox_ops.message_from_row(ctx, row)
        by_id[message.conversation_id]["inbox"].append(to_jsonable(message))
    for row in events:
        ev = event_from_row(ctx, row)
        by_id[ev.conversation_id]["events"].append(to_jsonable(ev))
    user_states: list[dict[str, Any]] = []
    for scope, app, subject, name, version, data, changed_at in versions:
        where = state_ops.doc_ad(ctx, StateRef(scope, app, subject, name))
        item = {
            "name": name,
            "version": version,
            "data": unseal_doc(ctx.cipher, data, where),
            "changed_at": changed_at.isoformat(),
        }
        if scope == "conversation":
            by_id[subject]["state_versions"].append(item)
        else:
            user_states.append({"app": app, **item})
    for row in steps:
        step = step_from_row(ctx, row)
        by_id[step.conversation_id]["steps"].append(to_jsonable(step))
    for cid, key, value, expires_at, updated_at in scratch:
        by_id[cid]["scratchpad"].append(
            {
                "key": key,
                "value": unseal(ctx.cipher, value, ad(ctx.tenant, "scratch", cid, key)),
                "expires_at": to_jsonable(expires_at),
                "updated_at": updated_at.isoformat(),
            }
        )
    archived_ledger: list[dict[str, Any]] = []
    for row in ledger:
        entry = entry_from_row(ctx, row[:14])
        item = to_jsonable(entry)
        where = ad(ctx.tenant, "ledger", entry.key, "request")
        item["request"] = None if row[14] is None else unseal(ctx.cipher, row[14], where)
        owner = by_id.get(entry.conversation_id or "")
        # Entries of archived conversations: the archive holds their results, this also their requests.
        (owner["ledger"] if owner is not None else archived_ledger).append(item)
    for cid, ns, sid, parent, run_id, type_, data, metadata, versions_, created_at, forked in snaps:
        by_id[cid]["snapshots"].append(
            {
                "namespace": ns,
                "snapshot_id": sid,
                "parent_id": parent,
                "run_id": run_id,
                "type": type_,
                "data_base64": data,
                "metadata": decode_text(metadata),
                "channel_versions": decode_text(versions_),
                "created_at": created_at.isoformat(),
                "forked": forked,
            }
        )
    for cid, ns, channel, version, type_, chunk_list, base in blobs:
        # ``base``: the version whose chunk list this blob extends (None: ``chunks`` is the full list).
        by_id[cid]["snapshot_blobs"].append(
            {
                "namespace": ns,
                "channel": channel,
                "version": version,
                "type": type_,
                "chunks": list(chunk_list),
                "base": base,
            }
        )
    for cid, hash_, data in chunks:
        by_id[cid]["snapshot_chunks"].append({"hash": hash_, "data_base64": data})
    for cid, ns, sid, task_id, idx, channel, type_, data, task_path in writes:
        by_id[cid]["snapshot_writes"].append(
            {
                "namespace": ns,
                "snapshot_id": sid,
                "task_id": task_id,
                "idx": idx,
                "channel": channel,
                "type": type_,
                "data_base64": data,
                "task_path": task_path,
            }
        )
    return {
        "format": "pgagentstate.export.v1",
        "tenant": ctx.tenant,
        "user_id": user_id,
        "exported_at": datetime.now(UTC).isoformat(),
        "conversations": list(by_id.values()),
        "user_state_versions": user_states,
        "memories": [
            {
                "namespace": list(ns),
                "key": key,
                "value": unseal(ctx.cipher, value, memory_ad(ctx, ns, key)),
                "user_id": uid,
                "version": version,
                "created_at": created.isoformat(),
                "updated_at": updated.isoformat(),
                "expires_at": to_jsonable(expires),
            }
            for ns, key, value, uid, version, created, updated, expires in memories
        ],
        "archived_conversations": [
            {"id": cid, "archived_at": at.isoformat(), "document": read_archive(ctx, json.loads(doc))}
            for cid, at, doc in archived
        ],
        "archived_ledger": archived_ledger,
    }


def read_archive(ctx: Ctx, document: Any) -> Any:
    """An archived conversation (``archived_conversations.document``) with its payloads, state data,
    results and metadata turned back into the values the application wrote (the archive keeps them as
    stored: escaped, or encrypted when the store encrypts)."""
    if not isinstance(document, dict):
        return document
    out = dict(document)
    found = out.get("conversation")
    conv: dict[str, Any] = found if isinstance(found, dict) else {}
    cid = str(conv.get("id", ""))

    def value(stored: Any, where: AD) -> Any:
        return None if stored is None else unseal(ctx.cipher, json.dumps(stored, ensure_ascii=False), where)

    def each(section: str, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        items = out.get(section)
        if isinstance(items, list):
            out[section] = [fn(item) if isinstance(item, dict) else item for item in items]

    each(
        "events",
        lambda e: {
            **e, "payload": value(e.get("payload"), event_ad(ctx.tenant, cid, e["event_id"], e["kind"], e["author"]))
        },
    )
    each(
        "state_versions",
        lambda v: {
            **v,
            "data": unseal_doc(
                ctx.cipher,
                json.dumps(v.get("data") or {}, ensure_ascii=False),
                state_ops.doc_ad(ctx, StateRef.conversation(cid, v["name"])),
            ),
        },
    )
    each(
        "steps",
        lambda s: {**s, "result": value(s.get("result"), ad(ctx.tenant, "step", cid, s["workflow"], s["step"]))},
    )
    each(
        "ledger",
        lambda k: {
            **k,
            "result": value(k.get("result"), ad(ctx.tenant, "ledger", k["key"], "result")),
            "error": open_error(ctx, k["key"], k.get("error")),
        },
    )
    if conv:
        meta = unseal_doc(
            ctx.cipher, json.dumps(conv.get("metadata") or {}, ensure_ascii=False), ad(ctx.tenant, "metadata", cid)
        )
        out["conversation"] = {**conv, "metadata": meta}
    return out


_ERASE_KEYS = ("conversations", "events", "state_versions", "memories", "ledger_entries", "archived_conversations")


def erase_user(ctx: Ctx, user_id: str, *, dry_run: bool = False) -> Op[dict[str, int]]:
    """Delete everything :func:`export_user` would export, in one transaction; returns what went (with
    ``dry_run``, what would go). The user's conversations are locked first, so a turn in flight either
    commits before the erase or fails after it (NotFound); none can write into an erased conversation."""
    check_id(user_id, "user_id", ctx.limits)
    params = {"user_id": user_id}
    if dry_run:
        (row,) = yield Tx((Stmt("ops_erase_counts", params, "one"),), snapshot=True)
        return dict(zip(_ERASE_KEYS, row, strict=True))
    locked, counts = yield Tx(
        (Stmt("ops_erase_lock", params, "all"), Stmt("ops_erase_counts", params, "one")), hold=True
    )
    ids = {"conversation_ids": [r[0] for r in locked]}
    yield Tx(
        (
            Stmt("ops_erase_ledger", {**params, **ids}, "none"),
            Stmt("ops_erase_conversation_states", {**params, **ids}, "none"),
            Stmt("ops_erase_user_states", params, "none"),
            Stmt("ops_erase_memories", params, "none"),
            Stmt("ops_erase_archived", params, "none"),
            Stmt("ops_erase_tombstones", {**params, **ids}, "none"),
            Stmt("ops_erase_conversations", {**params, **ids}, "none"),
        )
    )
    return dict(zip(_ERASE_KEYS, counts, strict=True))
