"""``pgagentstate stats``: row counts, retries, duplicates, table sizes and server counters."""

from __future__ import annotations

import argparse

from ...ops import operations
from ..term import clock, heading, key_values, table
from .base import Add, emit, open_store


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def cmd_stats(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        s = store.run(operations.stats(store.context, args.schema))

    def render() -> str:
        tenant = table(
            ["tenant " + s.tenant, "count"],
            [
                ("conversations", s.conversations),
                ("events", s.events),
                ("state versions", s.state_versions),
                ("workflow steps", s.steps),
                ("step retries (attempts beyond the first)", s.step_retries),
                ("side effects (ledger)", s.calls),
                ("side-effect retries", s.call_retries),
                ("duplicate calls stopped", s.duplicate_calls_stopped),
                ("memories", s.memories),
                ("checkpoints", s.snapshots),
                ("archived conversations", s.archived_conversations),
            ],
        )
        db = key_values(
            [
                ("transactions", f"{s.commits} committed, {s.rollbacks} rolled back ({s.rollback_ratio:.2%})"),
                ("deadlocks", s.deadlocks),
                ("counters since", clock(s.stats_reset) if s.stats_reset else "server start"),
            ]
        )
        tables = table(
            [
                "table (all tenants)",
                "rows~",
                "size",
                "inserts",
                "updates",
                "hot %",
                "deletes",
                "dead",
                "seq scans",
                "idx scans",
            ],
            [
                (
                    t.table,
                    # Postgres estimates rows when it (auto)analyzes a table; before that it has no
                    # estimate (-1), which is not 0. The tenant's counts above are exact.
                    t.estimated_rows if t.estimated_rows >= 0 else "?",
                    _size(t.total_bytes),
                    t.inserts,
                    t.updates,
                    f"{(t.hot_updates / t.updates):.0%}" if t.updates else "-",
                    t.deletes,
                    t.dead_rows,
                    t.seq_scans,
                    t.index_scans,
                )
                for t in s.tables
            ],
        )
        return "\n".join([heading("statistics"), tenant, "", db, "", tables])

    emit(args, s, render)
    return 0


def register(add: Add) -> None:
    add("stats", cmd_stats, "row counts, retries, duplicates, table sizes and server counters")
