"""Conversations with their health, filtered and paged (``pgagentstate conversations``), and the tenants."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from ...codec import check_text
from ...errors import InvalidInput
from ...models import Conversation
from ..base import Ctx, Op, Stmt, Tx
from ..conversations import check_status, conversation_from_row
from .args import positive, seconds
from .health import DEFAULT_IDLE, check_health


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """A conversation with its health: category, stuck and failed steps, side effects and duplicates, and
    how many messages it has."""

    conversation: Conversation
    health: str
    stuck_steps: int
    failed_steps: int
    calls: int
    duplicate_hits: int
    #: events in the conversation's log, or for a checkpointed thread (LangGraph, no events) the
    #: messages of its newest checkpoint
    messages: int = 0


def list_conversations(
    ctx: Ctx,
    *,
    app: str | None = None,
    framework: str | None = None,
    user_id: str | None = None,
    status: str | None = None,
    health: str | None = None,
    stuck_only: bool = False,
    idle_over: float | timedelta | None = None,
    active_within: float | timedelta | None = None,
    id_prefix: str | None = None,
    idle: float | timedelta = DEFAULT_IDLE,
    limit: int = 50,
    offset: int = 0,
) -> Op[list[ConversationSummary]]:
    """Conversations newest activity first. ``status`` filters the stored status, ``health`` the health
    category (an idle open conversation is ``abandoned``); ``idle_over`` keeps those without activity for
    that long, ``active_within`` those with activity since then; ``stuck_only`` those with a stuck step."""
    if not isinstance(offset, int) or offset < 0:
        raise InvalidInput("offset must be a non-negative integer", path="offset")
    for value, what in ((app, "app"), (framework, "framework"), (user_id, "user_id"), (id_prefix, "id_prefix")):
        if value is not None:
            check_text(value, what, ctx.limits)
    rows = yield Tx(
        (
            Stmt(
                "ops_conversation_list",
                {
                    "app": app,
                    "framework": framework,
                    "user_id": user_id,
                    "status": check_status(status),
                    "health": check_health(health),
                    "stuck_only": bool(stuck_only),
                    "idle_over": seconds(idle_over, "idle_over"),
                    "active_within": seconds(active_within, "active_within"),
                    "id_prefix": id_prefix or None,
                    "idle": seconds(idle, "idle"),
                    "limit": positive(limit),
                    "offset": offset,
                },
                "all",
            ),
        )
    )
    return [
        ConversationSummary(
            conversation_from_row(ctx, r[:12]), r[12], r[13], r[14], r[15], r[16], r[9] if r[17] is None else r[17]
        )
        for r in rows[0]
    ]


def tenants() -> Op[list[str]]:
    """Every tenant that has conversations (for ``gc --all-tenants``); with row-level security on, only the
    store's own tenant is visible."""
    (rows,) = yield Tx((Stmt("ops_tenants", {}, "all"),))
    return [r[0] for r in rows]
