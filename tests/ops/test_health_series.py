"""Conversation health over time (``operations.health_series``, ``health --series``): figures computed against
a world of conversations started, completed, abandoned and stuck at known times, and the query's plan on a
table with 20,000 conversations over 60 days."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from pgagentstate import AsyncStateStore, InvalidInput, StateStore
from pgagentstate.ops import operations
from pgagentstate.queries import query

from .helpers import execute

H = timedelta(hours=1)
M = timedelta(minutes=1)
NOW = datetime(2026, 5, 28, 12, 30, tzinfo=UTC)  # pinned: the figures below do not depend on the clock
IDLE = 3600.0


def hour_of(now: datetime) -> datetime:
    return now.replace(minute=0, second=0, microsecond=0)


def build_world(store: StateStore, dsn: str, schema: str, now: datetime) -> dict[str, datetime]:
    """Conversations at known times relative to ``now`` (idle time 1 h). Hour A (two hours before ``now``'s
    hour): two completed in 10 and 30 minutes, one waiting for the customer, one abandoned. Hour B (the
    hour before): one failed, one active with a stuck step, one completed in 30 minutes whose payment was
    replayed twice. The first hour of the 24 h window: one completed in an hour (another app and
    framework). Outside the window: one a second too old, one started after ``now``."""
    hour0 = hour_of(now)
    a, b, origin = hour0 - 2 * H, hour0 - H, hour0 - 23 * H
    fresh = now - 5 * M
    world = {
        # id: (app, framework, status, created_at, updated_at)
        "done1": ("refunds", "langgraph", "completed", a + 5 * M, a + 15 * M),
        "done2": ("refunds", "langgraph", "completed", a + 10 * M, a + 40 * M),
        "wait": ("refunds", "adk", "waiting_customer", a + 20 * M, fresh),
        "idle": ("refunds", "adk", "active", a + 30 * M, a + 35 * M),
        "fail": ("refunds", "adk", "failed", b + 5 * M, b + 6 * M),
        "stuck": ("refunds", "adk", "active", b + 10 * M, fresh),
        "dup": ("refunds", "langgraph", "completed", b + 20 * M, b + 50 * M),
        "edge": ("", "core", "completed", origin, origin + H),
        "old": ("", "core", "completed", origin - timedelta(seconds=1), origin),
        "future": ("", "core", "active", now + 10 * M, now + 10 * M),
    }
    for cid, (app, framework, status, _, _) in world.items():
        store.create_conversation(cid, app=app, framework=framework, status=status)
    store.start_step("stuck", "refund", "process_refund", lease=3600)
    store.start_step("stuck", "refund", "verify_policy", lease=3600)  # running, its lease not expired
    for _ in range(3):  # recorded once, then replayed twice: two duplicates stopped
        store.run_once("dup:refund", lambda key: {"transaction_id": "txn_1"}, api="payment",
                       request={"order": "1"}, conversation_id="dup")
    execute(dsn, schema, "UPDATE {schema}.workflow_steps SET lease_expires_at = %(at)s "
            "WHERE conversation_id = 'stuck' AND step = 'process_refund'", {"at": now - M})
    for cid, (_, _, _, created, updated) in world.items():
        execute(dsn, schema, "UPDATE {schema}.conversations SET created_at = %(c)s, updated_at = %(u)s "
                "WHERE id = %(id)s", {"c": created, "u": updated, "id": cid})
    return {"a": a, "b": b, "origin": origin}


@pytest.fixture
def world(store: StateStore, dsn: str, schema: str) -> dict[str, datetime]:
    return build_world(store, dsn, schema, NOW)


def test_hourly_figures_of_a_known_world(store: StateStore, world: dict[str, datetime]) -> None:
    s = store.run(operations.health_series(store.context, idle=IDLE, now=NOW))
    assert len(s.buckets) == 24 and s.buckets[0] == world["origin"] and s.buckets[-1] == hour_of(NOW)
    assert [b2 - b1 for b1, b2 in zip(s.buckets, s.buckets[1:], strict=False)] == [H] * 23
    by_bucket = dict(zip(s.buckets, s.total, strict=True))

    a = by_bucket[world["a"]]
    assert a.started == 4
    assert a.health == {"active": 0, "waiting_customer": 1, "awaiting_approval": 0, "completed": 2, "failed": 0,
                        "abandoned": 1}
    assert (a.completion_rate, a.abandonment_rate, a.waiting_customer_rate, a.stuck_rate) == (0.5, 0.25, 0.25, 0.0)
    # percentile_cont over 600 s and 1800 s: the median halfway, p90 nine tenths of the way.
    assert a.completion_seconds == {"0.5": 1200.0, "0.9": pytest.approx(1680.0), "0.99": pytest.approx(1788.0)}
    assert a.completion_seconds_sum == 2400.0 and a.duplicates_stopped == 0

    b = by_bucket[world["b"]]
    assert b.started == 3 and b.health["failed"] == 1 and b.health["active"] == 1 and b.health["completed"] == 1
    assert b.with_stuck_steps == 1 and b.stuck_steps == 1 and b.stuck_rate == pytest.approx(1 / 3)
    assert b.duplicates_stopped == 2 and b.completion_seconds["0.5"] == 1800.0

    first = by_bucket[world["origin"]]
    assert first.started == 1 and first.completion_seconds["0.5"] == 3600.0
    empty = [p for t, p in by_bucket.items() if t not in (world["a"], world["b"], world["origin"])]
    assert len(empty) == 21 and all(p.started == 0 and p.completion_rate is None for p in empty)
    assert all(p.completion_seconds == {"0.5": None, "0.9": None, "0.99": None} for p in empty)

    # The whole window: 8 started ("old" and "future" are outside), its percentiles over all 4 completions.
    w = s.window
    assert w.started == 8 and w.health["completed"] == 4 and w.completion_rate == 0.5
    assert w.completion_seconds["0.5"] == 1800.0 and w.completion_seconds_sum == 600 + 1800 + 1800 + 3600
    assert w.duplicates_stopped == 2 and w.with_stuck_steps == 1


def test_per_app_and_framework(store: StateStore, world: dict[str, datetime]) -> None:
    s = store.run(operations.health_series(store.context, idle=IDLE, now=NOW))
    groups = {(g.app, g.framework): g for g in s.groups}
    assert list(groups) == [("", "core"), ("refunds", "adk"), ("refunds", "langgraph")]
    adk = groups[("refunds", "adk")]
    assert adk.window.started == 4 and adk.window.completion_rate == 0.0 and adk.window.abandonment_rate == 0.25
    assert adk.window.completion_seconds["0.5"] is None and adk.window.with_stuck_steps == 1
    assert [p.started for p in adk.points if p.started] == [2, 2]
    lg = groups[("refunds", "langgraph")]
    assert lg.window.started == 3 and lg.window.completion_rate == 1.0 and lg.window.duplicates_stopped == 2
    # Each group's buckets add up to the total's.
    for i, total in enumerate(s.total):
        assert sum(g.points[i].started for g in s.groups) == total.started

    only = store.run(operations.health_series(store.context, idle=IDLE, now=NOW, framework="adk"))
    assert only.window.started == 4 and [(g.app, g.framework) for g in only.groups] == [("refunds", "adk")]
    assert store.run(operations.health_series(store.context, now=NOW, app="nope")).window.started == 0


def test_a_longer_idle_time_abandons_nothing_yet(store: StateStore, world: dict[str, datetime]) -> None:
    s = store.run(operations.health_series(store.context, idle=48 * 3600, now=NOW))
    assert s.window.health["abandoned"] == 0 and s.window.health["active"] == 2


def test_daily_and_rolling_windows(store: StateStore, world: dict[str, datetime]) -> None:
    days = store.run(operations.health_series(store.context, every="day", idle=IDLE, now=NOW))
    assert len(days.buckets) == 30 and days.buckets[-1] == datetime(2026, 5, 28, tzinfo=UTC)
    assert days.window.started == 9 and sum(p.started for p in days.total) == 9  # "old" is in, "future" is not
    rolling = store.run(operations.health_series(store.context, every=86400, buckets=1, rolling=True, idle=IDLE,
                                                 now=NOW))
    assert rolling.buckets == [NOW - timedelta(days=1)] and rolling.window.started == 9
    assert rolling.total[0] == rolling.window


def test_the_series_is_per_tenant(store: StateStore, world: dict[str, datetime]) -> None:
    other = store.with_tenant("acme")
    other.create_conversation("mine", framework="adk")
    s = other.run(operations.health_series(other.context))
    assert s.window.started == 1 and s.window.health["active"] == 1


@pytest.mark.parametrize(
    "kwargs",
    [{"every": "week"}, {"every": 10}, {"buckets": 0}, {"buckets": 401}, {"idle": -1},
     {"now": datetime(2026, 5, 28)}],  # a naive time
)
def test_bad_arguments_are_typed_errors(store: StateStore, kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        store.run(operations.health_series(store.context, **kwargs))  # type: ignore[arg-type]


def test_the_window_is_read_through_the_created_at_index(store: StateStore, dsn: str, schema: str) -> None:
    # 20,000 conversations over 60 days: the last 24 h are ~330 of them. Without conversations_created_idx
    # the plan reads every conversation of the tenant (a sequential or primary-key scan).
    execute(dsn, schema, "INSERT INTO {schema}.conversations (tenant_id, id, status, created_at, updated_at) "
            "SELECT %(t)s, 'g' || i, 'completed', now() - i * interval '259 seconds', "
            "now() - i * interval '259 seconds' + interval '5 minutes' FROM generate_series(1, 20000) i",
            {"t": store.context.tenant})
    execute(dsn, schema, "ANALYZE {schema}.conversations")
    now = datetime.now(UTC)
    params = {"tenant": store.context.tenant, "every": 3600.0, "origin": hour_of(now) - 23 * H, "until": now,
              "now": now, "idle": 86400.0, "app": None, "framework": None}
    with psycopg.connect(dsn, autocommit=True) as conn:
        plan = conn.execute(b"EXPLAIN (FORMAT JSON) " + query("ops_health_series", schema), params).fetchone()
    assert plan is not None
    text = json.dumps(plan[0])
    assert "conversations_created_idx" in text, text
    scans = [node for node in _nodes(plan[0][0]["Plan"]) if node.get("Relation Name") == "conversations"]
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), text
    s = store.run(operations.health_series(store.context))
    # The window runs from the start of the hour 23 hours back to now: 23 to 24 hours, one conversation
    # every 259 s (319 just after the hour: it failed CI at 21:00:05 with a lower bound of 320).
    assert 23 * 3600 // 259 <= s.window.started <= 24 * 3600 // 259 + 1
    assert s.window.health["completed"] == s.window.started


def _nodes(plan: dict[str, object]) -> list[dict[str, object]]:
    out = [plan]
    for child in plan.get("Plans", []):  # type: ignore[attr-defined]
        out += _nodes(child)
    return out


def test_health_series_command(cli: Callable[..., tuple[int, str, str]], store: StateStore, dsn: str,
                               schema: str) -> None:
    build_world(store, dsn, schema, datetime.now(UTC))
    # 48 hours: "edge" and "old" (23 h ago) are inside however the clock moved since the world was built.
    code, out, _ = cli("health", "--series", "hour", "--buckets", "48", "--idle", "1h")
    assert code == 0, out
    lines = out.splitlines()
    assert len([line for line in lines if line[:2] == "20"]) == 48  # a row per hour, "2026-..."
    whole = next(line for line in lines if line.startswith("whole window")).split()
    assert whole[2:7] == ["9", "56%", "11%", "11%", "11%"]  # started; completed 5/9; abandoned, waiting, stuck 1/9
    assert "refunds" in out and "langgraph" in out  # the per app and framework table
    code, out, _ = cli("health", "--series", "day", "--json")
    data = json.loads(out)
    assert code == 0 and len(data["buckets"]) == 30 and data["window"]["started"] == 9


async def test_the_series_runs_on_the_async_store(astore: AsyncStateStore) -> None:
    await astore.create_conversation("a", framework="adk", status="completed")
    s = await astore.run(operations.health_series(astore.context, every="day"))
    assert s.window.started == 1 and s.window.completion_rate == 1.0 and len(s.buckets) == 30
