"""The examples' WhatsApp webhook service under load and faults, with each framework's refund agent.

30 customers play the full refund dialogue concurrently through the demo's round-robin proxy to 4 webhook worker
processes (``refund.webhook``'s app, examples/refund), with the demo's payment, email and WhatsApp stand-ins, on a
Postgres cluster of the test's own. Each fault runs during that load, with one framework each (the full-size runs,
200 conversations and every framework, are ``benchmarks/reliability/webhook_load.py``). After each run:
every conversation completed, every customer message stored once and in order with its replies, each reply sent to
WhatsApp exactly once, exactly one refund and one email per conversation, for the right order and address
(``webhook_world.verify``). Figures are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import PgCluster
from webhook_world import RunConfig, run_scenario

N = 30


async def run(cluster: PgCluster, tmp_path: Path, framework: str, fault: str, **options: Any) -> dict[str, Any]:
    pytest.importorskip({"langgraph": "langgraph", "adk": "google.adk", "openai_agents": "agents"}[framework])
    figures = await run_scenario(cluster, RunConfig(framework, N, fault, **options), tmp_path, tag="7")
    shown = {k: v for k, v in figures.items() if not k.startswith("_") and k != "problems"}
    print(f"\n{framework} / {fault}: {json.dumps(shown, indent=1)}")
    return figures


def assert_all_held(figures: dict[str, Any]) -> None:
    assert figures["unanswered"] == 0, figures["worker_log_tails"]
    assert figures["turns"] == 5 * N
    assert not figures["problems"], "\n".join(figures["problems"][:20])
    assert figures["refunds_paid"] == figures["emails_sent"] == N
    assert figures["max_refunds_per_conversation"] == figures["max_emails_per_conversation"] == 1
    assert figures["whatsapp_replies_sent"] == figures["events_stored"] - 5 * N  # every reply sent, once


async def test_webhook_load_without_faults(cluster: PgCluster, tmp_path: Path) -> None:
    figures = await run(cluster, tmp_path, "langgraph", "none")
    assert_all_held(figures)
    assert set(figures["answered_by"]) == {"w1", "w2", "w3", "w4"}  # round robin spread the turns
    assert figures["step_attempts"] == dict.fromkeys(
        ("understand", "verify_policy", "process_refund", "send_confirmation"), N
    )


async def test_webhook_workers_killed_9_every_few_seconds(cluster: PgCluster, tmp_path: Path) -> None:
    figures = await run(cluster, tmp_path, "openai_agents", "kill9", kill_every=0.7, think=1.0)
    assert figures["worker_kills"] >= 3
    # Whether a kill lands on a request in flight depends on timing (on a quiet machine turns are short);
    # tests/examples kills a worker at each boundary of the refund step deterministically.
    assert_all_held(figures)


async def test_webhook_every_app_connection_terminated_repeatedly(cluster: PgCluster, tmp_path: Path) -> None:
    figures = await run(cluster, tmp_path, "adk", "terminate", terminate_every=0.7, think=1.0)
    assert sum(figures["connections_terminated"]) >= 10
    assert_all_held(figures)


async def test_webhook_postgres_restarted_mid_run(cluster: PgCluster, tmp_path: Path) -> None:
    figures = await run(cluster, tmp_path, "langgraph", "restart", restart_every=2.5, restarts=1, think=1.0)
    assert len(figures["postgres_down_s"]) == 1
    assert_all_held(figures)


async def test_webhook_payment_api_times_out_or_fails(cluster: PgCluster, tmp_path: Path) -> None:
    figures = await run(cluster, tmp_path, "openai_agents", "payment", payment_timeout_rate=0.2,
                        payment_error_rate=0.2)  # fmt: skip
    payment = figures["payment_api"]
    assert payment["timeouts"] + payment["errors"] >= 5
    assert_all_held(figures)
    # A failed payment is retried at step 3 without redoing steps 1-2.
    attempts = figures["step_attempts"]
    assert attempts["understand"] == attempts["verify_policy"] == N
    assert attempts["process_refund"] > N
