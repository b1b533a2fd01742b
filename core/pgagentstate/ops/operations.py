"""Operator operations: conversation health, listings, timelines, time travel, retention (gc), statistics,
export and erase of one user, and the checks of ``pgagentstate doctor``.

Like every operation these are generators run by either store::

    from pgagentstate.ops import operations
    report = store.run(operations.health(store.context, idle=3600))

They are not methods of the stores because applications rarely need them; the CLI and the timeline viewer
(:mod:`pgagentstate.ui`) call them this way, and so can an application's own admin endpoints.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from ..codec import check_id, check_text, decode_text
from ..crypto import MARKER
from ..errors import InvalidInput
from ..models import CONVERSATION_STATUSES, Conversation, Event, LedgerEntry, StateDoc, StateRef, Step
from ..sealing import ad, unseal, unseal_doc
from . import migrations as migration_ops
from . import snapshots as snapshot_ops
from . import state as state_ops
from .base import Call, Ctx, Op, Row, Stmt, Tx
from .conversations import check_status, conversation_from_row
from .events import event_from_row, list_stmt
from .ledger import entry_from_row
from .memory import memory_ad
from .workflow import step_from_row

__all__ = [
    "DEFAULT_IDLE",
    "GC_LOCK_NAME",
    "GC_TASKS",
    "HEALTH_CATEGORIES",
    "OPEN_STATUSES",
    "Change",
    "Check",
    "ConversationSummary",
    "GcReport",
    "Health",
    "PoolSettings",
    "RetentionPolicy",
    "ScratchItem",
    "SnapshotSummary",
    "StateVersion",
    "Stats",
    "StuckStep",
    "TableStats",
    "Timeline",
    "TimelineEntry",
    "diff",
    "doctor",
    "erase_user",
    "export_user",
    "gc",
    "gc_plan",
    "health",
    "health_of",
    "list_conversations",
    "message_text",
    "pool_checks",
    "read_archive",
    "state_at",
    "stats",
    "tenants",
    "timeline",
    "to_jsonable",
]

#: Statuses of a conversation that is still going on; one of these without activity for the idle time
#: counts as abandoned.
OPEN_STATUSES: tuple[str, ...] = ("active", "waiting_customer", "awaiting_approval")
#: Health categories: the statuses, with idle open conversations moved to ``abandoned``.
HEALTH_CATEGORIES: tuple[str, ...] = CONVERSATION_STATUSES
#: Default idle time after which an open conversation counts as abandoned (24 hours).
DEFAULT_IDLE = 24 * 3600.0
#: The name under which ``gc`` takes its advisory lock with ``store.advisory_lock`` (per tenant).
GC_LOCK_NAME = "gc"

_DAY = 86400.0


def _seconds(value: float | timedelta | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not seconds >= 0:  # also rejects NaN
        raise InvalidInput(f"{what} must be a non-negative duration", path=what)
    return seconds


def _check_health(value: str | None) -> str | None:
    if value is not None and value not in HEALTH_CATEGORIES:
        raise InvalidInput(f"unknown health category {value!r}; use one of {HEALTH_CATEGORIES}", path="health")
    return value


def _limit(value: int, what: str = "limit") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{what} must be a positive integer", path=what)
    return value


def health_of(conversation: Conversation, *, idle: float = DEFAULT_IDLE, now: datetime | None = None) -> str:
    """The health category of one conversation: its status, or ``abandoned`` when open and idle."""
    now = now or datetime.now(UTC)
    if conversation.status in OPEN_STATUSES and conversation.updated_at < now - timedelta(seconds=idle):
        return "abandoned"
    return conversation.status


# --- health ---------------------------------------------------------------------------------------------


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
    stuck: list[StuckStep] = field(default_factory=list)


def health(ctx: Ctx, *, idle: float | timedelta = DEFAULT_IDLE, stuck_limit: int = 20) -> Op[Health]:
    """Counts of conversations per health category, stuck and failed workflow steps, and the duplicate
    calls the idempotency ledger stopped."""
    idle_s = _seconds(idle, "idle")
    assert idle_s is not None
    conv_rows, steps, stuck_rows, dups, ledger = yield Tx(
        (
            Stmt("ops_health_conversations", {"idle": idle_s}, "all"),
            Stmt("ops_health_steps", {}, "one"),
            Stmt("ops_health_stuck_steps", {"limit": _limit(stuck_limit, "stuck_limit")}, "all"),
            Stmt("ops_health_duplicates", {}, "one"),
            Stmt("ops_health_ledger", {}, "one"),
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
        stuck=[StuckStep(*r) for r in stuck_rows],
    )


# --- listing --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """A conversation with its health: category, stuck and failed steps, side effects and duplicates."""

    conversation: Conversation
    health: str
    stuck_steps: int
    failed_steps: int
    calls: int
    duplicate_hits: int


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
                    "health": _check_health(health),
                    "stuck_only": bool(stuck_only),
                    "idle_over": _seconds(idle_over, "idle_over"),
                    "active_within": _seconds(active_within, "active_within"),
                    "id_prefix": id_prefix or None,
                    "idle": _seconds(idle, "idle"),
                    "limit": _limit(limit),
                    "offset": offset,
                },
                "all",
            ),
        )
    )
    return [ConversationSummary(conversation_from_row(ctx, r[:12]), r[12], r[13], r[14], r[15], r[16]) for r in rows[0]]


def tenants() -> Op[list[str]]:
    """Every tenant that has conversations (for ``gc --all-tenants``); with row-level security on, only the
    store's own tenant is visible."""
    (rows,) = yield Tx((Stmt("ops_tenants", {}, "all"),))
    return [r[0] for r in rows]


# --- timeline -------------------------------------------------------------------------------------------

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
        _limit(event_limit, "event_limit")
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
    idle_s = _seconds(idle, "idle")
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


# --- retention ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What ``gc`` removes. Every age is in days (fractions allowed); None leaves that kind of data alone.

    - ``expire_ttl``: scratchpad entries and memories whose TTL ran out.
    - ``abandon_idle_days``: mark open conversations without activity for that long ``abandoned``.
    - ``completed_days``: completed conversations without activity for that long are deleted, or moved to
      ``archived_conversations`` as one JSON document each when ``archive`` is set.
    - ``failed_days`` / ``abandoned_days``: the same for failed and abandoned conversations (a grace period
      to look at them first); ``archive`` applies to them too.
    - ``snapshot_days``: in conversations without a checkpoint for that long, keep only the newest
      checkpoint of each namespace (LangGraph history before it becomes unreachable by time travel).
    - ``ledger_days``: finished idempotency-ledger entries older than that (a retry after this would run
      the side effect again: keep them longer than any client retries).
    - ``archive_days``: purge archived conversations older than that.
    """

    expire_ttl: bool = True
    abandon_idle_days: float | None = None
    completed_days: float | None = None
    failed_days: float | None = None
    abandoned_days: float | None = None
    archive: bool = False
    snapshot_days: float | None = None
    ledger_days: float | None = None
    archive_days: float | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_days") and value is not None:
                _seconds(value, f.name)


#: gc tasks in the order they run, with what their counts mean.
GC_TASKS: dict[str, str] = {
    "abandon": "open conversations marked abandoned",
    "scratchpad": "expired scratchpad entries",
    "memory": "expired memories",
    "completed": "completed conversations",
    "failed": "failed conversations",
    "abandoned": "abandoned conversations",
    "snapshots": "old checkpoints",
    "ledger": "finished ledger entries",
    "archive": "archived conversations purged",
}


def _gc_tasks(policy: RetentionPolicy) -> list[tuple[str, str, dict[str, Any]]]:
    """(task, statement, params) of the enabled tasks; the count statement is the statement + ``_count``."""
    tasks: list[tuple[str, str, dict[str, Any]]] = []
    conv_stmt = "ops_gc_conversations_archive" if policy.archive else "ops_gc_conversations_delete"
    if policy.abandon_idle_days is not None:
        tasks.append(("abandon", "ops_gc_abandon", {"age": policy.abandon_idle_days * _DAY}))
    if policy.expire_ttl:
        tasks.append(("scratchpad", "ops_gc_scratch", {}))
        tasks.append(("memory", "ops_gc_memory", {}))
    for task, days in (
        ("completed", policy.completed_days),
        ("failed", policy.failed_days),
        ("abandoned", policy.abandoned_days),
    ):
        if days is not None:
            tasks.append((task, conv_stmt, {"status": task, "age": days * _DAY}))
    if policy.snapshot_days is not None:
        tasks.append(("snapshots", "ops_gc_snapshot", {"age": policy.snapshot_days * _DAY}))
    if policy.ledger_days is not None:
        tasks.append(("ledger", "ops_gc_ledger", {"age": policy.ledger_days * _DAY}))
    if policy.archive_days is not None:
        tasks.append(("archive", "ops_gc_archive_purge", {"age": policy.archive_days * _DAY}))
    return tasks


_COUNT_STMT = {
    "ops_gc_conversations_archive": "ops_gc_conversations_count",
    "ops_gc_conversations_delete": "ops_gc_conversations_count",
    "ops_gc_archive_purge": "ops_gc_archive_count",
}


@dataclass(frozen=True, slots=True)
class GcReport:
    """What ``gc`` found (``planned``, counted before it started) and did (``done``), per task."""

    tenant: str
    dry_run: bool
    planned: dict[str, int]
    done: dict[str, int]
    batches: int


GcProgress = Callable[[str, int, int], None]


def gc_plan(ctx: Ctx, policy: RetentionPolicy) -> Op[dict[str, int]]:
    """How many rows each enabled task would touch now (one snapshot; changes nothing)."""
    tasks = _gc_tasks(policy)
    if not tasks:
        return {}
    stmts = tuple(Stmt(_COUNT_STMT.get(stmt, stmt + "_count"), params, "one") for _, stmt, params in tasks)
    rows = yield Tx(stmts, snapshot=True)
    return {task: row[0] for (task, _, _), row in zip(tasks, rows, strict=True)}


def gc(
    ctx: Ctx,
    policy: RetentionPolicy,
    *,
    batch_size: int = 500,
    dry_run: bool = False,
    progress: GcProgress | None = None,
) -> Op[GcReport]:
    """Apply ``policy`` in batches of ``batch_size`` rows, one transaction per batch (a long collection
    never holds locks for long, and an interrupted one keeps what it finished). Rows locked by a running
    turn are skipped (collected next time). ``progress(task, done, planned)`` is called after each batch.

    Run it under ``store.advisory_lock(GC_LOCK_NAME)`` to keep collectors on several hosts from
    working side by side (they would be correct, just wasteful); the CLI does.
    """
    _limit(batch_size, "batch_size")
    planned = yield from gc_plan(ctx, policy)
    done = dict.fromkeys(planned, 0)
    if dry_run:
        return GcReport(ctx.tenant, True, planned, done, 0)
    batches = 0
    for task, stmt, params in _gc_tasks(policy):
        if progress is not None:
            yield Call(progress, (task, 0, planned[task]))
        if task == "snapshots":
            batches += yield from _gc_snapshots(ctx, params["age"], batch_size, planned, done, progress)
            continue
        fetch: Any = "one" if stmt.startswith("ops_gc_conversations") else "rowcount"
        while True:
            (result,) = yield Tx((Stmt(stmt, {**params, "limit": batch_size}, fetch),))
            n = int(result[0] if fetch == "one" else result)
            batches += 1
            done[task] += n
            if progress is not None:
                yield Call(progress, (task, done[task], max(planned[task], done[task])))
            if n < batch_size:
                break
    return GcReport(ctx.tenant, False, planned, done, batches)


def _gc_snapshots(
    ctx: Ctx, age: float, batch_size: int, planned: dict[str, int], done: dict[str, int], progress: GcProgress | None
) -> Op[int]:
    """Compact checkpoint chains conversation by conversation (keyset-paged by id: a pruned conversation
    may still qualify, keeping the checkpoints its delta channels are rebuilt from)."""
    after = ""
    batches = 0
    size = min(batch_size, 100)
    while True:
        (rows,) = yield Tx((Stmt("ops_gc_snapshot_candidates", {"age": age, "after": after, "limit": size}, "all"),))
        ids = [r[0] for r in rows]
        if not ids:
            break
        (before,) = yield Tx((Stmt("ops_snapshot_rows", {"conversation_ids": ids}, "one"),))
        yield from snapshot_ops.prune(ctx, ids, "keep_latest")
        (remaining,) = yield Tx((Stmt("ops_snapshot_rows", {"conversation_ids": ids}, "one"),))
        batches += 1
        done["snapshots"] += before[0] - remaining[0]
        if progress is not None:
            yield Call(progress, ("snapshots", done["snapshots"], max(planned["snapshots"], done["snapshots"])))
        after = ids[-1]
        if len(ids) < size:
            break
    return batches


# --- export and erase of one user -----------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value


def to_jsonable(value: Any) -> Any:
    """Any result of these operations as plain JSON values (datetimes as ISO 8601 text, bytes as base64)."""
    return _jsonable(value)


def export_user(ctx: Ctx, user_id: str) -> Op[dict[str, Any]]:
    """Everything stored about one user as one JSON-ready document, read from one snapshot: their
    conversations (``user_id``) with events, state versions, workflow steps, scratchpad, ledger entries and
    checkpoints (bytes as base64), their user-scope state documents, memories with their ``user_id``, and
    their archived conversations."""
    check_id(user_id, "user_id", ctx.limits)
    params = {"user_id": user_id}
    names = (
        "ops_user_conversations",
        "ops_user_events",
        "ops_user_state_versions",
        "ops_user_steps",
        "ops_user_scratch",
        "ops_user_ledger",
        "ops_user_memories",
        "ops_user_snapshots",
        "ops_user_snapshot_blobs",
        "ops_user_snapshot_chunks",
        "ops_user_snapshot_writes",
        "ops_user_archived",
    )
    convs, events, versions, steps, scratch, ledger, memories, snaps, blobs, chunks, writes, archived = yield Tx(
        tuple(Stmt(n, params, "all") for n in names), snapshot=True
    )
    by_id: dict[str, dict[str, Any]] = {}
    for row in convs:
        c = conversation_from_row(ctx, row)
        by_id[c.id] = {
            **_jsonable(c),
            "events": [],
            "state_versions": [],
            "steps": [],
            "scratchpad": [],
            "ledger": [],
            "snapshots": [],
            "snapshot_blobs": [],
            "snapshot_chunks": [],
            "snapshot_writes": [],
        }
    for row in events:
        ev = event_from_row(ctx, row)
        by_id[ev.conversation_id]["events"].append(_jsonable(ev))
    user_states: list[dict[str, Any]] = []
    for scope, app, subject, name, version, data, changed_at in versions:
        where = state_ops.doc_ad(ctx, StateRef(scope, app, subject, name))
        item = {
            "name": name,
            "version": version,
            "data": unseal_doc(ctx.cipher, data, where),
            "changed_at": changed_at.isoformat(),
        }
        if scope == "conversation":
            by_id[subject]["state_versions"].append(item)
        else:
            user_states.append({"app": app, **item})
    for row in steps:
        step = step_from_row(ctx, row)
        by_id[step.conversation_id]["steps"].append(_jsonable(step))
    for cid, key, value, expires_at, updated_at in scratch:
        by_id[cid]["scratchpad"].append(
            {
                "key": key,
                "value": unseal(ctx.cipher, value, ad(ctx.tenant, "scratch", cid, key)),
                "expires_at": _jsonable(expires_at),
                "updated_at": updated_at.isoformat(),
            }
        )
    archived_ledger: list[dict[str, Any]] = []
    for row in ledger:
        entry = entry_from_row(ctx, row[:14])
        item = _jsonable(entry)
        where = ad(ctx.tenant, "ledger", entry.key, "request")
        item["request"] = None if row[14] is None else unseal(ctx.cipher, row[14], where)
        owner = by_id.get(entry.conversation_id or "")
        # Entries of archived conversations: the archive holds their results, this also their requests.
        (owner["ledger"] if owner is not None else archived_ledger).append(item)
    for cid, ns, sid, parent, run_id, type_, data, metadata, versions_, created_at, forked in snaps:
        by_id[cid]["snapshots"].append(
            {
                "namespace": ns,
                "snapshot_id": sid,
                "parent_id": parent,
                "run_id": run_id,
                "type": type_,
                "data_base64": data,
                "metadata": decode_text(metadata),
                "channel_versions": decode_text(versions_),
                "created_at": created_at.isoformat(),
                "forked": forked,
            }
        )
    for cid, ns, channel, version, type_, chunk_list, base in blobs:
        # ``base``: the version whose chunk list this blob extends (None: ``chunks`` is the full list).
        by_id[cid]["snapshot_blobs"].append(
            {
                "namespace": ns,
                "channel": channel,
                "version": version,
                "type": type_,
                "chunks": list(chunk_list),
                "base": base,
            }
        )
    for cid, hash_, data in chunks:
        by_id[cid]["snapshot_chunks"].append({"hash": hash_, "data_base64": data})
    for cid, ns, sid, task_id, idx, channel, type_, data, task_path in writes:
        by_id[cid]["snapshot_writes"].append(
            {
                "namespace": ns,
                "snapshot_id": sid,
                "task_id": task_id,
                "idx": idx,
                "channel": channel,
                "type": type_,
                "data_base64": data,
                "task_path": task_path,
            }
        )
    return {
        "format": "pgagentstate.export.v1",
        "tenant": ctx.tenant,
        "user_id": user_id,
        "exported_at": datetime.now(UTC).isoformat(),
        "conversations": list(by_id.values()),
        "user_state_versions": user_states,
        "memories": [
            {
                "namespace": list(ns),
                "key": key,
                "value": unseal(ctx.cipher, value, memory_ad(ctx, ns, key)),
                "user_id": uid,
                "version": version,
                "created_at": created.isoformat(),
                "updated_at": updated.isoformat(),
                "expires_at": _jsonable(expires),
            }
            for ns, key, value, uid, version, created, updated, expires in memories
        ],
        "archived_conversations": [
            {"id": cid, "archived_at": at.isoformat(), "document": read_archive(ctx, json.loads(doc))}
            for cid, at, doc in archived
        ],
        "archived_ledger": archived_ledger,
    }


def read_archive(ctx: Ctx, document: Any) -> Any:
    """An archived conversation (``archived_conversations.document``) with its payloads, state data,
    results and metadata turned back into the values the application wrote (the archive keeps them as
    stored: escaped, or encrypted when the store encrypts)."""
    if not isinstance(document, dict):
        return document
    out = dict(document)
    found = out.get("conversation")
    conv: dict[str, Any] = found if isinstance(found, dict) else {}
    cid = str(conv.get("id", ""))

    def value(stored: Any, where: str) -> Any:
        return None if stored is None else unseal(ctx.cipher, json.dumps(stored, ensure_ascii=False), where)

    def each(section: str, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        items = out.get(section)
        if isinstance(items, list):
            out[section] = [fn(item) if isinstance(item, dict) else item for item in items]

    each("events", lambda e: {**e, "payload": value(e.get("payload"), ad(ctx.tenant, "event", cid, e["event_id"]))})
    each(
        "state_versions",
        lambda v: {
            **v,
            "data": unseal_doc(
                ctx.cipher,
                json.dumps(v.get("data") or {}, ensure_ascii=False),
                state_ops.doc_ad(ctx, StateRef.conversation(cid, v["name"])),
            ),
        },
    )
    each(
        "steps",
        lambda s: {**s, "result": value(s.get("result"), ad(ctx.tenant, "step", cid, s["workflow"], s["step"]))},
    )
    each("ledger", lambda k: {**k, "result": value(k.get("result"), ad(ctx.tenant, "ledger", k["key"], "result"))})
    if conv:
        meta = unseal_doc(
            ctx.cipher, json.dumps(conv.get("metadata") or {}, ensure_ascii=False), ad(ctx.tenant, "metadata", cid)
        )
        out["conversation"] = {**conv, "metadata": meta}
    return out


_ERASE_KEYS = ("conversations", "events", "state_versions", "memories", "ledger_entries", "archived_conversations")


def erase_user(ctx: Ctx, user_id: str, *, dry_run: bool = False) -> Op[dict[str, int]]:
    """Delete everything :func:`export_user` would export, in one transaction; returns what went (with
    ``dry_run``, what would go). The user's conversations are locked first, so a turn in flight either
    commits before the erase or fails after it (NotFound); none can write into an erased conversation."""
    check_id(user_id, "user_id", ctx.limits)
    params = {"user_id": user_id}
    if dry_run:
        (row,) = yield Tx((Stmt("ops_erase_counts", params, "one"),), snapshot=True)
        return dict(zip(_ERASE_KEYS, row, strict=True))
    locked, counts = yield Tx(
        (Stmt("ops_erase_lock", params, "all"), Stmt("ops_erase_counts", params, "one")), hold=True
    )
    ids = {"conversation_ids": [r[0] for r in locked]}
    yield Tx(
        (
            Stmt("ops_erase_ledger", {**params, **ids}, "none"),
            Stmt("ops_erase_conversation_states", {**params, **ids}, "none"),
            Stmt("ops_erase_user_states", params, "none"),
            Stmt("ops_erase_memories", params, "none"),
            Stmt("ops_erase_archived", params, "none"),
            Stmt("ops_erase_tombstones", {**params, **ids}, "none"),
            Stmt("ops_erase_conversations", {**params, **ids}, "none"),
        )
    )
    return dict(zip(_ERASE_KEYS, counts, strict=True))


# --- statistics -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableStats:
    """Server counters for one table (all tenants) since the statistics were last reset."""

    table: str
    estimated_rows: int
    total_bytes: int
    live_rows: int
    dead_rows: int
    inserts: int
    updates: int
    hot_updates: int
    deletes: int
    seq_scans: int
    index_scans: int
    last_vacuum: datetime | None


@dataclass(frozen=True, slots=True)
class Stats:
    """Rows of one tenant, the retries and duplicates the store absorbed, and per-table server counters.

    ``step_retries`` / ``call_retries`` are attempts beyond the first (a workflow step or side effect that
    was started again after a failure or a lost lease); ``duplicate_calls_stopped`` are replays of a
    recorded side effect. ``rollback_ratio`` is the database-wide share of transactions rolled back
    (failed compare-and-swap, lock timeouts, errors): a proxy for conflicts, shared with every other user
    of the database.
    """

    tenant: str
    conversations: int
    events: int
    state_versions: int
    steps: int
    step_retries: int
    calls: int
    call_retries: int
    duplicate_calls_stopped: int
    memories: int
    snapshots: int
    archived_conversations: int
    commits: int
    rollbacks: int
    rollback_ratio: float
    deadlocks: int
    stats_reset: datetime | None
    tables: list[TableStats]


def stats(ctx: Ctx, schema: str) -> Op[Stats]:
    """Row counts of the tenant, retries and duplicates, and the server's table and transaction counters."""
    tenant_row, tables, db = yield Tx(
        (
            Stmt("ops_stats_tenant", {}, "one"),
            Stmt("ops_stats_tables", {"schema_name": schema}, "all"),
            Stmt("ops_stats_database", {}, "one"),
        ),
        snapshot=True,
    )
    commits, rollbacks, deadlocks, _conflicts, reset = db or (0, 0, 0, 0, None)
    total = commits + rollbacks
    (
        conversations,
        events,
        versions,
        steps,
        step_retries,
        calls,
        call_retries,
        duplicates,
        memories,
        snapshots,
        archived,
    ) = tenant_row
    return Stats(
        tenant=ctx.tenant,
        conversations=conversations,
        events=events,
        state_versions=versions,
        steps=steps,
        step_retries=step_retries,
        calls=calls,
        call_retries=call_retries,
        duplicate_calls_stopped=duplicates,
        memories=memories,
        snapshots=snapshots,
        archived_conversations=archived,
        commits=commits,
        rollbacks=rollbacks,
        rollback_ratio=(rollbacks / total) if total else 0.0,
        deadlocks=deadlocks,
        stats_reset=reset,
        tables=[TableStats(*r) for r in tables],
    )


# --- doctor ---------------------------------------------------------------------------------------------

CheckStatus = Literal["ok", "info", "warn", "fail"]

#: Oldest PostgreSQL the schema is tested on (hashtextextended, jsonb subscripts, starts_with need >= 11/13).
MIN_SERVER_VERSION = 130000


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: CheckStatus
    detail: str


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """How the caller's store connects, for the pool and PgBouncer checks."""

    min_size: int = 1
    max_size: int = 10
    pgbouncer: bool = False
    tenant_isolation: bool = False
    dsn_port: int | None = None
    processes: int = 1


def doctor(ctx: Ctx, schema: str, pool: PoolSettings | None = None) -> Op[list[Check]]:
    """Connectivity, server version, schema version and pending migrations, row-level security,
    encryption, pool sizing and PgBouncer compatibility, as a list of checks."""
    pool = pool or PoolSettings()
    checks: list[Check] = []
    (server,) = yield Tx((Stmt("ops_doctor_server", {}, "one"),))
    (
        version,
        version_num,
        database,
        user,
        superuser,
        bypassrls,
        max_conn,
        in_use,
        stmt_timeout,
        idle_tx_timeout,
        lock_timeout,
        isolation,
        ssl,
        server_port,
        _now,
    ) = server
    checks.append(Check("connection", "ok", f"connected to database {database!r} as {user!r}"))
    checks.append(
        Check(
            "server version",
            "ok" if version_num >= MIN_SERVER_VERSION else "fail",
            f"PostgreSQL {version}" + ("" if version_num >= MIN_SERVER_VERSION else " (13 or newer is required)"),
        )
    )
    applied, pending = yield from migration_ops.status(schema)
    known = {m.version for m in migration_ops.migrations()}
    newer = [v for v in applied if v not in known]
    if not applied:
        checks.append(Check("schema", "fail", f"schema {schema!r} is not set up: run `pgagentstate migrate`"))
    elif newer:
        checks.append(
            Check("schema", "fail", f"schema {schema!r} has migrations {newer} this library does not know: upgrade it")
        )
    elif pending:
        checks.append(
            Check("schema", "warn", f"schema {schema!r} at {applied[-1]}, pending {pending}: `pgagentstate migrate`")
        )
    else:
        checks.append(Check("schema", "ok", f"schema {schema!r} at version {applied[-1]}, nothing pending"))
    if applied:
        (rls_rows,) = yield Tx((Stmt("ops_doctor_rls", {"schema_name": schema}, "all"),))
        checks.extend(_rls_checks(rls_rows, superuser=bool(superuser), bypassrls=bool(bypassrls), pool=pool))
    sample = (0, 0)
    if applied:
        (sample,) = yield Tx((Stmt("ops_doctor_encryption", {"marker": MARKER, "limit": 500}, "one"),))
    checks.append(_encryption_check(ctx, ssl, encrypted=sample[0], sampled=sample[1]))
    checks.extend(pool_checks(pool, max_conn=max_conn, in_use=in_use, server_port=server_port))
    for name, value in (("statement_timeout", stmt_timeout), ("lock_timeout", lock_timeout)):
        checks.append(Check(name, "info", f"{name} = {value}"))
    checks.append(
        Check(
            "idle_in_transaction_session_timeout",
            "info" if idle_tx_timeout in ("0", "0ms") else "warn",
            f"= {idle_tx_timeout}"
            + (
                ""
                if idle_tx_timeout in ("0", "0ms")
                else "; conversation_lock and gc hold a transaction open while they run: keep this above their duration"
            ),
        )
    )
    if isolation != "read committed":
        checks.append(
            Check(
                "isolation",
                "warn",
                f"default_transaction_isolation = {isolation}; the store expects "
                "read committed (it raises the level itself where needed)",
            )
        )
    return checks


def _rls_checks(rows: Sequence[Row], *, superuser: bool, bypassrls: bool, pool: PoolSettings) -> list[Check]:
    if not rows:
        return [Check("row-level security", "fail", "no tables found")]
    off = [r[0] for r in rows if not r[1] or not r[5]]
    if off:
        return [Check("row-level security", "fail", f"RLS or its policy is missing on {', '.join(off)}")]
    owner = any(r[4] for r in rows)
    forced = all(r[2] for r in rows)
    binding = not superuser and not bypassrls and (forced or not owner)
    detail = f"enabled with a tenant policy on {len(rows)} tables"
    out = [Check("row-level security", "ok", detail)]
    if not binding:
        why = "a superuser" if superuser else "BYPASSRLS" if bypassrls else "the tables' owner"
        out.append(
            Check(
                "tenant isolation",
                "warn" if pool.tenant_isolation else "info",
                f"this role is {why}, so RLS does not bind it: tenants are separated by the store's tenant filter "
                "only. For isolation enforced by the database, run the application as a non-owner role with "
                "tenant_isolation=True (see docs/operations.md)",
            )
        )
    elif not pool.tenant_isolation:
        out.append(
            Check(
                "tenant isolation",
                "warn",
                "RLS binds this role but tenant_isolation is off: the store does not set pgagentstate.tenant, so "
                "every query sees no rows. Pass tenant_isolation=True",
            )
        )
    else:
        out.append(Check("tenant isolation", "ok", "RLS binds this role and the store sets the tenant"))
    return out


def _encryption_check(ctx: Ctx, ssl: Any, *, encrypted: int, sampled: int) -> Check:
    if ctx.cipher is not None:
        at_rest = "this store encrypts at rest" + (
            " (required)" if ctx.cipher.required else " (plaintext rows accepted)"
        )
    elif _has_module("cryptography"):
        at_rest = "encryption at rest is available but off for this store (set PGAGENTSTATE_ENCRYPTION_KEYS)"
    else:
        at_rest = "encryption at rest is off (install 'cryptography' and set PGAGENTSTATE_ENCRYPTION_KEYS)"
    if sampled:
        at_rest += f"; {encrypted} of {sampled} sampled event payloads are encrypted"
    in_transit = "TLS on this connection" if ssl else "this connection is not TLS-encrypted"
    mixed = sampled and 0 < encrypted < sampled
    status: CheckStatus = "warn" if mixed or (ctx.cipher is None and encrypted) else "info"
    if ctx.cipher is None and encrypted:
        at_rest += " but this store has no keys to read them"
    elif mixed:
        at_rest += ": run `pgagentstate rotate-keys` to encrypt the rest"
    return Check("encryption", status, f"{at_rest}; {in_transit}")


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def pool_checks(pool: PoolSettings, *, max_conn: int, in_use: int, server_port: int | None) -> list[Check]:
    """Pool sizing against the server's ``max_connections``, and whether a proxy (PgBouncer) sits between
    the DSN's port and the server's port without ``pgbouncer=True``."""
    out: list[Check] = []
    budget = pool.max_size * pool.processes
    status: CheckStatus = "ok" if budget + in_use <= max_conn * 0.8 else "warn"
    out.append(
        Check(
            "pool",
            status,
            f"max_size={pool.max_size} x {pool.processes} process(es) = {budget} connections; server has "
            f"{in_use} of max_connections={max_conn} in use"
            + ("" if status == "ok" else "; lower max_size or put PgBouncer (transaction mode) in front"),
        )
    )
    proxied = pool.dsn_port is not None and server_port is not None and pool.dsn_port != server_port
    if proxied and not pool.pgbouncer:
        out.append(
            Check(
                "pgbouncer",
                "warn",
                f"the DSN's port {pool.dsn_port} is not the server's {server_port}: a proxy such as PgBouncer is "
                "in between. In transaction mode pass pgbouncer=True (--pgbouncer) so no server-side prepared "
                "statements are used",
            )
        )
    else:
        out.append(
            Check(
                "pgbouncer",
                "ok" if pool.pgbouncer or not proxied else "info",
                ("pgbouncer=True: no server-side prepared statements; " if pool.pgbouncer else "direct connection; ")
                + "the store keeps no session state (tenant via SET LOCAL, transaction-level advisory locks), so "
                "PgBouncer transaction pooling is supported",
            )
        )
    return out
