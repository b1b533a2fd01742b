"""The seed's "load state -> process -> save state" as one unit of work, in two round trips.

Loading is one statement (the conversation, its newest events, its state document). Saving is one
statement too, its commit included: the version check that locks the conversation, the new events, the
state compare-and-swap and the status change — all of it commits, or none of it does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import arguments
from ..codec import check_id
from ..errors import AlreadyExists, NotFound, VersionConflict
from ..models import Conversation, Event, LoadedConversation, NewEvent, StateDoc, StateRef
from ..sealing import unseal_plain
from ..validation import check_document
from . import context_cache, conversations, events, state
from .base import Ctx, Op, Stmt, Tx, one


def load_conversation(
    ctx: Ctx,
    conversation_id: str,
    *,
    limit: int | None,
    since: datetime | None = None,
    kinds: Sequence[str] | None = None,
    states: Sequence[StateRef] = (),
    decode: bool = True,
    create: Mapping[str, Any] | None = None,
    payloads_only: bool = False,
) -> Op[LoadedConversation]:
    """The conversation, its newest events and the given state documents in one round trip.

    Without ``create`` the reads share one REPEATABLE READ snapshot, so the conversation's version and
    last_seq describe exactly the events and documents returned. ``payloads_only``: the events' seqs and
    payloads (JSON text) in ``payloads`` instead of ``events``.
    """
    check_id(conversation_id, "conversation_id", ctx.limits)
    for ref in states:
        state.check_ref(ctx, ref)
    params = {
        "id": conversation_id,
        "limit": arguments.optional_integer(limit, "limit"),
        "since": arguments.timestamp(since, "since"),
        "kinds": arguments.names(kinds, "kinds", ctx.limits),
        "scopes": [r.scope for r in states],
        "apps": [r.app_name for r in states],
        "subjects": [r.subject for r in states],
        # no document asked: any constant keeps the (empty) state lookup on one partition
        "subject": state.one_subject(states) if states else conversation_id,
        "names": [r.name for r in states],
    }
    stmts: list[Stmt] = []
    if create is not None:
        stmts.append(Stmt("conversation_create", conversations.create_params(ctx, conversation_id, **create), "none"))
    # A sealed payload's associated data names its event, so with a cipher the whole event row is read.
    bare = payloads_only and ctx.cipher is None
    stmts.append(Stmt("conversation_load", params, "all", subs=_BARE_EVENTS if bare else _EVENTS))
    results = yield Tx(tuple(stmts))
    conv: Conversation | None = None
    recent: list[Event] = []
    payloads: list[tuple[int, str]] = []
    docs: list[StateDoc | None] = [None] * len(states)
    for k, t1, t2, t3, t4, t5, t6, t7, t8, n1, n2, ts1, ts2 in results[-1]:
        if k == "e":
            if bare:
                payloads.append((n1, unseal_plain(t8, raw=True)))
            else:
                recent.append(events.event_from_row(ctx, (t1, n1, t2, t3, t4, t8, ts1), decode and not payloads_only))
        elif k == "s":
            docs[n2 - 1] = state.doc_from_row(ctx, (t1, t2, t3, t4, n1, t8, ts1))
        else:
            conv = conversations.conversation_from_row(ctx, (t1, t2, t3, t4, t5, t6, t7, t8, n1, n2, ts1, ts2))
    if conv is None:
        return LoadedConversation(conversation=None, events=[], states=docs)
    recent.sort(key=lambda e: e.seq)
    if payloads_only:
        payloads = sorted(payloads) if bare else [(e.seq, e.payload) for e in recent]
        return LoadedConversation(conversation=conv, events=[], states=docs, payloads=payloads)
    return LoadedConversation(conversation=conv, events=recent, states=docs)


_EVENTS = (("event_columns", "e.conversation_id, e.event_id, e.kind, e.author, NULL, NULL, NULL, e.payload::text, "
                             "e.seq, NULL::bigint, e.created_at, NULL::timestamptz"),)  # fmt: skip
_BARE_EVENTS = (("event_columns", "NULL, NULL, NULL, NULL, NULL, NULL, NULL, e.payload::text, e.seq, NULL::bigint, "
                                  "NULL::timestamptz, NULL::timestamptz"),)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Loaded:
    conversation: Conversation
    events: list[Event]
    state: StateDoc | None
    cached: bool = False  # served by the Redis tier: a hint that the commit's version check validates
    complete: bool = False  # ``events`` is the whole history
    window: int | None = None  # the turn's ``recent``: how many events the cached entry keeps


def load(
    ctx: Ctx, conversation_id: str, *, recent: int | None, state_name: str, create: Mapping[str, Any] | None
) -> Op[Loaded]:
    """What a turn starts from: the conversation, its newest ``recent`` events and its state document,
    in one statement. The one place a turn reads: a cache in front of Postgres belongs here.

    ``create``: the fields of a conversation to create when there is none (a second round trip, on the
    conversation's first turn only)."""
    ref = state.check_ref(ctx, StateRef.conversation(conversation_id, state_name))
    arguments.optional_integer(recent, "recent")
    hit = yield from context_cache.lookup(ctx, conversation_id, state_name, recent)
    if hit is not None:
        conv, recent_events, doc, complete = hit
        return Loaded(conv, recent_events, doc, cached=True, complete=complete, window=recent)
    stmt = Stmt("turn_load", {"id": conversation_id, "limit": recent, "state_name": state_name}, "one")
    (row,) = yield Tx((stmt,))
    if row is None and create is not None:
        created = yield from one("conversation_create", **conversations.create_params(ctx, conversation_id, **create))
        if created is not None:
            conv = conversations.conversation_from_row(ctx, created)
            yield from context_cache.remember(ctx, (conv, [], None), state_name=state_name, recent=recent)
            return Loaded(conv, [], None, complete=True, window=recent)
        (row,) = yield Tx((stmt,))  # created by someone else meanwhile
    if row is None:
        raise NotFound(f"conversation {conversation_id!r} does not exist")
    doc = None
    if row[12] is not None:
        doc = state.doc_from_row(ctx, (ref.scope, ref.app_name, ref.subject, ref.name, row[12], row[13], row[14]))
    conv = conversations.conversation_from_row(ctx, row)
    recent_events = events.events_from_json(ctx, conversation_id, row[15])
    complete = recent is None or len(recent_events) < recent
    yield from context_cache.remember(ctx, (conv, recent_events, doc), state_name=state_name, recent=recent)
    return Loaded(conversation=conv, events=recent_events, state=doc, complete=complete, window=recent)


def commit(
    ctx: Ctx,
    loaded: Loaded,
    *,
    new_events: Sequence[NewEvent],
    state_name: str,
    new_state: Mapping[str, Any] | None,
    status: str | None,
) -> Op[list[Event]]:
    """Save what the turn produced, in one statement; VersionConflict if the conversation changed since
    ``load``. Event ids stored already (a retried turn) are not appended again: the turn returns them."""
    conv = loaded.conversation
    prepared = events.prepare_append(ctx, conv.id, new_events, None) if new_events else None
    params: dict[str, Any] = {
        "id": conv.id,
        "expected_version": conv.version,
        "status": None if status is None or status == conv.status else conversations.check_status(status),
        "state_name": state_name,
        "state": None,
        "state_version": loaded.state.version if loaded.state else 0,
    }
    if new_state is not None:
        params["state"] = state.put_data(ctx, StateRef.conversation(conv.id, state_name), new_state)
    stored: dict[str, Event] = {}
    fresh = prepared
    now: datetime | None = None
    try:
        while True:
            if fresh is None and params["state"] is None and params["status"] is None:
                yield Tx((Stmt("turn_check", {"id": conv.id, "expected_version": conv.version}, "none"),))
                rows = []
                break
            try:
                (rows,) = yield Tx((Stmt("turn_save", {**params, **events.rows_params(fresh)}),))
                # The first row is the commit's time (the conversation's and the document's updated_at).
                now = next(r[2] for r in rows if r[0] is None)
                rows = [r for r in rows if r[0] is not None]
                break
            except AlreadyExists:
                if prepared is None or stored:
                    raise
                # A retried turn re-sends events stored by its first attempt: keep those, append the rest.
                found = yield from events.stored(ctx, conv.id, prepared.ids)
                if not found:
                    raise
                stored = {e.event_id: e for e in found}
                fresh = prepared.without(stored)
    except (VersionConflict, NotFound):
        if loaded.cached:
            context_cache.note(ctx, "stale")  # the hint was stale: the version check caught it
        yield from context_cache.forget(ctx, conv.id)  # the retry loads from Postgres
        raise
    appended = [] if prepared is None else events.appended(conv.id, prepared, rows, stored)
    if now is not None and not stored:
        yield from context_cache.committed(
            ctx,
            (conv, loaded.events, loaded.state),
            state_name=state_name,
            recent=loaded.window,
            complete=loaded.complete,
            appended=appended,
            status=params["status"],
            new_state=None if new_state is None else check_document(ctx.schemas, state_name, new_state, stored=False),
            now=now,
        )
    elif stored:
        yield from context_cache.forget(ctx, conv.id)
    return appended
