"""``pgagentstate health``: conversations per health category, stuck steps, duplicate calls stopped."""

from __future__ import annotations

import argparse
from typing import Any

from ...ops import operations
from ..term import ago, duration_text, heading, table
from .base import Add, emit, idle_option, open_store


def cmd_health(args: argparse.Namespace) -> int:
    if args.series:
        return cmd_health_series(args)
    with open_store(args) as store:
        h = store.run(operations.health(store.context, idle=args.idle, stuck_limit=args.stuck_limit))

    def render() -> str:
        idle = f"no activity for {duration_text(h.idle_seconds)}"
        rows: list[tuple[str, Any]] = [(k, v) for k, v in h.conversations.items()]
        rows.append(("total", h.total))
        out = [
            heading(f"conversation health (tenant {h.tenant})"),
            table(["conversations", "count"], rows),
            f"(abandoned = open and {idle})",
            "",
            table(
                ["workflow steps / side effects", "count"],
                [
                    ("stuck steps (in progress past lease)", h.stuck_steps),
                    ("steps running", h.running_steps),
                    ("steps failed", h.failed_steps),
                    ("steps awaiting approval", h.steps_awaiting_approval),
                    ("duplicate calls stopped by the ledger", h.duplicate_calls_stopped),
                    ("side effects recorded", h.ledger_entries),
                    ("side effects failed", h.ledger_failed),
                    ("side-effect claims abandoned", h.ledger_stale_claims),
                ],
            ),
            "",
            table(
                ["inbox (messages accepted, not answered yet)", "count"],
                [
                    ("queue depth (waiting + running)", h.inbox.depth),
                    ("waiting", h.inbox.waiting),
                    ("running", h.inbox.running),
                    (
                        "oldest unanswered message",
                        "-" if h.inbox.oldest_seconds is None else duration_text(h.inbox.oldest_seconds),
                    ),
                    ("conversations with messages queued", h.inbox.conversations),
                    ("turns whose worker vanished (lease expired)", h.inbox.stale_leases),
                    ("turns recovered by another worker", h.inbox.recoveries),
                    ("messages given up on (failed)", h.inbox.failed),
                ],
            ),
        ]
        if h.stuck:
            out.append(heading("stuck steps"))
            out.append(
                table(
                    ["conversation", "workflow", "step", "attempts", "lease expired", "last error"],
                    [
                        (s.conversation_id, s.workflow, s.step, s.attempts, ago(s.lease_expires_at), s.last_error or "")
                        for s in h.stuck
                    ],
                )
            )
        return "\n".join(out)

    emit(args, h, render)
    if args.check and (h.stuck_steps or h.ledger_stale_claims or h.inbox.stale_leases):
        return 1
    return 0


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.0f}%"


def _secs(value: float | None) -> str:
    return "-" if value is None else duration_text(value)


def cmd_health_series(args: argparse.Namespace) -> int:
    """``health --series hour|day``: one row per hour or day, the conversations that started in it."""
    with open_store(args) as store:
        s = store.run(
            operations.health_series(
                store.context, every=args.series, buckets=args.buckets, idle=args.idle, app=args.app,
                framework=args.framework,
            )
        )

    def render() -> str:
        fmt = "%Y-%m-%d %H:%M" if s.every_seconds < 86400 else "%Y-%m-%d"
        headers = ["started (UTC)", "started", "completed", "abandoned", "waiting", "stuck", "p50", "p90", "p99",
                   "dups stopped"]

        def row(label: str, p: operations.HealthPoint) -> tuple[Any, ...]:
            q = p.completion_seconds
            return (label, p.started, _pct(p.completion_rate), _pct(p.abandonment_rate),
                    _pct(p.waiting_customer_rate), _pct(p.stuck_rate), _secs(q["0.5"]), _secs(q["0.9"]),
                    _secs(q["0.99"]), p.duplicates_stopped)

        rows = [row(b.strftime(fmt), p) for b, p in zip(s.buckets, s.total, strict=True)]
        rows.append(row("whole window", s.window))
        out = [
            heading(f"conversation health per {'day' if s.every_seconds >= 86400 else 'hour'} (tenant {s.tenant})"),
            table(headers, rows),
            f"(each conversation counted in the {'day' if s.every_seconds >= 86400 else 'hour'} it started, under "
            f"its health now; abandoned = open and no activity for {duration_text(s.idle_seconds)}; "
            "p50/p90/p99 = time to completion)",
        ]
        if len(s.groups) > 1:
            out.append(heading("per app and framework (whole window)"))
            out.append(table(["app", "framework", *headers[1:]],
                             [(g.app or "-", g.framework or "-", *row("", g.window)[1:]) for g in s.groups]))
        return "\n".join(out)

    emit(args, s, render)
    return 0


def register(add: Add) -> None:
    p = add("health", cmd_health, "conversation health: counts per status, abandoned, stuck steps, duplicates")
    idle_option(p)
    p.add_argument("--stuck-limit", type=int, default=20, help="stuck steps to list (default 20)")
    p.add_argument("--check", action="store_true", help="exit 1 when a step, side-effect claim or inbox turn is stuck")
    p.add_argument("--series", choices=["hour", "day"], help="over time: one row per hour (24) or day (30)")
    p.add_argument("--buckets", type=int, default=None, help="with --series: how many hours or days")
    p.add_argument("--app", default=None, help="with --series: only this app")
    p.add_argument("--framework", default=None, help="with --series: only this framework")
