"""The seed's "load state -> process -> save state" as one unit of work.

Loading is one round trip (conversation, its newest events, its state document). Saving is one
pipelined transaction: a version check that locks the conversation, the new events, the state
compare-and-swap and the status change — all of it commits, or none of it does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..codec import check_id
from ..errors import InvalidInput, NotFound, VersionConflict
from ..models import Conversation, Event, LoadedConversation, NewEvent, StateDoc, StateRef
from . import conversations, events, state
from .base import Ctx, Op, Stmt, Tx


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
) -> Op[LoadedConversation]:
    """The conversation, its newest events and the given state documents in one round trip.

    Without ``create`` the reads share one REPEATABLE READ snapshot, so the conversation's version and
    last_seq describe exactly the events and documents returned.
    """
    check_id(conversation_id, "conversation_id", ctx.limits)
    for ref in states:
        state.check_ref(ctx, ref)
    if limit is not None and limit < 0:
        raise InvalidInput("limit must not be negative", path="limit")
    params = {
        "id": conversation_id,
        "limit": limit,
        "since": since,
        "kinds": None if kinds is None else list(kinds),
        "scopes": [r.scope for r in states],
        "apps": [r.app_name for r in states],
        "subjects": [r.subject for r in states],
        "names": [r.name for r in states],
    }
    stmts: list[Stmt] = []
    if create is not None:
        stmts.append(Stmt("conversation_create", conversations.create_params(ctx, conversation_id, **create), "none"))
    stmts.append(Stmt("conversation_load", params, "all"))
    results = yield Tx(tuple(stmts))
    conv: Conversation | None = None
    recent: list[Event] = []
    docs: list[StateDoc | None] = [None] * len(states)
    for k, t1, t2, t3, t4, t5, t6, t7, t8, n1, n2, ts1, ts2 in results[-1]:
        if k == "e":
            recent.append(events.event_from_row(ctx, (t1, n1, t2, t3, t4, t8, ts1), decode))
        elif k == "s":
            docs[n2 - 1] = state.doc_from_row(ctx, (t1, t2, t3, t4, n1, t8, ts1))
        else:
            conv = conversations.conversation_from_row(ctx, (t1, t2, t3, t4, t5, t6, t7, t8, n1, n2, ts1, ts2))
    recent.sort(key=lambda e: e.seq)
    return LoadedConversation(conversation=conv, events=recent if conv else [], states=docs)


@dataclass(frozen=True, slots=True)
class Loaded:
    conversation: Conversation
    events: list[Event]
    state: StateDoc | None


def load(
    ctx: Ctx, conversation_id: str, *, recent: int, state_name: str, create: Mapping[str, Any] | None
) -> Op[Loaded]:
    ref = StateRef.conversation(conversation_id, state_name)
    found = yield from load_conversation(ctx, conversation_id, limit=recent, states=[ref], create=create)
    if found.conversation is None:
        raise NotFound(f"conversation {conversation_id!r} does not exist")
    return Loaded(conversation=found.conversation, events=found.events, state=found.states[0])


def commit(
    ctx: Ctx,
    loaded: Loaded,
    *,
    new_events: Sequence[NewEvent],
    state_name: str,
    new_state: Mapping[str, Any] | None,
    status: str | None,
) -> Op[list[Event]]:
    """Save what the turn produced; VersionConflict if the conversation changed since ``load``."""
    conv = loaded.conversation
    stmts = [Stmt("turn_check", {"id": conv.id, "expected_version": conv.version}, "none")]
    prepared = None
    if new_events:
        prepared = events.prepare_append(ctx, conv.id, new_events, None)
        stmts.append(prepared.stmt)
    if new_state is not None:
        ref = StateRef.conversation(conv.id, state_name)
        expected = loaded.state.version if loaded.state else 0
        stmts.append(state.write_stmt(ctx, ref, new_state, (), replace=True, expected_version=expected))
    if status is not None and status != conv.status:
        stmts.append(
            Stmt(
                "conversation_update",
                {
                    "id": conv.id,
                    "status": conversations.check_status(status),
                    "metadata": None,
                    "expected_version": None,
                },
                "one",
            )
        )
    results = yield Tx(tuple(stmts))
    if prepared is None:
        return []
    appended = yield from events.complete_append(ctx, conv.id, prepared, results[1], None)
    if appended is None:  # pragma: no cover - the version check above holds the conversation's lock
        raise VersionConflict(conv.version, None, what=f"conversation {conv.id!r} version")
    return appended
