"""The operator commands end to end through ``pgagentstate.cli.main``: text for people, JSON for scripts."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from pgagentstate import StateStore
from pgagentstate.cli import build_parser, main
from pgagentstate.ui.term import duration_text, parse_duration, parse_version_or_time, table

from .helpers import DIALOGUE, age_conversation, seed_refund


def test_migrate_and_doctor(cli, dsn: str) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = cli("migrate", "--json")
    assert code == 0 and json.loads(out)["pending"] == []
    code, out, _ = cli("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(out)}
    assert code == 0, checks
    assert checks["connection"]["status"] == "ok" and checks["schema"]["status"] == "ok"
    assert checks["row-level security"]["status"] == "ok"
    assert {"server version", "latency", "encryption", "pool", "pgbouncer", "tenant isolation"} <= set(checks)
    code, out, _ = cli("doctor")
    assert code == 0 and "row-level security" in out and "WARN" not in out.split("pool")[0].split("schema")[1]


def test_doctor_reports_a_schema_that_is_not_set_up_and_a_dead_server(capsys: pytest.CaptureFixture[str],
                                                                      dsn: str) -> None:
    assert main(["doctor", "--dsn", dsn, "--schema", "never_set_up", "--json"]) == 1
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["schema"]["status"] == "fail" and "migrate" in checks["schema"]["detail"]
    assert main(["doctor", "--dsn", "postgresql://nobody@127.0.0.1:1/x", "--timeout", "2"]) == 1
    assert "cannot connect" in capsys.readouterr().out


def test_doctor_spots_a_proxy_in_front_of_the_server() -> None:
    from pgagentstate.ops.operations import PoolSettings, pool_checks

    # The DSN says 6432 but the server listens on 5432: something (PgBouncer) is in between.
    checks = {c.name: c for c in pool_checks(PoolSettings(dsn_port=6432, max_size=30, processes=4),
                                             max_conn=100, in_use=5, server_port=5432)}
    assert checks["pgbouncer"].status == "warn" and "pgbouncer=True" in checks["pgbouncer"].detail
    assert checks["pool"].status == "warn"                      # 120 connections > 80% of 100
    checks = {c.name: c for c in pool_checks(PoolSettings(dsn_port=6432, pgbouncer=True), max_conn=100, in_use=5,
                                             server_port=5432)}
    assert checks["pgbouncer"].status == "ok" and checks["pool"].status == "ok"


def test_doctor_warns_when_autovacuum_is_off(cli, dsn: str) -> None:  # type: ignore[no-untyped-def]
    import psycopg

    from pgagentstate.ops.operations import autovacuum_check

    with psycopg.connect(dsn) as conn:
        on = conn.execute("SELECT current_setting('autovacuum') = 'on' AND current_setting('track_counts') = 'on'")
        server_has_it = bool(on.fetchone()[0])  # type: ignore[index]
    cli("migrate")
    code, out, _ = cli("doctor", "--json")
    check = {c["name"]: c for c in json.loads(out)}["autovacuum"]
    assert code == 0
    assert check["status"] == ("ok" if server_has_it else "warn"), check
    assert autovacuum_check("on", "on").status == "ok"
    off = autovacuum_check("off", "on")
    assert off.status == "warn" and "autovacuum = off" in off.detail and "ANALYZE" in off.detail
    assert "track_counts = off" in autovacuum_check("on", "off").detail


def test_conversations_show_state_health(cli, store: StateStore, dsn: str, schema: str) -> None:  # type: ignore[no-untyped-def]
    seed_refund(store, "conv_12345", user_id="u1", framework="langgraph")
    store.create_conversation("idle_one", framework="adk", status="waiting_customer")
    age_conversation(dsn, schema, "idle_one", 3)

    code, out, _ = cli("conversations")
    assert code == 0 and "conv_12345" in out and "idle_one" in out and "2 conversation(s)" in out
    code, out, _ = cli("conversations", "--health", "abandoned", "--json")
    assert [c["conversation"]["id"] for c in json.loads(out)] == ["idle_one"]
    code, out, _ = cli("conversations", "--framework", "langgraph", "--newer-than", "1h", "--json")
    assert [c["conversation"]["id"] for c in json.loads(out)] == ["conv_12345"]

    code, out, _ = cli("show", "conv_12345")
    assert code == 0
    for needle in ("meu@email.com", "Produto chegou quebrado", "process_refund", "send_confirmation",
                   "payment", "txn_12345", "+email", "external calls"):
        assert needle in out, needle
    code, out, _ = cli("show", "conv_12345", "--json")
    assert len(json.loads(out)["events"]) == len(DIALOGUE)
    code, _, err = cli("show", "missing")
    assert code == 1 and "not found" in err

    code, out, _ = cli("state", "conv_12345", "--at", "2", "--json")
    data = json.loads(out)
    assert data["state"]["version"] == 2 and data["state"]["data"] == {"order_id": "12345", "email": "meu@email.com"}
    assert data["changes"] == [{"path": "email", "op": "added", "old": None, "new": "meu@email.com"}]
    code, out, _ = cli("state", "conv_12345")
    assert code == 0 and '"refund": "txn_12345"' in out and "+ refund" in out
    code, _, err = cli("state", "conv_12345", "--at", "1d")      # a day ago it did not exist yet
    assert code == 1 and "no state" in err
    code, _, err = cli("state", "conv_12345", "--at", "yesterday-ish")
    assert code == 2 and "InvalidInput" in err

    code, out, _ = cli("health", "--json")
    h = json.loads(out)
    assert h["conversations"]["abandoned"] == 1 and h["conversations"]["waiting_customer"] == 1
    assert h["duplicate_calls_stopped"] == 1
    code, out, _ = cli("health")
    assert code == 0 and "duplicate calls stopped by the ledger" in out and "abandoned" in out
    store.start_step("conv_12345", "refund", "hung", lease=0.001)
    time.sleep(0.02)
    code, out, _ = cli("health", "--check")
    assert code == 1 and "hung" in out


def test_health_shows_the_inbox(cli, store: StateStore) -> None:  # type: ignore[no-untyped-def]
    store.accept("wa:1", {"text": "oi"}, key="m1")
    store.accept("wa:1", {"text": "alô?"}, key="m2")
    code, out, _ = cli("health", "--json")
    inbox = json.loads(out)["inbox"]
    assert code == 0 and (inbox["waiting"], inbox["conversations"], inbox["stale_leases"]) == (2, 1, 0)
    code, out, _ = cli("health")
    assert "queue depth (waiting + running)" in out and "turns recovered by another worker" in out
    assert store.claim_message(lease=0.001) is not None  # then its worker vanishes
    time.sleep(0.02)
    code, out, _ = cli("health", "--check")
    assert code == 1 and "turns whose worker vanished (lease expired)" in out


def test_gc_stats_export_erase(cli, store: StateStore, dsn: str, schema: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    seed_refund(store, "conv_12345", user_id="u1")
    store.update_conversation("conv_12345", status="completed")
    age_conversation(dsn, schema, "conv_12345", 40)

    code, out, _ = cli("gc", "--completed-days", "30", "--dry-run")
    assert code == 0 and "(dry run)" in out and "completed conversations" in out
    assert store.get_conversation("conv_12345") is not None

    code, out, _ = cli("stats", "--json")
    s = json.loads(out)
    assert s["conversations"] == 1 and s["events"] == len(DIALOGUE) and s["duplicate_calls_stopped"] == 1
    assert {t["table"] for t in s["tables"]} >= {"conversations", "events", "idempotency_keys"}
    code, out, _ = cli("stats")
    assert code == 0 and "rolled back" in out

    target = tmp_path / "u1.json"
    code, _, err = cli("export", "u1", "-o", str(target))
    assert code == 0 and "1 conversation(s)" in err
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert json.loads(target.read_text())["conversations"][0]["id"] == "conv_12345"

    code, _, err = cli("erase", "u1")                    # no --yes, no terminal: refused
    assert code == 2 and "--yes" in err
    code, out, _ = cli("erase", "u1", "--dry-run", "--json")
    assert json.loads(out)["counts"]["conversations"] == 1
    assert store.get_conversation("conv_12345") is not None
    code, out, _ = cli("erase", "u1", "--yes")
    assert code == 0 and "erased for user 'u1'" in out
    assert store.get_conversation("conv_12345") is None


def test_the_commands_are_the_operators_and_migrate() -> None:
    """The library's command line is for operators: the refund demo is an example (examples/demo.py)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    commands = set(sub.choices)  # type: ignore[attr-defined]
    assert {"migrate", "doctor", "conversations", "show", "state", "health", "gc", "stats", "export", "erase",
            "ui"} <= commands
    assert "demo" not in commands


def test_terminal_helpers() -> None:
    assert parse_duration("90") == 90 and parse_duration("15m") == 900 and parse_duration("2d") == 172800
    with pytest.raises(ValueError):
        parse_duration("soon")
    assert parse_version_or_time("3") == 3
    assert parse_version_or_time("2026-05-28T10:00:00Z").isoformat() == "2026-05-28T10:00:00+00:00"  # type: ignore[union-attr]
    assert duration_text(90) == "1m30s" and duration_text(86400) == "1d"
    text = table(["name", "n"], [("a", 1), ("long name", 22)])
    assert text.splitlines() == ["name        n", "---------  --", "a           1", "long name  22"]
