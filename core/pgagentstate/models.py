"""The records a store returns. Plain frozen dataclasses: no framework types in the core."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

ConversationStatus = Literal["active", "waiting_customer", "awaiting_approval", "completed", "failed", "abandoned"]
CONVERSATION_STATUSES: tuple[str, ...] = (
    "active",
    "waiting_customer",
    "awaiting_approval",
    "completed",
    "failed",
    "abandoned",
)
StepStatus = Literal["pending", "in_progress", "awaiting_approval", "completed", "failed"]
STEP_STATUSES: tuple[str, ...] = ("pending", "in_progress", "awaiting_approval", "completed", "failed")
Scope = Literal["conversation", "user", "app"]


@dataclass(frozen=True, slots=True)
class Conversation:
    """A conversation (a LangGraph thread, an ADK session, an Agents SDK session).

    ``version`` increases on every change to the conversation, its events or its state documents;
    ``last_seq`` is the position of its event log: the seq of the newest event, or more when the newest
    events were popped, replaced or cleared since. It only ever grows (every change of the log moves
    it), and no seq is handed out twice, so it is what ``append_events(expected_seq=...)`` checks.
    """

    tenant_id: str
    id: str
    app: str
    framework: str
    user_id: str
    channel: str
    status: str
    metadata: dict[str, Any]
    version: int
    last_seq: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append. Re-appending an ``event_id`` that is stored already is a no-op."""

    payload: Any
    kind: str = "message"
    author: str = ""
    event_id: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """A stored event: ``seq`` increases from 1 within its conversation, without gaps except where events
    were popped, replaced or cleared; a seq is never reused."""

    conversation_id: str
    seq: int
    event_id: str
    kind: str
    author: str
    payload: Any
    created_at: datetime


@dataclass(frozen=True, slots=True)
class StateRef:
    """Addresses one versioned state document."""

    scope: Scope
    app_name: str = ""
    subject: str = ""
    name: str = "state"

    @classmethod
    def conversation(cls, conversation_id: str, name: str = "state") -> StateRef:
        """State of one conversation (ADK session state, workflow data, a paused run...)."""
        return cls("conversation", "", conversation_id, name)

    @classmethod
    def user(cls, app: str, user_id: str, name: str = "state") -> StateRef:
        """State shared by every conversation of one user of an app (ADK ``user:`` keys)."""
        return cls("user", app, user_id, name)

    @classmethod
    def app(cls, app: str, name: str = "state") -> StateRef:
        """State shared by every conversation of an app (ADK ``app:`` keys)."""
        return cls("app", app, "", name)


@dataclass(frozen=True, slots=True)
class StateDoc:
    ref: StateRef
    data: dict[str, Any]
    version: int
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Step:
    """Progress of one step of a durable workflow."""

    conversation_id: str
    workflow: str
    step: str
    position: int
    status: str
    attempts: int
    last_error: str | None
    result: Any
    started_at: datetime | None
    completed_at: datetime | None
    updated_at: datetime
    lease_expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """The record of one external side effect, keyed by its idempotency key."""

    key: str
    conversation_id: str | None
    api: str
    request_hash: str
    status: str
    result: Any
    error: str | None
    owner: str
    attempts: int
    duplicate_hits: int
    lease_expires_at: datetime
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None


InboxStatus = Literal["waiting", "running", "done", "failed"]


@dataclass(frozen=True, slots=True)
class InboxMessage:
    """A message of the durable inbox (:meth:`AsyncStateStore.accept`), numbered ``seq`` in its
    conversation's arrival order. ``delivery_id`` is the channel's id of the delivery (its idempotency
    key). ``attempts`` counts the claims of its turn: more than 1 means an earlier attempt started it
    (``resumed``), and the handler must carry on from the last durable step rather than start over.
    ``worker`` is the claim's owner; ``result`` what the handler returned, ``error`` why it failed."""

    conversation_id: str
    seq: int
    delivery_id: str
    message: Any
    status: InboxStatus
    attempts: int
    worker: str | None
    result: Any
    error: str | None
    accepted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def resumed(self) -> bool:
        """An earlier claim of this turn did not finish it (its worker died, or the handler failed)."""
        return self.attempts > 1


@dataclass(frozen=True, slots=True)
class Accepted:
    """What :meth:`AsyncStateStore.accept` stored: the message's place in its conversation, and whether
    this delivery was a repeat of one accepted before (then nothing was written)."""

    conversation_id: str
    seq: int
    delivery_id: str
    status: InboxStatus
    duplicate: bool


@dataclass(frozen=True, slots=True)
class InboxMetrics:
    """The durable inbox of one tenant: ``waiting`` + ``running`` is the queue depth (messages accepted and
    not answered yet); ``oldest_seconds`` the age of the oldest of them (None when there is none);
    ``conversations`` how many conversations have work queued; ``stale_leases`` turns whose worker let the
    lease run out and no worker has taken over yet; ``recoveries`` turns taken over from such a worker so
    far; ``failed`` messages given up on (the handler kept failing, or the turn kept killing its worker)."""

    waiting: int
    running: int
    failed: int
    oldest_seconds: float | None
    conversations: int
    stale_leases: int
    recoveries: int

    @property
    def depth(self) -> int:
        return self.waiting + self.running


@dataclass(frozen=True, slots=True)
class Memory:
    """A long-term memory item. ``score`` is the full-text rank when it came from a search with a query."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    user_id: str
    version: int
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    score: float | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class LoadedConversation:
    """A conversation, its newest events and some of its state documents, read from one snapshot."""

    conversation: Conversation | None
    events: list[Event]
    states: list[StateDoc | None]
    #: With ``payloads_only``: ``(seq, payload as JSON text)`` of the events instead of ``events``, oldest first.
    payloads: list[tuple[int, str]] = field(default_factory=list)
