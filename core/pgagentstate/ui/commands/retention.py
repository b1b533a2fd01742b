"""``pgagentstate gc``: retention in batches, under a per-tenant advisory lock, safe from cron on several hosts."""

from __future__ import annotations

import argparse
from typing import Any

from ...errors import ConflictError
from ...ops import operations
from ...ops.operations import GC_LOCK_NAME, GC_TASKS, RetentionPolicy
from ..term import Progress, heading, table
from .base import Add, days, emit, open_store


def cmd_gc(args: argparse.Namespace) -> int:
    policy = RetentionPolicy(
        expire_ttl=not args.no_ttl,
        abandon_idle_days=args.abandon_idle_days,
        completed_days=args.completed_days,
        failed_days=args.failed_days,
        abandoned_days=args.abandoned_days,
        archive=args.archive,
        snapshot_days=args.snapshot_days,
        ledger_days=args.ledger_days,
        archive_days=args.archive_days,
        inbox_days=args.inbox_days,
    )
    reports: list[dict[str, Any]] = []
    exit_code = 0
    with open_store(args, max_size=3) as store:
        tenants = store.run(operations.tenants()) if args.all_tenants else [store.tenant]
        for tenant in tenants:
            tstore = store.with_tenant(tenant)
            progress = None if args.json or args.dry_run else Progress(labels=GC_TASKS)
            if args.dry_run:
                report = tstore.run(operations.gc(tstore.context, policy, dry_run=True))
                reports.append({"tenant": tenant, "locked": False, "report": report})
                continue
            acquired = False
            try:
                # A transaction-level advisory lock held on its own connection for the whole run: a second
                # gc for this tenant (another host's cron) gives up at once instead of working side by side.
                with tstore.advisory_lock(GC_LOCK_NAME, timeout=max(args.wait, 0.001)):
                    acquired = True
                    report = tstore.run(
                        operations.gc(tstore.context, policy, batch_size=args.batch_size, progress=progress)
                    )
            except ConflictError:
                if acquired:
                    raise
                reports.append({"tenant": tenant, "locked": True, "report": None})
                exit_code = exit_code or (3 if args.fail_if_locked else 0)
                continue
            finally:
                if progress is not None:
                    progress.finish()
            reports.append({"tenant": tenant, "locked": False, "report": report})

    def render() -> str:
        out = []
        for item in reports:
            if item["locked"]:
                out.append(f"tenant {item['tenant']}: another gc holds the lock; nothing done")
                continue
            r: operations.GcReport = item["report"]
            title = f"gc {'(dry run) ' if r.dry_run else ''}tenant {r.tenant}"
            rows = [(GC_TASKS[task], r.planned[task], "-" if r.dry_run else r.done[task]) for task in r.planned]
            out.append(heading(title))
            out.append(table(["what", "found", "done"], rows) if rows else "nothing to do (no retention set)")
            if "abandon" in r.planned and "abandoned" in r.planned:
                out.append("(conversations marked abandoned now are removed once they have been abandoned for "
                           "--abandoned-days: the mark starts that period)")
        return "\n".join(out) if out else "no tenants"

    emit(args, reports, render)
    return exit_code


def register(add: Add) -> None:
    p = add("gc", cmd_gc, "retention: expire TTLs, archive/delete old conversations, prune checkpoints "
            "(AGE: days, 30 or 30d, or a duration: 12h, 2w)")
    p.add_argument("--no-ttl", action="store_true", help="do not delete expired scratchpad entries and memories")
    p.add_argument("--abandon-idle-days", type=days, metavar="AGE", help="mark open conversations idle AGE abandoned")
    p.add_argument("--completed-days", type=days, metavar="AGE", help="remove completed conversations idle AGE")
    p.add_argument("--failed-days", type=days, metavar="AGE", help="remove failed conversations after AGE")
    p.add_argument("--abandoned-days", type=days, metavar="AGE", help="remove abandoned conversations after AGE")
    p.add_argument("--archive", action="store_true", help="archive removed conversations instead of deleting them")
    p.add_argument(
        "--snapshot-days",
        type=days,
        metavar="AGE",
        help="keep only the newest checkpoint where none was written for AGE",
    )
    p.add_argument("--ledger-days", type=days, metavar="AGE", help="delete finished ledger entries older than AGE")
    p.add_argument("--archive-days", type=days, metavar="AGE", help="purge archived conversations older than AGE")
    p.add_argument("--inbox-days", type=days, metavar="AGE", help="delete inbox messages finished more than AGE ago")
    p.add_argument("--batch-size", type=int, default=500, help="rows per transaction (default 500)")
    p.add_argument("--dry-run", action="store_true", help="count what would go; change nothing")
    p.add_argument("--all-tenants", action="store_true", help="every tenant, one after the other")
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for another host's gc to finish (default: skip at once)",
    )
    p.add_argument("--fail-if-locked", action="store_true", help="exit 3 when another gc held the lock")
