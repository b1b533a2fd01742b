"""One conversation's timeline (messages, state versions with diffs, workflow steps, side effects,
scratchpad, checkpoints, merged in time order) and time travel on its state (``show``, ``state --at``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from ...codec import check_id
from ...errors import InvalidInput
from ...models import Conversation, Event, LedgerEntry, StateDoc, StateRef, Step
from ...sealing import ad, unseal, unseal_doc
from .. import state as state_ops
from ..base import Ctx, Op, Stmt, Tx
from ..conversations import conversation_from_row
from ..events import event_from_row, list_stmt
from ..ledger import entry_from_row
from ..workflow import step_from_row
from .args import positive, seconds
from .health import DEFAULT_IDLE, health_of

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
    """One stored version of a conversation's state document, with what changed from the version before."""

    name: str
    version: int
    data: dict[str, Any]
    changed_at: datetime
    changes: list[Change]


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


TimelineKind = Literal["message", "event", "state", "step", "call"]


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One line of a conversation's merged timeline, in time order."""

    at: datetime
    kind: TimelineKind
    title: str
    text: str = ""
    role: str = ""


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


def message_text(payload: Any) -> str:
    """The human-readable text of an event payload, across the shapes the frameworks store: ``text`` or
    ``content`` as a string, a list of parts with ``text``, ADK's ``content.parts``; else compact JSON."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, Mapping):
        for key in ("text", "content", "message", "output"):
            value = payload.get(key)
            if isinstance(value, str):
                return value
            if isinstance(value, Mapping) and "parts" in value:
                return message_text(value["parts"])
            if isinstance(value, list):
                joined = message_text(value)
                if joined:
                    return joined
        if isinstance(payload.get("parts"), list):
            return message_text(payload["parts"])
        if payload.get("type") == "function_call" and "name" in payload:
            return f"{payload['name']}({payload.get('arguments', '')})"
    if isinstance(payload, list):
        texts = [message_text(p) for p in payload]
        if all(isinstance(p, Mapping) and ("text" in p or "parts" in p) for p in payload) or all(texts):
            return " ".join(t for t in texts if t)
    return _compact(payload)


def _compact(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


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


def _entries(
    events: Sequence[Event], versions: Sequence[StateVersion], steps: Sequence[Step], ledger: Sequence[LedgerEntry]
) -> list[TimelineEntry]:
    out: list[TimelineEntry] = []
    for ev in events:
        kind: TimelineKind = "message" if ev.kind == "message" else "event"
        out.append(TimelineEntry(ev.created_at, kind, f"#{ev.seq} {_role(ev)}", message_text(ev.payload), _role(ev)))
    for v in versions:
        out.append(TimelineEntry(v.changed_at, "state", f"state {v.name!r} v{v.version}", _describe_changes(v.changes)))
    for s in steps:
        name = f"{s.workflow}/{s.step}"
        if s.started_at:
            out.append(TimelineEntry(s.started_at, "step", f"step {name} started", f"attempts: {s.attempts}"))
        if s.status == "completed" and s.completed_at:
            result = "" if s.result is None else _compact(s.result)
            out.append(TimelineEntry(s.completed_at, "step", f"step {name} completed", result))
        elif s.status != "in_progress" or not s.started_at:
            out.append(TimelineEntry(s.updated_at, "step", f"step {name} {s.status}", s.last_error or ""))
    for k in ledger:
        api = k.api or "external"
        out.append(TimelineEntry(k.created_at, "call", f"call {api} [{k.key}]", f"attempts: {k.attempts}"))
        if k.status == "succeeded" and k.completed_at:
            text = _compact(k.result)
            if k.duplicate_hits:
                text += f" (duplicates stopped: {k.duplicate_hits})"
            out.append(TimelineEntry(k.completed_at, "call", f"call {k.api or 'external'} succeeded", text))
        elif k.status == "failed":
            out.append(TimelineEntry(k.updated_at, "call", f"call {k.api or 'external'} failed", k.error or ""))
    out.sort(key=lambda e: e.at)
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
    conv, events, versions, steps, ledger, scratch, snaps = yield Tx(
        (
            Stmt("conversation_get", {"id": conversation_id}, "one"),
            list_stmt(conversation_id, limit=event_limit),
            Stmt("ops_state_versions", key, "all"),
            Stmt("step_list", {**key, "workflow": None, "step": None}, "all"),
            Stmt("ledger_list", key, "all"),
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
    event_list = [event_from_row(ctx, r) for r in events]
    step_list = [step_from_row(ctx, r) for r in steps]
    ledger_list = [entry_from_row(ctx, r) for r in ledger]
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
        entries=_entries(event_list, state_versions, step_list, ledger_list),
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
