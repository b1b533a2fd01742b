"""Retention (``pgagentstate gc``): expired TTLs, abandoned, finished and archived conversations, old
checkpoints and ledger entries, removed in batches under a policy."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import snapshot_threads
from ..base import Call, Ctx, Op, Stmt, Tx
from .args import DAY, positive, seconds

#: The name under which ``gc`` takes its advisory lock with ``store.advisory_lock`` (per tenant).
GC_LOCK_NAME = "gc"


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
    - ``inbox_days``: answered (or given up) durable-inbox messages finished longer ago than that (a
      redelivery of one after this would be accepted as a new message: keep them longer than the channel
      retries).
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
    inbox_days: float | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_days") and value is not None:
                seconds(value, f.name)


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
    "inbox": "finished inbox messages",
}


def _gc_tasks(policy: RetentionPolicy) -> list[tuple[str, str, dict[str, Any]]]:
    """(task, statement, params) of the enabled tasks; the count statement is the statement + ``_count``."""
    tasks: list[tuple[str, str, dict[str, Any]]] = []
    conv_stmt = "ops_gc_conversations_archive" if policy.archive else "ops_gc_conversations_delete"
    if policy.abandon_idle_days is not None:
        tasks.append(("abandon", "ops_gc_abandon", {"age": policy.abandon_idle_days * DAY}))
    if policy.expire_ttl:
        tasks.append(("scratchpad", "ops_gc_scratch", {}))
        tasks.append(("memory", "ops_gc_memory", {}))
    for task, days in (
        ("completed", policy.completed_days),
        ("failed", policy.failed_days),
        ("abandoned", policy.abandoned_days),
    ):
        if days is not None:
            tasks.append((task, conv_stmt, {"status": task, "age": days * DAY}))
    if policy.snapshot_days is not None:
        tasks.append(("snapshots", "ops_gc_snapshot", {"age": policy.snapshot_days * DAY}))
    if policy.ledger_days is not None:
        tasks.append(("ledger", "ops_gc_ledger", {"age": policy.ledger_days * DAY}))
    if policy.archive_days is not None:
        tasks.append(("archive", "ops_gc_archive_purge", {"age": policy.archive_days * DAY}))
    if policy.inbox_days is not None:
        tasks.append(("inbox", "ops_gc_inbox", {"age": policy.inbox_days * DAY}))
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
    positive(batch_size, "batch_size")
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
        yield from snapshot_threads.prune(ctx, ids, "keep_latest")
        (remaining,) = yield Tx((Stmt("ops_snapshot_rows", {"conversation_ids": ids}, "one"),))
        batches += 1
        done["snapshots"] += before[0] - remaining[0]
        if progress is not None:
            yield Call(progress, ("snapshots", done["snapshots"], max(planned["snapshots"], done["snapshots"])))
        after = ids[-1]
        if len(ids) < size:
            break
    return batches
