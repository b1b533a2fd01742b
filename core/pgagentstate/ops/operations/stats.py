"""Statistics (``pgagentstate stats``): rows of one tenant, retries and duplicates absorbed, and the
server's per-table and transaction counters."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..base import Ctx, Op, Stmt, Tx


@dataclass(frozen=True, slots=True)
class TableStats:
    """Server counters for one table (all tenants) since the statistics were last reset."""

    table: str
    estimated_rows: int  # Postgres's estimate from the last (auto)analyze; -1 before the first one
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
