"""The append-only event log of a conversation."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from ..codec import check_id, check_text, decode_text, encode
from ..errors import AlreadyExists, InvalidInput, NotFound, VersionConflict
from ..models import Event, NewEvent
from .base import Ctx, Op, Row, Stmt, iso, many, one, tx


def event_from_row(row: Row) -> Event:
    return Event(
        conversation_id=row[0],
        seq=row[1],
        event_id=row[2],
        kind=row[3],
        author=row[4],
        payload=decode_text(row[5]),
        created_at=row[6],
    )


def append_stmt(
    ctx: Ctx, conversation_id: str, events: Sequence[NewEvent], expected_seq: int | None
) -> tuple[Stmt, list[str]]:
    """Validate ``events`` and build the append statement; also returns the event ids in order."""
    lim = ctx.limits
    check_id(conversation_id, "conversation_id", lim)
    ids: list[str] = []
    payloads: list[str] = []
    for i, ev in enumerate(events):
        if not isinstance(ev, NewEvent):
            raise InvalidInput(f"events[{i}] must be a NewEvent, not {type(ev).__name__}", path=f"events[{i}]")
        ids.append(check_id(ev.event_id, f"events[{i}].event_id", lim) if ev.event_id is not None else uuid.uuid4().hex)
        check_text(ev.kind, f"events[{i}].kind", lim, allow_empty=False)
        check_text(ev.author, f"events[{i}].author", lim)
        payloads.append(encode(ev.payload, lim, path=f"events[{i}].payload"))
    if len(set(ids)) != len(ids):
        raise InvalidInput("the same event_id appears twice in one batch", path="events")
    stmt = Stmt(
        "events_append",
        {
            "conversation_id": conversation_id,
            "event_ids": ids,
            "kinds": [e.kind for e in events],
            "authors": [e.author for e in events],
            "payloads": payloads,
            "created": [iso(e.created_at) for e in events],
            "expected_seq": expected_seq,
        },
    )
    return stmt, ids


def append(ctx: Ctx, conversation_id: str, events: Sequence[NewEvent], expected_seq: int | None) -> Op[list[Event]]:
    stmt, ids = append_stmt(ctx, conversation_id, events, expected_seq)
    if not ids:
        return []
    for _ in range(5):
        try:
            (rows,) = yield tx(stmt)
        except AlreadyExists:
            # A concurrent append of the same event id committed after this statement's snapshot was
            # taken; the next attempt sees it and skips it.
            continue
        return (yield from complete_append(conversation_id, ids, rows, expected_seq))
    raise AlreadyExists(f"could not append to conversation {conversation_id!r}: event ids kept colliding")


def complete_append(conversation_id: str, ids: list[str], rows: list[Row], expected_seq: int | None) -> Op[list[Event]]:
    """Turn the append's rows into events; if some ids were already stored, explain or include them."""
    appended = [event_from_row(r) for r in rows]
    if len(appended) == len(ids):
        return appended
    existing = yield from many("events_by_id", conversation_id=conversation_id, event_ids=ids)
    if not appended and len(existing) < len(ids):
        head = yield from one("conversation_version", id=conversation_id)
        if head is None:
            raise NotFound(f"conversation {conversation_id!r} does not exist")
        raise VersionConflict(expected_seq, head[1], what=f"conversation {conversation_id!r} seq")
    by_id = {e.event_id: e for e in map(event_from_row, existing)}
    by_id.update((e.event_id, e) for e in appended)
    return [by_id[i] for i in ids]


def list_(
    ctx: Ctx,
    conversation_id: str,
    *,
    limit: int | None,
    after_seq: int | None,
    since: datetime | None,
    kinds: Sequence[str] | None,
) -> Op[list[Event]]:
    if limit is not None and limit < 0:
        raise InvalidInput("limit must not be negative", path="limit")
    rows = yield from many(
        "events_list",
        conversation_id=check_id(conversation_id, "conversation_id", ctx.limits),
        limit=limit,
        after_seq=after_seq,
        since=since,
        kinds=None if kinds is None else list(kinds),
    )
    return [event_from_row(r) for r in rows]


def pop(ctx: Ctx, conversation_id: str) -> Op[Event | None]:
    row = yield from one("events_pop", conversation_id=check_id(conversation_id, "conversation_id", ctx.limits))
    return event_from_row(row) if row else None


def clear(ctx: Ctx, conversation_id: str) -> Op[int]:
    row = yield from one("events_clear", conversation_id=check_id(conversation_id, "conversation_id", ctx.limits))
    return int(row[0]) if row else 0
