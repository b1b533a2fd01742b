"""``pgagentstate health``: conversations per health category, stuck steps, duplicate calls stopped."""

from __future__ import annotations

import argparse
from typing import Any

from ...ops import operations
from ..term import ago, duration_text, heading, table
from .base import Add, emit, idle_option, open_store


def cmd_health(args: argparse.Namespace) -> int:
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


def register(add: Add) -> None:
    p = add("health", cmd_health, "conversation health: counts per status, abandoned, stuck steps, duplicates")
    idle_option(p)
    p.add_argument("--stuck-limit", type=int, default=20, help="stuck steps to list (default 20)")
    p.add_argument("--check", action="store_true", help="exit 1 when a step, side-effect claim or inbox turn is stuck")
