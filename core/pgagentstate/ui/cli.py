"""The operator subcommands of ``pgagentstate``: doctor, conversations, show, state, health, gc, stats,
export, erase and ui. ``pgagentstate.cli`` registers them next to ``migrate`` and ``demo``.

Each command runs one or more operations of :mod:`pgagentstate.ops.operations` on a ``StateStore`` and
prints a plain-text table, or JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ..connect import resolve_dsn
from ..errors import ConflictError, InvalidInput
from ..ops import operations
from ..ops.operations import GC_LOCK_NAME, GC_TASKS, Check, PoolSettings, RetentionPolicy, to_jsonable
from ..sync import StateStore
from .term import (
    Progress,
    ago,
    clock,
    duration_text,
    heading,
    key_values,
    parse_duration,
    parse_version_or_time,
    short,
    table,
)

Command = Callable[[argparse.Namespace], int]


def open_store(args: argparse.Namespace, *, max_size: int = 2) -> StateStore:
    """A store for the command: DSN, tenant, schema and PgBouncer mode from the arguments; encryption keys
    from ``$PGAGENTSTATE_ENCRYPTION_KEYS`` when set (plaintext rows still read, for mixed databases)."""
    kwargs: dict[str, Any] = {}
    if os.environ.get("PGAGENTSTATE_ENCRYPTION_KEYS"):
        from ..crypto import Encryption, EnvKeyProvider

        kwargs["encryption"] = Encryption(EnvKeyProvider(), required=False)
    return StateStore(
        args.dsn,
        tenant=args.tenant,
        schema=args.schema,
        min_size=1,
        max_size=max_size,
        pgbouncer=bool(getattr(args, "pgbouncer", False)),
        **kwargs,
    )


def emit(args: argparse.Namespace, data: Any, render: Callable[[], str]) -> None:
    """Print ``data`` as JSON with ``--json``, else the text ``render`` builds."""
    if args.json:
        print(json.dumps(to_jsonable(data), indent=2, ensure_ascii=False))
    else:
        print(render())


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("days must not be negative")
    return value


# --- doctor -------------------------------------------------------------------------------------------------


def cmd_doctor(args: argparse.Namespace) -> int:
    dsn = resolve_dsn(args.dsn)
    checks: list[Check] = []
    try:
        started = time.perf_counter()
        with psycopg.connect(dsn, connect_timeout=args.timeout, autocommit=True) as conn:
            conn.execute("SELECT 1")
        elapsed = (time.perf_counter() - started) * 1000
    except psycopg.Error as exc:
        checks.append(Check("connection", "fail", f"cannot connect: {str(exc).strip()}"))
    else:
        port = conninfo_to_dict(dsn).get("port")
        pool = PoolSettings(
            min_size=1,
            max_size=args.pool_size,
            pgbouncer=args.pgbouncer,
            tenant_isolation=args.tenant_isolation,
            dsn_port=int(str(port).split(",")[0]) if port else 5432,
            processes=args.processes,
        )
        with open_store(args) as store:
            checks = store.run(operations.doctor(store.context, args.schema, pool))
        checks.insert(1, Check("latency", "info", f"connect + first query: {elapsed:.1f} ms"))
    marks = {"ok": "ok", "info": "--", "warn": "WARN", "fail": "FAIL"}
    emit(
        args,
        checks,
        lambda: table(["", "check", "detail"], [(marks[c.status], c.name, c.detail) for c in checks], max_col=200),
    )
    return 1 if any(c.status == "fail" for c in checks) else 0


# --- conversations, show, state -----------------------------------------------------------------------------


def cmd_conversations(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        found = store.run(
            operations.list_conversations(
                store.context,
                app=args.app,
                framework=args.framework,
                user_id=args.user,
                status=args.status,
                health=args.health,
                stuck_only=args.stuck,
                idle_over=args.older_than,
                active_within=args.newer_than,
                id_prefix=args.prefix,
                idle=args.idle,
                limit=args.limit,
                offset=args.offset,
            )
        )
    headers = [
        "id",
        "health",
        "status",
        "framework",
        "app",
        "user",
        "msgs",
        "stuck",
        "failed",
        "calls",
        "dups",
        "updated",
    ]
    rows = [
        (
            s.conversation.id,
            s.health,
            s.conversation.status,
            s.conversation.framework,
            s.conversation.app,
            s.conversation.user_id,
            s.conversation.last_seq,
            s.stuck_steps,
            s.failed_steps,
            s.calls,
            s.duplicate_hits,
            ago(s.conversation.updated_at),
        )
        for s in found
    ]
    emit(args, found, lambda: table(headers, rows) + f"\n\n{len(rows)} conversation(s)")
    return 0


def _render_timeline(tl: operations.Timeline) -> str:
    c = tl.conversation
    out = [
        heading(f"conversation {c.id}"),
        key_values(
            [
                ("health", tl.health + ("" if tl.health == c.status else f" (status {c.status})")),
                ("framework / app", f"{c.framework or '-'} / {c.app or '-'}"),
                ("user / channel", f"{c.user_id or '-'} / {c.channel or '-'}"),
                ("version / events", f"{c.version} / {c.last_seq}"),
                ("created", f"{clock(c.created_at)} ({ago(c.created_at)})"),
                ("updated", f"{clock(c.updated_at)} ({ago(c.updated_at)})"),
                ("metadata", short(c.metadata, 100) if c.metadata else "-"),
            ]
        ),
        heading("timeline"),
        table(
            ["time", "kind", "what", "detail"], [(clock(e.at), e.kind, e.title, e.text) for e in tl.entries], max_col=70
        )
        if tl.entries
        else "(empty)",
    ]
    if tl.state_versions:
        latest: dict[str, operations.StateVersion] = {}
        for v in tl.state_versions:
            latest[v.name] = v
        out.append(heading("state"))
        for name, v in latest.items():
            out.append(f"{name!r} at version {v.version}:")
            out.append(json.dumps(v.data, indent=2, ensure_ascii=False, default=str))
        rows = []
        for v in tl.state_versions:
            changes = ", ".join(
                f"+{ch.path}={short(ch.new, 30)}"
                if ch.op == "added"
                else f"-{ch.path}"
                if ch.op == "removed"
                else f"~{ch.path}: {short(ch.old, 20)} -> {short(ch.new, 20)}"
                for ch in v.changes
            )
            rows.append((v.name, v.version, clock(v.changed_at), changes or "(no change)"))
        out.append("\n" + table(["document", "version", "changed", "changes"], rows, max_col=90))
    if tl.steps:
        out.append(heading("workflow steps"))
        out.append(
            table(
                ["workflow", "pos", "step", "status", "attempts", "started", "completed", "lease", "error / result"],
                [
                    (
                        s.workflow,
                        s.position,
                        s.step,
                        s.status,
                        s.attempts,
                        clock(s.started_at),
                        clock(s.completed_at),
                        ago(s.lease_expires_at) if s.status == "in_progress" else "",
                        s.last_error or ("" if s.result is None else short(s.result, 50)),
                    )
                    for s in tl.steps
                ],
            )
        )
    if tl.ledger:
        out.append(heading("external calls (idempotency ledger)"))
        out.append(
            table(
                ["api", "key", "status", "attempts", "dups stopped", "created", "result / error"],
                [
                    (
                        k.api,
                        k.key,
                        k.status,
                        k.attempts,
                        k.duplicate_hits,
                        clock(k.created_at),
                        k.error or ("" if k.result is None else short(k.result, 50)),
                    )
                    for k in tl.ledger
                ],
            )
        )
    if tl.scratchpad:
        out.append(heading("scratchpad"))
        out.append(
            table(
                ["key", "value", "expires"],
                [
                    (s.key, short(s.value, 50), ("expired " if s.expired else "") + ago(s.expires_at))
                    for s in tl.scratchpad
                ],
            )
        )
    if tl.snapshots:
        out.append(heading("checkpoints"))
        out.append(
            table(
                ["namespace", "count", "first", "newest", "newest id"],
                [
                    (s.namespace or "(root)", s.count, clock(s.first_at), clock(s.last_at), s.latest_id)
                    for s in tl.snapshots
                ],
            )
        )
    return "\n".join(out)


def cmd_show(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        tl = store.run(operations.timeline(store.context, args.id, event_limit=args.events, idle=args.idle))
    if tl is None:
        print(f"pgagentstate: conversation {args.id!r} not found (tenant {args.tenant!r})", file=sys.stderr)
        return 1
    emit(args, tl, lambda: _render_timeline(tl))
    return 0


def cmd_state(args: argparse.Namespace) -> int:
    version: int | None = None
    at: datetime | None = None
    if args.at is not None:
        try:
            point = parse_version_or_time(args.at)
        except ValueError as exc:
            raise InvalidInput(str(exc), path="--at") from None
        if isinstance(point, int):
            version = point
        else:
            at = point
    with open_store(args) as store:
        doc = store.run(operations.state_at(store.context, args.id, version=version, at=at, name=args.name))
        previous = None
        if doc is not None and doc.version > 1:
            previous = store.run(operations.state_at(store.context, args.id, version=doc.version - 1, name=args.name))
    if doc is None:
        where = f"at {args.at}" if args.at else "at all"
        print(f"pgagentstate: no state {args.name!r} of conversation {args.id!r} {where}", file=sys.stderr)
        return 1
    changes = operations.diff(previous.data if previous else None, doc.data)

    def render() -> str:
        head = key_values(
            [
                ("conversation", args.id),
                ("document", args.name),
                ("version", doc.version),
                ("written", f"{clock(doc.updated_at)} ({ago(doc.updated_at)})"),
            ]
        )
        body = json.dumps(doc.data, indent=2, ensure_ascii=False, default=str)
        marks = {"added": "+", "removed": "-", "changed": "~"}
        diff_lines = [
            f"  {marks[c.op]} {c.path}: "
            + (
                short(c.new)
                if c.op == "added"
                else short(c.old)
                if c.op == "removed"
                else f"{short(c.old, 40)} -> {short(c.new, 40)}"
            )
            for c in changes
        ]
        return f"{head}\n\n{body}\n\nchanges from version {doc.version - 1}:\n" + ("\n".join(diff_lines) or "  none")

    emit(args, {"state": doc, "changes": changes}, render)
    return 0


# --- health, stats ------------------------------------------------------------------------------------------


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
    if args.check and (h.stuck_steps or h.ledger_stale_claims):
        return 1
    return 0


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
                    t.estimated_rows,
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


# --- gc -----------------------------------------------------------------------------------------------------


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
        return "\n".join(out) if out else "no tenants"

    emit(args, reports, render)
    return exit_code


# --- export, erase ------------------------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        doc = store.run(operations.export_user(store.context, args.user))
    text = json.dumps(doc, indent=2, ensure_ascii=False)
    if args.output and args.output != "-":
        # The export is personal data: readable by its owner only.
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        print(
            f"exported {len(doc['conversations'])} conversation(s), {len(doc['memories'])} memories and "
            f"{len(doc['archived_conversations'])} archived conversation(s) of user {args.user!r} to {args.output}",
            file=sys.stderr,
        )
    else:
        print(text)
    return 0


def cmd_erase(args: argparse.Namespace) -> int:
    if not args.dry_run and not args.yes:
        if not sys.stdin.isatty():
            print("pgagentstate: erase deletes everything of the user; pass --yes to confirm", file=sys.stderr)
            return 2
        answer = input(f"Erase everything of user {args.user!r} in tenant {args.tenant!r}? Type the user id: ")
        if answer.strip() != args.user:
            print("not confirmed; nothing erased", file=sys.stderr)
            return 1
    with open_store(args) as store:
        counts = store.run(operations.erase_user(store.context, args.user, dry_run=args.dry_run))
    verb = "would erase" if args.dry_run else "erased"
    emit(
        args,
        {"user_id": args.user, "dry_run": args.dry_run, "counts": counts},
        lambda: f"{verb} for user {args.user!r}:\n" + table(["what", "rows"], list(counts.items())),
    )
    return 0


# --- ui -----------------------------------------------------------------------------------------------------


def cmd_ui(args: argparse.Namespace) -> int:
    from .server import make_server

    store = open_store(args, max_size=4)
    with store:
        server = make_server(store, host=args.host, port=args.port, idle=args.idle)
        host, port = str(server.server_address[0]), int(server.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        print(f"pgagentstate timeline viewer on http://{shown}:{port}/  (tenant {args.tenant!r}; Ctrl-C stops)")
        if not server.loopback:
            print(
                "warning: listening beyond loopback: anyone who reaches this port can read conversations",
                file=sys.stderr,
            )
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    return 0


# --- registration -------------------------------------------------------------------------------------------


def cmd_rotate_keys(args: argparse.Namespace) -> int:
    """Re-encrypt every stored ciphertext with the active key of ``$PGAGENTSTATE_ENCRYPTION_KEYS``."""
    if not os.environ.get("PGAGENTSTATE_ENCRYPTION_KEYS"):
        print(
            "pgagentstate: set PGAGENTSTATE_ENCRYPTION_KEYS (and PGAGENTSTATE_ENCRYPTION_ACTIVE_KEY)", file=sys.stderr
        )
        return 2
    progress = Progress()

    def report(table: str, scanned: int, rewritten: int) -> None:
        progress(f"{table} ({rewritten} re-encrypted)", scanned, scanned)

    with open_store(args) as store:
        counts = store.rotate_keys(
            all_tenants=args.all_tenants,
            batch_size=args.batch_size,
            include_plaintext=args.include_plaintext,
            progress=report,
        )
    progress.finish()
    emit(args, counts, lambda: "\n".join(f"{table:<20} {n} re-encrypted" for table, n in counts.items()))
    return 0


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register the operator subcommands on the ``pgagentstate`` parser."""

    def add(name: str, fn: Command, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help, description=help)
        p.set_defaults(fn=fn)
        return p

    idle_help = "an open conversation without activity for this long counts as abandoned (default 24h)"

    p = add("doctor", cmd_doctor, "check connectivity, server, schema, RLS, encryption, pool and PgBouncer settings")
    p.add_argument("--timeout", type=int, default=5, help="connect timeout in seconds (default 5)")
    p.add_argument("--pool-size", type=int, default=10, help="max_size of your application's pool (default 10)")
    p.add_argument("--processes", type=int, default=1, help="application processes sharing the server (default 1)")
    p.add_argument("--tenant-isolation", action="store_true", help="your application uses tenant_isolation=True")

    p = add("rotate-keys", cmd_rotate_keys, "re-encrypt stored values with the active key (resumable)")
    p.add_argument("--all-tenants", action="store_true", help="every tenant, not only --tenant (run as the owner)")
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--include-plaintext", action="store_true", help="also encrypt rows written before encryption")

    p = add("conversations", cmd_conversations, "list conversations with their health")
    p.add_argument("--app")
    p.add_argument("--framework", help="langgraph, adk, openai_agents, ...")
    p.add_argument("--user", help="user id")
    p.add_argument("--status", choices=operations.HEALTH_CATEGORIES, help="stored status")
    p.add_argument("--health", choices=operations.HEALTH_CATEGORIES, help="health (idle open ones are abandoned)")
    p.add_argument("--stuck", action="store_true", help="only conversations with a stuck workflow step")
    p.add_argument("--older-than", type=_duration, metavar="DUR", help="no activity for at least DUR (e.g. 7d)")
    p.add_argument("--newer-than", type=_duration, metavar="DUR", help="activity within DUR (e.g. 2h)")
    p.add_argument("--prefix", help="conversation id prefix")
    p.add_argument("--idle", type=_duration, default=operations.DEFAULT_IDLE, metavar="DUR", help=idle_help)
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--offset", type=int, default=0)

    p = add("show", cmd_show, "timeline of one conversation: messages, state versions, steps, external calls")
    p.add_argument("id", help="conversation id")
    p.add_argument("--events", type=int, default=None, metavar="N", help="only the newest N events")
    p.add_argument("--idle", type=_duration, default=operations.DEFAULT_IDLE, metavar="DUR", help=idle_help)

    p = add("state", cmd_state, "a conversation's state as it was at a version or a time (time travel)")
    p.add_argument("id", help="conversation id")
    p.add_argument("--at", metavar="VERSION|TIME", help="version number, ISO time, or a duration ago (10m)")
    p.add_argument("--name", default="state", help="state document name (default 'state')")

    p = add("health", cmd_health, "conversation health: counts per status, abandoned, stuck steps, duplicates")
    p.add_argument("--idle", type=_duration, default=operations.DEFAULT_IDLE, metavar="DUR", help=idle_help)
    p.add_argument("--stuck-limit", type=int, default=20, help="stuck steps to list (default 20)")
    p.add_argument("--check", action="store_true", help="exit 1 when a step or side-effect claim is stuck")

    p = add("gc", cmd_gc, "retention: expire TTLs, archive/delete old conversations, prune checkpoints")
    p.add_argument("--no-ttl", action="store_true", help="do not delete expired scratchpad entries and memories")
    p.add_argument("--abandon-idle-days", type=_days, metavar="N", help="mark open conversations idle N days abandoned")
    p.add_argument("--completed-days", type=_days, metavar="N", help="remove completed conversations idle N days")
    p.add_argument("--failed-days", type=_days, metavar="N", help="remove failed conversations after N days")
    p.add_argument("--abandoned-days", type=_days, metavar="N", help="remove abandoned conversations after N days")
    p.add_argument("--archive", action="store_true", help="archive removed conversations instead of deleting them")
    p.add_argument(
        "--snapshot-days",
        type=_days,
        metavar="N",
        help="keep only the newest checkpoint where none was written for N days",
    )
    p.add_argument("--ledger-days", type=_days, metavar="N", help="delete finished ledger entries older than N days")
    p.add_argument("--archive-days", type=_days, metavar="N", help="purge archived conversations older than N days")
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

    add("stats", cmd_stats, "row counts, retries, duplicates, table sizes and server counters")

    p = add("export", cmd_export, "export everything of one user as JSON (GDPR access request)")
    p.add_argument("user", help="user id")
    p.add_argument("-o", "--output", help="file to write (mode 0600); default stdout")

    p = add("erase", cmd_erase, "erase everything of one user (GDPR erasure), in one transaction")
    p.add_argument("user", help="user id")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--dry-run", action="store_true", help="count what would be erased")

    p = add("ui", cmd_ui, "serve the timeline viewer (a local web page)")
    p.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    p.add_argument("--idle", type=_duration, default=operations.DEFAULT_IDLE, metavar="DUR", help=idle_help)


__all__ = ["add_commands", "emit", "open_store"]
