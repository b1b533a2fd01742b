"""The viewer's health over time: ``/api/health/series``, ``/metrics`` scraped and parsed as OpenMetrics, and
the chart drawn by a real headless Chromium (its DOM checked against the buckets, and a screenshot)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pgagentstate import StateStore
from pgagentstate.ui.server import ViewerServer, make_server

from .test_health_series import build_world
from .test_ui import _chromium, _png_colours, get


@pytest.fixture
def viewer(store: StateStore, dsn: str, schema: str) -> Iterator[str]:
    build_world(store, dsn, schema, datetime.now(UTC))
    server: ViewerServer = make_server(store, port=0, idle=3600)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_series_api(viewer: str) -> None:
    status, headers, body = get(f"{viewer}/api/health/series")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    s = json.loads(body)
    assert len(s["buckets"]) == 24 and len(s["total"]) == 24 and s["every_seconds"] == 3600
    assert sum(p["started"] for p in s["total"]) == s["window"]["started"]
    assert s["window"]["health"]["abandoned"] == 1 and s["window"]["duplicates_stopped"] == 2
    s = json.loads(get(f"{viewer}/api/health/series?every=day&framework=adk")[2])
    assert len(s["buckets"]) == 30 and s["window"]["started"] == 4
    assert get(f"{viewer}/api/health/series?every=week")[0] == 400


def _scrape(viewer: str, query: str = "") -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    status, headers, body = get(f"{viewer}/metrics{query}")
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    text = body.decode()
    assert text.endswith("# EOF\n")
    # The strict OpenMetrics parser raises on anything malformed (missing # EOF, bad escapes, a TYPE twice).
    families = list(text_string_to_metric_families(text))
    assert all(f.type == "gauge" and f.documentation for f in families)
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in families:
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def test_metrics_scrape_parses_as_openmetrics_with_the_worlds_figures(viewer: str) -> None:
    m = _scrape(viewer)

    def v(name: str, app: str, framework: str, **extra: str) -> float:
        return m[(name, tuple(sorted({"app": app, "framework": framework, **extra}.items())))]

    assert m[("pgagentstate_health_window_seconds", ())] == 86400
    assert m[("pgagentstate_health_idle_seconds", ())] == 3600
    # The last 24 h, per app and framework. ("", "core") holds "edge" and "old", 23 h before the hour: whether
    # "old" is in a rolling 24 h window depends on the minute, so that group is not checked.
    assert v("pgagentstate_conversations_started", "refunds", "adk") == 4
    assert v("pgagentstate_conversations", "refunds", "adk", health="abandoned") == 1
    assert v("pgagentstate_conversations", "refunds", "adk", health="waiting_customer") == 1
    assert v("pgagentstate_conversations", "refunds", "adk", health="failed") == 1
    assert v("pgagentstate_conversations_ratio", "refunds", "adk", health="abandoned") == 0.25
    assert v("pgagentstate_conversations_stuck", "refunds", "adk") == 1
    assert v("pgagentstate_conversations_stuck_ratio", "refunds", "adk") == 0.25
    assert v("pgagentstate_stuck_steps", "refunds", "adk") == 1
    assert v("pgagentstate_conversations_started", "refunds", "langgraph") == 3
    assert v("pgagentstate_conversations_ratio", "refunds", "langgraph", health="completed") == 1.0
    assert v("pgagentstate_duplicate_side_effects_stopped", "refunds", "langgraph") == 2
    assert v("pgagentstate_time_to_completion_seconds", "refunds", "langgraph", quantile="0.5") == 1800
    assert v("pgagentstate_time_to_completion_seconds", "refunds", "langgraph", quantile="0.9") == 1800
    # No completion in the adk group: no quantile sample rather than a made-up value.
    assert not any(k[0] == "pgagentstate_time_to_completion_seconds" and ("framework", "adk") in k[1] for k in m)

    # The last 10 minutes hold none of these conversations: the families stay, without samples; the
    # inbox is empty (and has no oldest message).
    m = _scrape(viewer, "?window=10m")
    assert {k: v for k, v in m.items() if not k[0].startswith("pgagentstate_inbox_")} == {
        ("pgagentstate_health_window_seconds", ()): 600, ("pgagentstate_health_idle_seconds", ()): 3600}
    assert m[("pgagentstate_inbox_depth", ())] == 0
    assert ("pgagentstate_inbox_oldest_unanswered_seconds", ()) not in m


def test_metrics_scrape_has_the_inbox_queue(store: StateStore, viewer: str) -> None:
    """The durable inbox's queue depth, oldest unanswered message and conversations queued, for Prometheus."""
    store.accept("inbox_a", {"text": "oi"}, key="d1")
    store.accept("inbox_a", {"text": "meu email"}, key="d2")
    store.accept("inbox_b", {"text": "oi"}, key="d1")
    store.accept("inbox_b", {"text": "oi"}, key="d1")  # the same delivery again: one message
    m = _scrape(viewer)
    assert m[("pgagentstate_inbox_depth", ())] == 3
    assert m[("pgagentstate_inbox_messages", (("state", "waiting"),))] == 3
    assert m[("pgagentstate_inbox_messages", (("state", "running"),))] == 0
    assert m[("pgagentstate_inbox_conversations_queued", ())] == 2
    assert m[("pgagentstate_inbox_oldest_unanswered_seconds", ())] >= 0
    assert m[("pgagentstate_inbox_stale_leases", ())] == 0 and m[("pgagentstate_inbox_recoveries", ())] == 0


def test_label_values_are_escaped(store: StateStore, viewer: str) -> None:
    store.create_conversation("odd", app='a "quoted"\\app\nname', framework="x")
    m = _scrape(viewer)
    labels = (("app", 'a "quoted"\\app\nname'), ("framework", "x"))
    assert m[("pgagentstate_conversations_started", labels)] == 1


def _buckets(dom: str, chart: str) -> list[dict[str, str]]:
    """The ``<g class="bucket">`` elements of one chart's svg, as their attributes."""
    svg = re.search(rf'<svg id="{chart}".*?</svg>', dom, re.S)
    assert svg, f"no svg #{chart}"
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', g)) for g in re.findall(r'<g class="bucket"([^>]*)>', svg[0])]


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_the_chart_renders_in_headless_chromium(viewer: str, tmp_path: Path) -> None:
    browser = _chromium()
    assert browser is not None
    series = json.loads(get(f"{viewer}/api/health/series")[2])
    base = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,900", "--virtual-time-budget=10000",
    ]
    url = f"{viewer}/"
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout
    assert 'data-trends-loaded="1"' in dom and 'data-buckets="24"' in dom, dom[:3000]

    # One stacked bar per hour, each with the started count of its bucket and a segment per health.
    bars = _buckets(dom, "trend-outcomes")
    assert len(bars) == 24
    assert [b["data-started"] for b in bars] == [str(p["started"]) for p in series["total"]]
    assert sum(int(b["data-started"]) for b in bars) == series["window"]["started"] >= 7
    assert dom.count('class="seg abandoned"') == 1 and dom.count('class="seg waiting_customer"') == 1
    # Rates and time to completion: a point per bucket that has a value.
    with_start = sum(1 for p in series["total"] if p["started"])
    with_completion = sum(1 for p in series["total"] if p["completion_seconds"]["0.5"] is not None)
    assert dom.count('class="pt completion"') == with_start and with_start >= 2
    assert dom.count('class="pt p50"') == with_completion and with_completion >= 2
    # A line joins neighbouring buckets only: hours A and B are joined, the window's first hour stands alone.
    assert dom.count('class="line completion"') == 1
    guards = _buckets(dom, "trend-guards")
    assert len(guards) == 24 and sum(int(g["data-duplicates"]) for g in guards) == 2
    assert sum(int(g["data-stuck"]) for g in guards) == 1
    assert re.search(r'data-figure="duplicates stopped">duplicates stopped<b>2</b>', dom)

    shot = tmp_path / "health.png"
    subprocess.run([*base, f"--screenshot={shot}", url], capture_output=True, text=True, timeout=120, check=True)
    assert shot.stat().st_size > 10_000 and _png_colours(shot) > 50
    if os.environ.get("PGAGENTSTATE_SCREENSHOTS"):  # keep it to look at: PGAGENTSTATE_SCREENSHOTS=/some/dir
        shutil.copy(shot, Path(os.environ["PGAGENTSTATE_SCREENSHOTS"]) / "health_chart.png")
