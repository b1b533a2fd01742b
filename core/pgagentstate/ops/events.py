"""The append-only event log of a conversation."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import arguments
from ..codec import as_stored, check_depth, check_id, check_text, has_escapes, parse_json
from ..crypto import AD
from ..errors import AlreadyExists, InvalidInput, NotFound, VersionConflict
from ..models import Event, NewEvent, StateRef
from ..sealing import ad, seal, seal_doc, unseal, unseal_parsed, unseal_plain
from ..validation import check_patch
from .base import Ctx, Op, Row, Stmt, Tx, iso, json_rows, json_str, many, one
from .state import check_ref, doc_ad


def event_ad(tenant: str, conversation_id: str, event_id: str, kind: str, author: str) -> AD:
    """A payload's place: its conversation and event id; its ciphertext also vouches for the event's kind
    and author (its seq is allocated by the server after sealing, so it cannot be bound)."""
    return ad(tenant, "event", conversation_id, event_id, extra=(kind, author))


def event_from_row(ctx: Ctx, row: Row, decode: bool = True) -> Event:
    """``decode=False`` leaves the payload as JSON text, for callers that parse it themselves."""
    if ctx.cipher is None:  # no associated data to build (a 1,000-event load built 1,000 for nothing)
        payload = unseal_plain(row[5], raw=not decode)
    else:
        payload = unseal(ctx.cipher, row[5], event_ad(ctx.tenant, row[0], row[2], row[3], row[4]), raw=not decode)
    return Event(row[0], row[1], row[2], row[3], row[4], payload, row[6])


def events_from_json(ctx: Ctx, conversation_id: str, text: str | None) -> list[Event]:
    """Events from one JSON array of ``[seq, event_id, kind, author, payload, created_at]`` (turn_load)."""
    if text is None:
        return []
    cipher, escaped, fromiso = ctx.cipher, has_escapes(text), datetime.fromisoformat
    out = []
    for seq, event_id, kind, author, stored, created_at in parse_json(text):
        payload = stored
        if cipher is not None or escaped:
            where = event_ad(ctx.tenant, conversation_id, event_id, kind, author)
            payload = unseal_parsed(cipher, stored, where, escaped=escaped)
        out.append(Event(conversation_id, seq, event_id, kind, author, payload, fromiso(created_at)))
    return out


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    """A validated append: the statement, and what is needed to build the events it returns."""

    stmt: Stmt
    ids: list[str]
    events: Sequence[NewEvent]
    payloads: list[Any]  # as stored (after the store's sanitiser, if any)
    rows: list[str]  # one JSON array per event: [event_id, kind, author, payload as stored, created_at]

    def first_try(self) -> Stmt:
        """The cheaper statement that appends new event ids (a stored one makes it fail with
        AlreadyExists), without the patch CTEs when there is no state patch."""
        name = "events_append_fast" if self.stmt.params["patches"] else "events_append_plain"
        return Stmt(name, {**self.stmt.params, "n": len(self.ids)})

    def without(self, stored: Mapping[str, Any]) -> PreparedAppend | None:
        """The same append minus the event ids in ``stored``; None when nothing is left."""
        keep = [i for i, event_id in enumerate(self.ids) if event_id not in stored]
        if not keep:
            return None
        rows = [self.rows[i] for i in keep]
        return PreparedAppend(
            Stmt(self.stmt.name, {**self.stmt.params, "events": _array(rows)}),
            [self.ids[i] for i in keep],
            [self.events[i] for i in keep],
            [self.payloads[i] for i in keep],
            rows,
        )


def _array(rows: Sequence[str]) -> str | None:
    return "[" + ",".join(rows) + "]" if rows else None


def rows_params(prepared: PreparedAppend | None) -> dict[str, Any]:
    """The ``events`` and ``n`` parameters of a statement that appends ``prepared`` (nothing when None)."""
    if prepared is None:
        return {"events": None, "n": 0}
    return {"events": prepared.stmt.params["events"], "n": len(prepared.ids)}


def prepare_append(
    ctx: Ctx,
    conversation_id: str,
    events: Sequence[NewEvent],
    expected_seq: int | None,
    state_patches: Sequence[tuple[StateRef, Mapping[str, Any]]] = (),
) -> PreparedAppend:
    """Validate ``events`` (and state patches) and build the append statement."""
    lim = ctx.limits
    check_id(conversation_id, "conversation_id", lim)
    arguments.optional_integer(expected_seq, "expected_seq")
    ids: list[str] = []
    values: list[Any] = []
    rows: list[str] = []
    for i, ev in enumerate(events):
        if not isinstance(ev, NewEvent):
            raise InvalidInput(f"events[{i}] must be a NewEvent, not {type(ev).__name__}", path=f"events[{i}]")
        event_id = check_id(ev.event_id, f"events[{i}].event_id", lim) if ev.event_id is not None else uuid.uuid4().hex
        check_text(ev.kind, f"events[{i}].kind", lim, allow_empty=False)
        check_text(ev.author, f"events[{i}].author", lim)
        arguments.timestamp(ev.created_at, f"events[{i}].created_at")
        where = event_ad(ctx.tenant, conversation_id, event_id, ev.kind, ev.author)
        if ctx.sanitizer is None:
            payload = as_stored(ev.payload, lim)
        else:  # the sanitiser walks the value recursively: a hostile depth must be refused first
            check_depth(ev.payload, lim, path=f"events[{i}].payload")
            payload = ctx.sanitizer.clean_value(ev.payload)
        sealed = seal(ctx.cipher, payload, lim, where, path=f"events[{i}].payload")
        ids.append(event_id)
        values.append(payload)
        # Rows of JSON text built by hand: the payload is JSON text already (sealed or not).
        rows.append(
            f"[{json_str(event_id)},{json_str(ev.kind)},{json_str(ev.author)},{sealed},{json_str(iso(ev.created_at))}]"
        )
    if len(set(ids)) != len(ids):
        raise InvalidInput("the same event_id appears twice in one batch", path="events")
    refs: list[StateRef] = []
    datas: list[str] = []
    for i, (ref, data) in enumerate(state_patches):
        check_ref(ctx, ref)
        if ref.scope == "conversation" and ref.subject != conversation_id:
            raise InvalidInput(
                "a conversation state patch must address the same conversation", path=f"state_patches[{i}]"
            )
        if not isinstance(data, Mapping):
            raise InvalidInput("a state patch must be a mapping", path=f"state_patches[{i}]")
        refs.append(ref)
        data = check_patch(ctx.schemas, ref.name, data)
        datas.append(seal_doc(ctx.cipher, data, lim, doc_ad(ctx, ref), path=f"state_patches[{i}]"))
    if len(set(refs)) != len(refs):
        raise InvalidInput("the same state document is patched twice in one append", path="state_patches")
    stmt = Stmt(
        "events_append",
        {
            "conversation_id": conversation_id,
            "events": _array(rows),
            "expected_seq": expected_seq,
            "patches": json_rows(
                (json_str(r.scope), json_str(r.app_name), json_str(r.subject), json_str(r.name), d)
                for r, d in zip(refs, datas, strict=True)
            ),
        },
    )
    return PreparedAppend(stmt, ids, events, values, rows)


def stored(ctx: Ctx, conversation_id: str, event_ids: Sequence[str]) -> Op[list[Event]]:
    """The events of ``event_ids`` that are stored already."""
    rows = yield from many("events_by_id", conversation_id=conversation_id, event_ids=list(event_ids))
    return [event_from_row(ctx, r) for r in rows]


def appended(
    conversation_id: str, prepared: PreparedAppend, rows: Sequence[Row], stored: Mapping[str, Event]
) -> list[Event]:
    """The events of ``prepared`` in its order: the ones just inserted (``rows`` of seq, event_id,
    created_at) and the ones found ``stored`` before."""
    by_id = dict(stored)
    position = {event_id: i for i, event_id in enumerate(prepared.ids)}
    for seq, event_id, created_at in rows:
        i = position[event_id]
        ev = prepared.events[i]
        by_id[event_id] = Event(conversation_id, seq, event_id, ev.kind, ev.author, prepared.payloads[i], created_at)
    return [by_id[i] for i in prepared.ids]


def append(
    ctx: Ctx,
    conversation_id: str,
    events: Sequence[NewEvent],
    expected_seq: int | None,
    state_patches: Sequence[tuple[StateRef, Mapping[str, Any]]] = (),
) -> Op[list[Event]]:
    prepared = prepare_append(ctx, conversation_id, events, expected_seq, state_patches)
    if not prepared.ids:
        return []
    try:
        (rows,) = yield Tx((prepared.first_try(),))
    except AlreadyExists:
        pass  # an event id is stored already (a retry): the full statement below skips it
    else:
        done = yield from complete_append(ctx, conversation_id, prepared, rows, expected_seq)
        if done is not None:
            return done
    for _ in range(5):
        try:
            (rows,) = yield Tx((prepared.stmt,))
        except AlreadyExists:
            # A concurrent append of the same event id committed after this statement's snapshot was
            # taken; the next attempt sees it and skips it.
            continue
        done = yield from complete_append(ctx, conversation_id, prepared, rows, expected_seq)
        if done is not None:
            return done
        # The statement's snapshot predates a concurrent change (e.g. the conversation was created by a
        # transaction that committed meanwhile): run it again with a fresh one.
    raise VersionConflict(expected_seq, None, what=f"conversation {conversation_id!r} seq")


def complete_append(
    ctx: Ctx, conversation_id: str, prepared: PreparedAppend, rows: list[Row], expected_seq: int | None
) -> Op[list[Event] | None]:
    """Build the events an append returns; if ids were stored already, include those (or explain why
    nothing was appended). None means "try again": nothing was appended, and nothing says why."""
    position = {event_id: i for i, event_id in enumerate(prepared.ids)}
    by_id: dict[str, Event] = {}
    for seq, event_id, created_at in rows:
        i = position[event_id]
        ev = prepared.events[i]
        by_id[event_id] = Event(conversation_id, seq, event_id, ev.kind, ev.author, prepared.payloads[i], created_at)
    if len(by_id) == len(prepared.ids):
        return [by_id[i] for i in prepared.ids]
    existing = yield from many("events_by_id", conversation_id=conversation_id, event_ids=prepared.ids)
    by_id.update((e.event_id, e) for e in (event_from_row(ctx, r) for r in existing))
    if len(by_id) == len(prepared.ids):
        return [by_id[i] for i in prepared.ids]
    head = yield from one("conversation_version", id=conversation_id)
    if head is None:
        raise NotFound(f"conversation {conversation_id!r} does not exist")
    if expected_seq is not None and head[1] != expected_seq:
        raise VersionConflict(expected_seq, head[1], what=f"conversation {conversation_id!r} seq")
    return None


_PRUNE_BATCH = 100


def replace(
    ctx: Ctx,
    conversation_id: str,
    events: Sequence[NewEvent],
    tail: Sequence[str] | None,
    prune: Callable[[Event], bool] | None,
) -> Op[list[Event] | None]:
    """Replace the newest events (ids ``tail``, oldest first; the whole log when None) with ``events``, in
    one transaction under the conversation row lock. None, and nothing changed, when the log's newest
    events are no longer ``tail``. ``prune`` deletes older events, oldest first, while it returns True."""
    prepared = prepare_append(ctx, conversation_id, events, None)
    expected = None if tail is None else [check_id(t, f"tail[{i}]", ctx.limits) for i, t in enumerate(tail)]
    cid = {"conversation_id": conversation_id}
    (head,) = yield Tx((Stmt("conversation_lock_row", cid, "one"),), hold=True)
    if head is None:
        yield Tx(())  # ends the transaction
        raise NotFound(f"conversation {conversation_id!r} does not exist")
    last_seq = int(head[0])
    from_seq, upto = last_seq + 1, 0
    if expected is None:
        upto = last_seq
    else:
        if expected:
            (rows,) = yield Tx((Stmt("events_tail_ids", {**cid, "n": len(expected)}),), hold=True)
            if [r[1] for r in rows] != expected:
                yield Tx(())  # someone appended or popped since the tail was read: change nothing
                return None
            from_seq = int(rows[0][0])
        if prune is not None:
            upto = yield from _prunable_prefix(ctx, conversation_id, from_seq, prune)
    cut = Stmt("events_cut", {**cid, "upto": upto, "from_seq": from_seq, "bump": 0 if prepared.ids else 1}, "one")
    if not prepared.ids:
        yield Tx((cut,))
        return []
    _, rows = yield Tx((cut, prepared.first_try()))
    done = yield from complete_append(ctx, conversation_id, prepared, rows, None)
    if done is None:  # pragma: no cover - the row lock is held: the append cannot miss
        raise VersionConflict(None, None, what=f"conversation {conversation_id!r} seq")
    return done


def _prunable_prefix(ctx: Ctx, conversation_id: str, before_seq: int, prune: Callable[[Event], bool]) -> Op[int]:
    """The seq of the last event of the longest prefix (before ``before_seq``) that ``prune`` accepts; 0 if
    none. Read in batches inside the caller's transaction."""
    upto = 0
    while True:
        params = {"conversation_id": conversation_id, "after_seq": upto, "before_seq": before_seq}
        (rows,) = yield Tx((Stmt("events_oldest", {**params, "limit": _PRUNE_BATCH}),), hold=True)
        for row in rows:
            if not prune(event_from_row(ctx, row)):
                return upto
            upto = int(row[1])
        if len(rows) < _PRUNE_BATCH:
            return upto


def list_(
    ctx: Ctx,
    conversation_id: str,
    *,
    limit: int | None,
    after_seq: int | None,
    since: datetime | None,
    kinds: Sequence[str] | None,
    decode: bool = True,
) -> Op[list[Event]]:
    check_id(conversation_id, "conversation_id", ctx.limits)
    stmt = list_stmt(conversation_id, limit=limit, after_seq=after_seq, since=since, kinds=kinds)
    (rows,) = yield Tx((stmt,), replica=True)
    return [event_from_row(ctx, r, decode) for r in rows]


def pop(ctx: Ctx, conversation_id: str) -> Op[Event | None]:
    """Remove the newest event. The conversation row is locked by a first statement, so the delete's
    snapshot sees every concurrent append or pop that committed before (one round trip, pipelined)."""
    params = {"conversation_id": check_id(conversation_id, "conversation_id", ctx.limits)}
    _, row = yield Tx((Stmt("conversation_lock_row", params, "none"), Stmt("events_pop", params, "one")))
    return event_from_row(ctx, row) if row else None


def list_stmt(
    conversation_id: str,
    *,
    limit: int | None,
    after_seq: int | None = None,
    since: datetime | None = None,
    kinds: Sequence[str] | None = None,
) -> Stmt:
    return Stmt(
        "events_list",
        {
            "conversation_id": conversation_id,
            "limit": arguments.optional_integer(limit, "limit"),
            "after_seq": arguments.optional_integer(after_seq, "after_seq"),
            "since": arguments.timestamp(since, "since"),
            "kinds": arguments.names(kinds, "kinds"),
        },
    )


def payloads(ctx: Ctx, conversation_id: str, *, limit: int | None) -> Op[list[Any]]:
    params: dict[str, Any] = {
        "conversation_id": check_id(conversation_id, "conversation_id", ctx.limits),
        "limit": arguments.optional_integer(limit, "limit"),
    }
    if ctx.cipher is None:
        (rows,) = yield Tx((Stmt("event_payloads_array", params, "all"),), replica=True)
        if not rows:
            return []
        text = "[" + ",".join(r[0] for r in reversed(rows)) + "]"
        found: list[Any] = parse_json(text)
        if has_escapes(text):  # NULs escaped, or sealed payloads this store has no keys for
            where = ad(ctx.tenant, "event")
            found = [unseal_parsed(None, value, where, escaped=True) for value in found]
        return found
    rows = yield from many("event_payloads", replica=True, **params)
    return [unseal(ctx.cipher, r[1], event_ad(ctx.tenant, conversation_id, r[0], r[2], r[3])) for r in rows]


def clear(ctx: Ctx, conversation_id: str) -> Op[int]:
    row = yield from one("events_clear", conversation_id=check_id(conversation_id, "conversation_id", ctx.limits))
    return int(row[0]) if row else 0
