"""One conversation's timeline (messages, state versions with diffs, workflow steps, side effects and their
retries, scratchpad, checkpoints, merged in the order the store recorded them) and time travel on its state
(``show``, ``state --at``).

The order is the store's clock, not the application's: an event's ``created_at`` may be a send time or a
simulated clock, so events are placed by ``recorded_at`` (when the store wrote them), as steps, calls and
state versions are. State written in the same transaction as an event (a turn's facts, a webhook's delivery
marks) is folded into that event: it stays in the list, marked ``folded`` with the event's ``seq``.
A checkpointed thread (LangGraph) has no events: its messages, values and interrupts come from its
checkpoints (:mod:`.checkpoints`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from ...codec import check_id
from ...errors import InvalidInput
from ...models import Conversation, Event, LedgerEntry, StateDoc, StateRef, Step
from ...sealing import ad, unseal, unseal_doc
from .. import state as state_ops
from ..base import Ctx, Op, Stmt, Tx
from ..conversations import conversation_from_row
from ..events import event_from_row
from ..ledger import entry_from_row
from ..workflow import step_from_row
from .args import positive, seconds
from .checkpoints import ThreadView, thread_view
from .health import DEFAULT_IDLE, health_of
from .rendering import call_names, compact, message_text

ChangeOp = Literal["added", "removed", "changed"]


@dataclass(frozen=True, slots=True)
class Change:
    """One difference between two state versions; ``path`` is dotted (``refund.status``)."""

    path: str
    op: ChangeOp
    old: Any = None
    new: Any = None


def diff(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None, prefix: str = "") -> list[Change]:
    """What changed from ``old`` to ``new``, descending into nested objects (lists compare whole)."""
    old = old or {}
    new = new or {}
    out: list[Change] = []
    for key in sorted(set(old) | set(new), key=str):
        path = f"{prefix}{key}"
        if key not in old:
            out.append(Change(path, "added", None, new[key]))
        elif key not in new:
            out.append(Change(path, "removed", old[key], None))
        elif isinstance(old[key], Mapping) and isinstance(new[key], Mapping):
            out.extend(diff(old[key], new[key], path + "."))
        elif old[key] != new[key] or type(old[key]) is not type(new[key]):
            out.append(Change(path, "changed", old[key], new[key]))
    return out


@dataclass(frozen=True, slots=True)
class StateVersion:
    """One stored version of a state document, with what changed from the version before. ``scope`` is
    ``conversation``, ``user`` or ``app`` (the documents a conversation shares: ADK's ``user:`` and ``app:``
    keys), or ``checkpoint`` for a LangGraph thread's channel values."""

    name: str
    version: int
    data: dict[str, Any]
    changed_at: datetime
    changes: list[Change]
    scope: str = "conversation"

    @property
    def label(self) -> str:
        """``state``, ``user:state``, ``app:state``, ``checkpoint:values``: how the tools name it."""
        return self.name if self.scope == "conversation" else f"{self.scope}:{self.name}"


@dataclass(frozen=True, slots=True)
class ScratchItem:
    key: str
    value: Any
    expires_at: datetime | None
    updated_at: datetime
    expired: bool


@dataclass(frozen=True, slots=True)
class SnapshotSummary:
    """The checkpoints of one namespace (LangGraph): how many, when, and the newest id."""

    namespace: str
    count: int
    first_at: datetime
    last_at: datetime
    latest_id: str


TimelineKind = Literal["message", "event", "state", "step", "call", "retry"]


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One line of a conversation's merged timeline, in the order the store recorded them (``at``).

    ``seq`` is the event's (for a folded entry: the event it was written with); ``sent_at`` the event's own
    time when the application gave one that differs from ``at`` (a send time, a simulated clock)."""

    at: datetime
    kind: TimelineKind
    title: str
    text: str = ""
    role: str = ""
    seq: int | None = None
    folded: bool = False
    sent_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Timeline:
    """Everything about one conversation, read from one snapshot."""

    conversation: Conversation
    health: str
    events: list[Event]
    state_versions: list[StateVersion]
    steps: list[Step]
    ledger: list[LedgerEntry]
    scratchpad: list[ScratchItem]
    snapshots: list[SnapshotSummary]
    entries: list[TimelineEntry]
    #: the user's and the app's state documents, latest versions (scopes ``user`` and ``app``)
    shared_state: list[StateVersion] = field(default_factory=list)
    #: a checkpointed thread's messages, values and interrupts (LangGraph); None without checkpoints
    thread: ThreadView | None = None


def _role(event: Event) -> str:
    payload = event.payload
    if isinstance(payload, Mapping):
        for key in ("role", "author"):
            value = payload.get(key)
            if isinstance(value, str) and value:
                return value
    return event.author or event.kind


def _describe_changes(changes: Sequence[Change]) -> str:
    marks = {"added": "+", "removed": "-", "changed": "~"}
    return ", ".join(f"{marks[c.op]}{c.path}" for c in changes) or "no change"


#: Within one instant (one transaction) the event comes first, then the state written with it, then the rest.
_RANK = {"message": 0, "event": 0, "state": 1, "step": 2, "retry": 2, "call": 3}
_SAME_TIME = timedelta(seconds=1)


def _retry_text(what: str, number: int, r: Mapping[str, Any], at: datetime) -> str:
    owner = f" (owner {r['owner']})" if r.get("owner") else ""
    if r.get("status") == "failed":
        # A step keeps its error (plain text); a call does not (it may be sealed; the step says why).
        return f"attempt {number}{owner} failed" + (f": {r['error']}" if r.get("error") else "")
    lease = r.get("lease_expires_at")
    until = datetime.fromisoformat(lease) if isinstance(lease, str) else None
    if until is not None and until <= at:
        return (f"attempt {number}{owner} never recorded an outcome: the worker died or stalled, its lease ran "
                f"out {(at - until).total_seconds():.1f} s before the {what} was taken over")
    left = f", {(until - at).total_seconds():.1f} s before its lease ran out" if until is not None else ""
    return f"attempt {number}{owner} had not recorded an outcome when the {what} was started again{left}"


def _retry_entries(
    rows: Sequence[tuple[str, str, str]], steps: Sequence[Step], ledger: Sequence[LedgerEntry]
) -> list[TimelineEntry]:
    attempts = {("step", f"{s.workflow}/{s.step}"): s.attempts for s in steps}
    attempts.update({("call", k.key): k.attempts for k in ledger})
    apis = {k.key: k.api or "external" for k in ledger}
    out = []
    for kind, name, text in rows:
        retries = [r for r in json.loads(text) if isinstance(r, Mapping)]
        total = attempts.get((kind, name), len(retries) + 1)
        for i, r in enumerate(retries):
            at = datetime.fromisoformat(r["at"])
            number = total - len(retries) + i
            if kind == "step":
                title, what = f"step {name} retried", "step"
            else:
                title, what = f"call {apis.get(name, 'external')} retried [{name}]", "call"
            out.append(TimelineEntry(at, "retry", title, _retry_text(what, number, r, at)))
    return out


def _thread_entries(thread: ThreadView) -> list[TimelineEntry]:
    out = [TimelineEntry(m.at, "message", m.role, m.text, m.role) for m in thread.messages]
    for sig in thread.signals:
        value = sig.value
        if isinstance(value, list) and all(isinstance(v, Mapping) and "value" in v for v in value):
            value = [v["value"] for v in value]
            value = value[0] if len(value) == 1 else value
        title = {"interrupt": "interrupt" + (" (waiting for input)" if sig.pending else ""),
                 "resume": "resumed", "error": "task error"}[sig.kind]
        out.append(TimelineEntry(sig.at, "event", title, value if isinstance(value, str) else compact(value)))
    return out


def _entries(
    events: Sequence[Event],
    recorded: Mapping[int, datetime],
    versions: Sequence[StateVersion],
    steps: Sequence[Step],
    ledger: Sequence[LedgerEntry],
    extra: Sequence[TimelineEntry] = (),
) -> list[TimelineEntry]:
    out: list[TimelineEntry] = []
    names = call_names([ev.payload for ev in events])
    by_instant: dict[datetime, int] = {}
    for ev in events:
        kind: TimelineKind = "message" if ev.kind == "message" else "event"
        at = recorded.get(ev.seq, ev.created_at)
        sent = ev.created_at if abs(ev.created_at - at) >= _SAME_TIME else None
        out.append(TimelineEntry(at, kind, f"#{ev.seq} {_role(ev)}", message_text(ev.payload, names), _role(ev),
                                 seq=ev.seq, sent_at=sent))
        by_instant[at] = ev.seq
    for v in versions:
        # Written in the same transaction as an event (same now()): part of that event, folded into it.
        seq = by_instant.get(v.changed_at) if v.scope == "conversation" else None
        out.append(TimelineEntry(v.changed_at, "state", f"state {v.label!r} v{v.version}",
                                 _describe_changes(v.changes), seq=seq, folded=seq is not None))
    for s in steps:
        name = f"{s.workflow}/{s.step}"
        if s.started_at:
            out.append(TimelineEntry(s.started_at, "step", f"step {name} started", f"attempts: {s.attempts}"))
        if s.status == "completed" and s.completed_at:
            result = "" if s.result is None else compact(s.result)
            out.append(TimelineEntry(s.completed_at, "step", f"step {name} completed", result))
        elif s.status != "in_progress" or not s.started_at:
            out.append(TimelineEntry(s.updated_at, "step", f"step {name} {s.status}", s.last_error or ""))
    for k in ledger:
        api = k.api or "external"
        out.append(TimelineEntry(k.created_at, "call", f"call {api} [{k.key}]", f"attempts: {k.attempts}"))
        if k.status == "succeeded" and k.completed_at:
            text = compact(k.result)
            if k.duplicate_hits:
                text += f" (duplicates stopped: {k.duplicate_hits})"
            out.append(TimelineEntry(k.completed_at, "call", f"call {k.api or 'external'} succeeded", text))
        elif k.status == "failed":
            out.append(TimelineEntry(k.updated_at, "call", f"call {k.api or 'external'} failed", k.error or ""))
    out.extend(extra)
    order = {id(e): i for i, e in enumerate(out)}
    out.sort(key=lambda e: (e.at, _RANK[e.kind], order[id(e)]))
    return out


def timeline(
    ctx: Ctx, conversation_id: str, *, event_limit: int | None = None, idle: float | timedelta = DEFAULT_IDLE
) -> Op[Timeline | None]:
    """The conversation's messages, state versions with diffs, workflow steps, side effects (ledger),
    scratchpad and checkpoints, merged into one time-ordered list; None if it does not exist."""
    check_id(conversation_id, "conversation_id", ctx.limits)
    if event_limit is not None:
        positive(event_limit, "event_limit")
    key = {"conversation_id": conversation_id}
    conv, events, versions, shared, steps, ledger, retries, scratch, snaps = yield Tx(
        (
            Stmt("conversation_get", {"id": conversation_id}, "one"),
            Stmt("ops_timeline_events", {**key, "limit": event_limit}, "all"),
            Stmt("ops_state_versions", key, "all"),
            Stmt("ops_shared_state", key, "all"),
            Stmt("step_list", {**key, "workflow": None, "step": None}, "all"),
            Stmt("ledger_list", key, "all"),
            Stmt("ops_retries", key, "all"),
            Stmt("ops_scratch_all", key, "all"),
            Stmt("ops_snapshot_summary", key, "all"),
        ),
        snapshot=True,
    )
    if conv is None:
        return None
    conversation = conversation_from_row(ctx, conv)
    state_versions: list[StateVersion] = []
    previous: dict[str, dict[str, Any]] = {}
    for name, version, data_text, changed_at in versions:
        data = unseal_doc(ctx.cipher, data_text, state_ops.doc_ad(ctx, StateRef.conversation(conversation_id, name)))
        state_versions.append(StateVersion(name, version, data, changed_at, diff(previous.get(name), data)))
        previous[name] = data
    shared_state = [
        StateVersion(
            name, version, unseal_doc(ctx.cipher, text, state_ops.doc_ad(ctx, StateRef(scope, app, who, name))),
            at, [], scope,
        )
        for scope, name, version, text, at, who, app in shared
    ]
    event_list = [event_from_row(ctx, r[:7]) for r in events]
    recorded = {r[1]: r[7] for r in events}
    step_list = [step_from_row(ctx, r) for r in steps]
    ledger_list = [entry_from_row(ctx, r) for r in ledger]
    extra = _retry_entries(retries, step_list, ledger_list)
    thread = None
    if any(r[0] == "" for r in snaps):
        thread = yield from thread_view(ctx, conversation_id, conversation.created_at)
    if thread is not None:
        extra += _thread_entries(thread)
        before: dict[str, Any] | None = None
        for i, values in enumerate(thread.values, start=1):
            state_versions.append(StateVersion("values", i, values.values, values.at, diff(before, values.values),
                                               "checkpoint"))
            before = values.values
    idle_s = seconds(idle, "idle")
    assert idle_s is not None
    return Timeline(
        conversation=conversation,
        health=health_of(conversation, idle=idle_s),
        events=event_list,
        state_versions=state_versions,
        steps=step_list,
        ledger=ledger_list,
        scratchpad=[
            ScratchItem(r[0], unseal(ctx.cipher, r[1], ad(ctx.tenant, "scratch", conversation_id, r[0])), *r[2:5])
            for r in scratch
        ],
        snapshots=[SnapshotSummary(*r) for r in snaps],
        entries=_entries(event_list, recorded, state_versions, step_list, ledger_list, extra),
        shared_state=shared_state,
        thread=thread,
    )


def state_at(
    ctx: Ctx, conversation_id: str, *, version: int | None = None, at: datetime | None = None, name: str = "state"
) -> Op[StateDoc | None]:
    """Time travel: the conversation's state document as it was at ``version`` or at time ``at`` (the
    newest version when both are None); None if it did not exist yet."""
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise InvalidInput("version must be a positive integer", path="version")
    if at is not None and (not isinstance(at, datetime) or at.tzinfo is None):
        raise InvalidInput("at must be a timezone-aware datetime", path="at")
    found = yield from state_ops.history(
        ctx, StateRef.conversation(conversation_id, name), limit=1, version=version, at=at
    )
    return found[0] if found else None
