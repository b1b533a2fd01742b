"""The seed's "load state -> process -> save state" as one unit of work.

Loading is one round trip (conversation, its newest events, its state document). Saving is one
pipelined transaction: a version check that locks the conversation, the new events, the state
compare-and-swap and the status change — all of it commits, or none of it does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import NotFound
from ..models import Conversation, Event, NewEvent, StateDoc, StateRef
from . import conversations, events, state
from .base import Ctx, Op, Stmt, Tx


@dataclass(frozen=True, slots=True)
class Loaded:
    conversation: Conversation
    events: list[Event]
    state: StateDoc | None


def load(
    ctx: Ctx, conversation_id: str, *, recent: int, state_name: str, create: Mapping[str, Any] | None
) -> Op[Loaded]:
    ref = state.check_ref(ctx, StateRef.conversation(conversation_id, state_name))
    stmts: list[Stmt] = []
    if create is not None:
        params = conversations.create_params(ctx, conversation_id, **create)
        stmts.append(Stmt("conversation_create", params, "none"))
    stmts += [
        Stmt("conversation_get", {"id": conversation_id}, "one"),
        Stmt(
            "events_list",
            {"conversation_id": conversation_id, "limit": recent, "after_seq": None, "since": None, "kinds": None},
            "all",
        ),
        Stmt(
            "state_get_many",
            {"scopes": [ref.scope], "apps": [ref.app_name], "subjects": [ref.subject], "names": [ref.name]},
            "all",
        ),
    ]
    results = yield Tx(tuple(stmts))
    conv_row, event_rows, state_rows = results[-3:]
    if conv_row is None:
        raise NotFound(f"conversation {conversation_id!r} does not exist")
    return Loaded(
        conversation=conversations.conversation_from_row(conv_row),
        events=[events.event_from_row(r) for r in event_rows],
        state=state.doc_from_row(state_rows[0][1:]) if state_rows else None,
    )


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
    ids: list[str] = []
    if new_events:
        append, ids = events.append_stmt(ctx, conv.id, new_events, None)
        stmts.append(append)
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
    if not new_events:
        return []
    return (yield from events.complete_append(conv.id, ids, results[1], None))
