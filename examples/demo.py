"""The crash demo: the seed's WhatsApp refund conversation, end to end, once per framework.

    .venv/bin/python examples/demo.py [--framework F] [--no-crash] [--no-redelivery] [--keep] [--dsn DSN] [--schema S]

For each framework: start the payment, email and WhatsApp Cloud API stand-ins and two webhook workers
behind a round-robin load balancer; play the conversation (turns land on alternating workers); the
payment API times out once (step 3 is retried, steps 1-2 are not redone); a worker is killed -9 in the
middle of the refund, after the payment API took the money and before the result was recorded, and the
other worker carries on when WhatsApp delivers the message again; then, five minutes later on a simulated
clock, the customer asks about the receipt. With ``--no-redelivery`` WhatsApp delivers each message once:
the webhook only stores it in the durable inbox and answers 200, and when the worker running the refund is
killed, the other worker takes the turn over once its lease runs out. Meanwhile pgagentstate's distillation
worker, in a process of its own, turns the conversation into facts in the customer's long-term memory; two
days later the customer writes again — a new conversation, an empty history — and the agent already knows
the email. Finally the chats and an audit read back from Postgres and from the services' own records: one
refund, one email, every step completed, the email never asked twice, distilled into memory once.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from pgagentstate import PgAgentStateError, StateStore
from pgagentstate.connect import resolve_dsn

from refund.agents import FRAMEWORKS, LABELS, channel_conversation_id
from refund.cluster import EXAMPLES, Cluster
from refund.dialogue import NEXT_CONVERSATION, REFUND_TURN, SCRIPT
from refund.report import Audit, audit_lines, chat, collect, table

if TYPE_CHECKING:
    from refund.redis_chaos import RedisChaos

_FRAMEWORK_MODULES = {"langgraph": "langgraph", "adk": "google.adk", "openai_agents": "agents"}


def available(framework: str) -> str | None:
    """None when the framework's agent can run, else why not (without importing the framework)."""
    if framework == "core":
        return None
    try:
        if importlib.util.find_spec(_FRAMEWORK_MODULES[framework]) is None:
            raise ImportError
    except ImportError:
        extra = framework.replace("_", "-")
        return f"{LABELS[framework]} is not installed (pip install 'pgagentstate[{extra}]')"
    if not (EXAMPLES / f"{framework}_agent.py").exists():
        return f"examples/{framework}_agent.py is missing"
    return None


def _say(line: str = "") -> None:
    print(line, flush=True)


def play(cluster: Cluster, customer: str, start: datetime, chaos: RedisChaos | None = None) -> None:
    """Play the script through the load balancer, printing progress."""
    base = int(start.timestamp())
    for i, (offset, text) in enumerate(SCRIPT):
        if i and offset - SCRIPT[i - 1][0] >= 240:
            _say(f"    ... {(offset - SCRIPT[i - 1][0]) // 60} minutos depois (relógio simulado) ...")
        if chaos is not None and i:  # Redis's failure modes, one before each message after the first
            _say(f"    !! {chaos.fault(i - 1)}")
        # The message first: what happens while it is handled (a timeout, a kill -9) is printed below it.
        marker = " (refund turn)" if i == REFUND_TURN else ""
        _say(f"    cliente -> {text!r}{marker}")
        began = time.monotonic()
        delivery = cluster.deliver(customer, text, base + offset)
        _say(f"       answered by {delivery.worker} in {time.monotonic() - began:.1f} s")


def wait_distilled(cluster: Cluster, store: StateStore, conversation_id: str) -> float:
    """Seconds until the distillation worker (another process) has the conversation's last message in
    the customer's long-term memory."""
    began = time.monotonic()
    while conversation_id in store.pending_distillations(100):
        if time.monotonic() - began > 30:
            raise RuntimeError(f"the distillation worker did not get to {conversation_id} in 30 s:\n"
                               + cluster.log_tail(cluster.distiller))
        time.sleep(0.05)
    return time.monotonic() - began


def play_next_conversation(cluster: Cluster, store: StateStore, customer: str, start: datetime) -> None:
    """Two days later the customer writes again: a new conversation. The distillation worker has had two
    days for the first one; here it is waited for (a fraction of a second)."""
    waited = wait_distilled(cluster, store, channel_conversation_id(customer))
    _say(f"    distillation worker (its own process): the conversation is in the customer's long-term memory "
         f"(the demo waited {waited:.1f} s for it)")
    offset, text = NEXT_CONVERSATION
    _say(f"    ... {offset // 86400} dias depois (relógio simulado): a janela de 24 h fechou, conversa nova ...")
    _say(f"    cliente -> {text!r}")
    began = time.monotonic()
    delivery = cluster.deliver(customer, text, int(start.timestamp()) + offset)
    _say(f"       answered by {delivery.worker} in {time.monotonic() - began:.1f} s")
    wait_distilled(cluster, store, channel_conversation_id(customer, 2))  # for the audit: the memory as it ends


def run_framework(
    framework: str,
    *,
    dsn: str,
    schema: str,
    workdir: Path,
    crash: bool,
    chaos: RedisChaos | None = None,
    no_redelivery: bool = False,
) -> Audit:
    label = LABELS[framework]
    _say(f"\n=== {label} " + "=" * max(3, 70 - len(label)))
    customer = "5511" + "".join(random.choice("0123456789") for _ in range(8))
    tenant = f"demo-{framework}"
    began = time.monotonic()
    with Cluster(
        framework,
        workdir / framework,
        dsn=dsn,
        schema=schema,
        tenant=tenant,
        crash_at="after_payment" if crash else None,
        payment_faults=["timeout"],
        on_event=lambda line: _say(f"    !! {line}"),
        no_redelivery=no_redelivery,
    ) as cluster:
        _say("    starting payment, email and WhatsApp APIs, 2 webhook workers, a round-robin proxy and the "
             "distillation worker ...")
        cluster.wait_ready()
        _say(f"    ready in {time.monotonic() - began:.1f} s; WhatsApp customer +{customer}")
        if no_redelivery:
            _say("    WhatsApp delivers each message once: the webhook stores it in the durable inbox and answers 200")
        start = datetime.now(UTC).replace(second=0, microsecond=0)
        play(cluster, customer, start, chaos)
        with StateStore(dsn, schema=schema, tenant=tenant, max_size=2) as store:
            if no_redelivery:
                inbox = store.inbox_metrics()
                _say(
                    f"    inbox: {inbox.recoveries} turn(s) recovered by another worker, {inbox.depth} left, "
                    f"{inbox.failed} failed"
                )
            play_next_conversation(cluster, store, customer, start)
            audit = collect(
                store,
                framework,
                customer,
                {"payment": cluster.payment.ledger, "email": cluster.email.ledger, "whatsapp": cluster.whatsapp.ledger},
                cluster.kills,
            )
    _say("")
    for line in chat(audit):
        _say(line)
    for line in audit_lines(audit):
        _say(line)
    _say(f"    ({time.monotonic() - began:.1f} s)")
    return audit


def run_demo(args: argparse.Namespace) -> int:
    started = time.monotonic()
    wanted = [args.framework] if args.framework != "all" else list(FRAMEWORKS)
    frameworks = []
    for fw in wanted:
        reason = available(fw)
        if reason:
            _say(f"skipping {LABELS.get(fw, fw)}: {reason}")
        else:
            frameworks.append(fw)
    if not frameworks:
        _say("nothing to run")
        return 1
    keep = bool(args.keep)
    dsn = resolve_dsn(args.dsn)
    # Without --keep everything goes into a throwaway schema, dropped at the end.
    schema = args.schema if keep else f"pgagentstate_demo_{random.getrandbits(32):08x}"
    workdir = Path(tempfile.mkdtemp(prefix="pgagentstate-demo-"))
    _say(f"pgagentstate demo: {', '.join(LABELS[f] for f in frameworks)}; Postgres schema {schema!r}")
    chaos = None
    if args.redis:
        from refund.redis_chaos import RedisChaos

        chaos = RedisChaos()
        # The workers (subprocesses) read these: a Redis tier in front of Postgres, one secret for all.
        os.environ["PGAGENTSTATE_DEMO_REDIS"] = chaos.url
        os.environ.setdefault("PGAGENTSTATE_REDIS_SECRET", os.urandom(24).hex())
        _say(f"Redis tier on ({chaos.url}); between messages Redis is flushed, killed -9 and tampered with")
    try:
        with StateStore(dsn, schema=schema, max_size=1) as store:
            store.setup()
        audits = [
            run_framework(
                fw,
                dsn=dsn,
                schema=schema,
                workdir=workdir,
                crash=not args.no_crash,
                chaos=chaos,
                no_redelivery=args.no_redelivery,
            )
            for fw in frameworks
        ]
    finally:
        if chaos is not None:
            chaos.close()
        if not keep:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
            shutil.rmtree(workdir, ignore_errors=True)
    _say("\n=== Summary " + "=" * 60)
    rows = [
        [
            LABELS[a.framework],
            a.payment["effects"],
            a.email["effects"],
            sum(s["status"] == "completed" for s in a.steps),
            len(a.transcript),
            "; ".join(a.kills) or "-",
            "OK" if a.ok else "FAILED",
        ]
        for a in audits
    ]
    for line in table(["framework", "refunds", "emails", "steps done", "messages", "killed", "result"], rows):
        _say(line)
    checks = [passed for a in audits for _, passed in a.checks()]
    _say(f"\n  checks: {sum(checks)}/{len(checks)} passed")
    if keep:
        _say(f"\n  data kept: schema {schema!r} (tenants demo-<framework>); service records in {workdir}")
    _say(f"\n  total {time.monotonic() - started:.1f} s")
    ok = all(a.ok for a in audits)
    _say("  OK: every agent remembered the email, paid once, and knew it again in a new conversation."
         if ok else "  FAILED: see the checks above.")
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="examples/demo.py", description="Play the refund story end to end.")
    parser.add_argument(
        "--dsn",
        default=None,
        help="Postgres DSN (default: $PGAGENTSTATE_DSN, $DATABASE_URL, "
        "else an embedded Postgres in ./.pgagentstate/pg)",
    )
    parser.add_argument("--schema", default="pgagentstate", help="with --keep: where the data stays")
    parser.add_argument("--keep", action="store_true", help="leave the demo's data in the database (in --schema)")
    parser.add_argument(
        "--framework",
        choices=["all", "langgraph", "adk", "openai_agents", "core"],
        default="all",
        help="run one framework's agent only (core: the agent without a framework)",
    )
    parser.add_argument("--no-crash", action="store_true", help="do not kill a worker in the middle of the refund")
    parser.add_argument(
        "--no-redelivery",
        action="store_true",
        help="WhatsApp delivers each message once: the webhook stores it in the durable inbox, answers 200, and "
        "the inbox's workers run the turns (a worker killed mid-refund is taken over when its lease runs out)",
    )
    parser.add_argument(
        "--redis",
        action="store_true",
        help="put a Redis tier in front of Postgres (a redis-server of the demo's own) and flush, kill -9 and "
        "tamper with it between messages: Redis's failure modes (crash, lost keys, edited values), doing no harm",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_demo(args)
    except PgAgentStateError as exc:  # no Postgres to reach, a bad DSN...: say so, without a traceback
        print(f"demo: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
