"""Conversations: create, read, list, update, delete."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .. import arguments
from ..codec import check_id, check_text
from ..errors import AlreadyExists, InvalidInput, NotFound, VersionConflict
from ..models import CONVERSATION_STATUSES, Conversation, StateRef
from ..sealing import ad, seal_doc, unseal_doc
from . import state
from .base import Ctx, Op, Row, Stmt, Tx, many, one


def conversation_from_row(ctx: Ctx, row: Row) -> Conversation:
    return Conversation(
        tenant_id=row[0],
        id=row[1],
        app=row[2],
        framework=row[3],
        user_id=row[4],
        channel=row[5],
        status=row[6],
        metadata=unseal_doc(ctx.cipher, row[7], ad(ctx.tenant, "metadata", row[1])),
        version=row[8],
        last_seq=row[9],
        created_at=row[10],
        updated_at=row[11],
    )


def check_status(status: str | None) -> str | None:
    if status is not None and status not in CONVERSATION_STATUSES:
        raise InvalidInput(f"unknown conversation status {status!r}; use one of {CONVERSATION_STATUSES}", path="status")
    return status


def create_params(
    ctx: Ctx,
    conversation_id: str,
    *,
    app: str,
    framework: str,
    user_id: str,
    channel: str,
    status: str,
    metadata: Mapping[str, Any] | None,
) -> dict[str, Any]:
    lim = ctx.limits
    return {
        "id": check_id(conversation_id, "conversation_id", lim),
        "app": check_text(app, "app", lim),
        "framework": check_text(framework, "framework", lim),
        "user_id": check_text(user_id, "user_id", lim),
        "channel": check_text(channel, "channel", lim),
        "status": check_status(status),
        "metadata": seal_doc(
            ctx.cipher, metadata or {}, lim, ad(ctx.tenant, "metadata", conversation_id), path="metadata"
        ),
    }


def create(
    ctx: Ctx,
    conversation_id: str,
    *,
    ensure: bool,
    state_patches: Sequence[tuple[StateRef, Mapping[str, Any]]] = (),
    **fields: Any,
) -> Op[Conversation]:
    params = create_params(ctx, conversation_id, **fields)
    if state_patches:
        return (yield from _create_with_state(ctx, conversation_id, params, state_patches))
    for _ in range(3):
        row = yield from one("conversation_create", **params)
        if row:
            return conversation_from_row(ctx, row)
        if not ensure:
            raise AlreadyExists(f"conversation {conversation_id!r} already exists")
        row = yield from one("conversation_get", id=conversation_id)
        if row:
            return conversation_from_row(ctx, row)
        # Deleted between the two statements: try the insert again.
    raise NotFound(f"conversation {conversation_id!r} could not be created or read")


def _create_with_state(
    ctx: Ctx,
    conversation_id: str,
    params: dict[str, Any],
    state_patches: Sequence[tuple[StateRef, Mapping[str, Any]]],
) -> Op[Conversation]:
    """Create the conversation and merge ``state_patches`` in one transaction: a patch that fails (a
    schema, a lost connection) leaves no conversation behind, and a taken id writes no state."""
    writes: list[Stmt] = []
    for i, (ref, data) in enumerate(state_patches):
        if isinstance(ref, StateRef) and ref.scope == "conversation" and ref.subject != conversation_id:
            raise InvalidInput(
                "a conversation state patch must address the created conversation", path=f"state_patches[{i}]"
            )
        if not isinstance(data, Mapping):
            raise InvalidInput("a state patch must be a mapping", path=f"state_patches[{i}]")
        writes.append(state.write_stmt(ctx, ref, data, (), replace=False, expected_version=None))
    (row,) = yield Tx((Stmt("conversation_create", params, "one"),), hold=True)
    if row is None:
        yield Tx(())  # ends the transaction: nothing written
        raise AlreadyExists(f"conversation {conversation_id!r} already exists")
    # The state writes move the conversation's version: the row is read again after them.
    *done, row = yield Tx((*writes, Stmt("conversation_get", {"id": conversation_id}, "one")), hold=True)
    for i, written in enumerate(done):
        if written is None:  # an existing user/app document would grow past the limit: roll back
            raise state.merge_too_large(ctx.limits.max_payload_bytes, path=f"state_patches[{i}]")
    yield Tx(())  # commits
    return conversation_from_row(ctx, row)


def get(ctx: Ctx, conversation_id: str) -> Op[Conversation | None]:
    row = yield from one("conversation_get", id=check_id(conversation_id, "conversation_id", ctx.limits))
    return conversation_from_row(ctx, row) if row else None


def list_(
    ctx: Ctx,
    *,
    app: str | None,
    framework: str | None,
    user_id: str | None,
    status: str | None,
    updated_before: datetime | None,
    limit: int,
    offset: int,
) -> Op[list[Conversation]]:
    lim = ctx.limits
    rows = yield from many(
        "conversation_list",
        replica=True,
        app=None if app is None else check_text(app, "app", lim),
        framework=None if framework is None else check_text(framework, "framework", lim),
        user_id=None if user_id is None else check_text(user_id, "user_id", lim),
        status=check_status(status),
        updated_before=arguments.timestamp(updated_before, "updated_before"),
        limit=arguments.integer(limit, "limit"),
        offset=arguments.integer(offset, "offset"),
    )
    return [conversation_from_row(ctx, r) for r in rows]


def update(
    ctx: Ctx,
    conversation_id: str,
    *,
    status: str | None,
    metadata: Mapping[str, Any] | None,
    expected_version: int | None,
) -> Op[Conversation]:
    check_id(conversation_id, "conversation_id", ctx.limits)
    arguments.optional_integer(expected_version, "expected_version")
    row = yield from one(
        "conversation_update",
        id=conversation_id,
        status=check_status(status),
        metadata=None
        if metadata is None
        else seal_doc(ctx.cipher, metadata, ctx.limits, ad(ctx.tenant, "metadata", conversation_id), path="metadata"),
        expected_version=expected_version,
    )
    if row:
        return conversation_from_row(ctx, row)
    yield from raise_missing_or_conflict(conversation_id, expected_version)
    raise AssertionError("unreachable")


def raise_missing_or_conflict(conversation_id: str, expected_version: int | None) -> Op[None]:
    """After a version-checked write touched nothing: say whether the row is missing or moved on."""
    head = yield from one("conversation_version", id=conversation_id)
    if head is None:
        raise NotFound(f"conversation {conversation_id!r} does not exist")
    raise VersionConflict(expected_version, head[0], what=f"conversation {conversation_id!r} version")


def delete(ctx: Ctx, conversation_id: str) -> Op[bool]:
    row = yield from one("conversation_delete", id=check_id(conversation_id, "conversation_id", ctx.limits))
    return bool(row and row[0])
