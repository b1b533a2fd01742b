"""Conversation health for one tenant: counts per category (an idle open conversation is ``abandoned``),
stuck and failed workflow steps, and the duplicate calls the idempotency ledger stopped."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ...errors import InvalidInput
from ...models import CONVERSATION_STATUSES, Conversation, InboxMetrics
from .. import inbox as inbox_ops
from ..base import Ctx, Op, Stmt, Tx
from .args import positive, seconds

#: Statuses of a conversation that is still going on; one of these without activity for the idle time
#: counts as abandoned.
OPEN_STATUSES: tuple[str, ...] = ("active", "waiting_customer", "awaiting_approval")
#: Health categories: the statuses, with idle open conversations moved to ``abandoned``.
HEALTH_CATEGORIES: tuple[str, ...] = CONVERSATION_STATUSES
#: Default idle time after which an open conversation counts as abandoned (24 hours).
DEFAULT_IDLE = 24 * 3600.0


def check_health(value: str | None) -> str | None:
    if value is not None and value not in HEALTH_CATEGORIES:
        raise InvalidInput(f"unknown health category {value!r}; use one of {HEALTH_CATEGORIES}", path="health")
    return value


def health_of(conversation: Conversation, *, idle: float = DEFAULT_IDLE, now: datetime | None = None) -> str:
    """The health category of one conversation: its status, or ``abandoned`` when open and idle."""
    now = now or datetime.now(UTC)
    if conversation.status in OPEN_STATUSES and conversation.updated_at < now - timedelta(seconds=idle):
        return "abandoned"
    return conversation.status


@dataclass(frozen=True, slots=True)
class StuckStep:
    """A workflow step in progress past its lease: its worker died or hangs."""

    conversation_id: str
    workflow: str
    step: str
    attempts: int
    last_error: str | None
    started_at: datetime | None
    lease_expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class Health:
    """The brief's conversation health for one tenant, read from one snapshot.

    ``conversations`` has every category of :data:`HEALTH_CATEGORIES`; open conversations without activity
    for ``idle_seconds`` are counted as ``abandoned``, not under their status.
    """

    tenant: str
    idle_seconds: float
    conversations: dict[str, int]
    total: int
    stuck_steps: int
    running_steps: int
    failed_steps: int
    steps_awaiting_approval: int
    duplicate_calls_stopped: int
    keys_with_duplicates: int
    ledger_entries: int
    ledger_failed: int
    ledger_stale_claims: int
    #: The durable inbox: queue depth, oldest unanswered message's age, stale leases, recoveries.
    inbox: InboxMetrics
    stuck: list[StuckStep] = field(default_factory=list)


def health(ctx: Ctx, *, idle: float | timedelta = DEFAULT_IDLE, stuck_limit: int = 20) -> Op[Health]:
    """Counts of conversations per health category, stuck and failed workflow steps, the duplicate
    calls the idempotency ledger stopped, and the durable inbox's metrics."""
    idle_s = seconds(idle, "idle")
    assert idle_s is not None
    conv_rows, steps, stuck_rows, dups, ledger, inbox_messages, inbox_queues = yield Tx(
        (
            Stmt("ops_health_conversations", {"idle": idle_s}, "all"),
            Stmt("ops_health_steps", {}, "one"),
            Stmt("ops_health_stuck_steps", {"limit": positive(stuck_limit, "stuck_limit")}, "all"),
            Stmt("ops_health_duplicates", {}, "one"),
            Stmt("ops_health_ledger", {}, "one"),
            *inbox_ops.METRICS_STMTS,
        ),
        snapshot=True,
    )
    counts = dict.fromkeys(HEALTH_CATEGORIES, 0)
    for status, fresh, stale in conv_rows:
        if status in OPEN_STATUSES:
            counts[status] += fresh
            counts["abandoned"] += stale
        else:
            counts[status] = counts.get(status, 0) + fresh + stale
    return Health(
        tenant=ctx.tenant,
        idle_seconds=idle_s,
        conversations=counts,
        total=sum(counts.values()),
        stuck_steps=steps[0],
        running_steps=steps[1],
        failed_steps=steps[2],
        steps_awaiting_approval=steps[3],
        duplicate_calls_stopped=dups[0],
        keys_with_duplicates=dups[1],
        ledger_entries=ledger[2],
        ledger_failed=ledger[0],
        ledger_stale_claims=ledger[1],
        inbox=inbox_ops.metrics_from(inbox_messages, inbox_queues),
        stuck=[StuckStep(*r) for r in stuck_rows],
    )
