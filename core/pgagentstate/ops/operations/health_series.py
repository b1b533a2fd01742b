"""Conversation health over time: per hour or day, per app and framework, how the conversations that started
then are doing now (completed, abandoned, waiting for the customer, with a stuck step), how long the
completed ones took, and how many duplicate side effects the ledger stopped for them.

Buckets are cohorts by start time (``created_at``), counted once each under their health as of ``now``:
the store records a conversation's current status and its last activity, not when its status changed, and
``created_at`` is the one time column it can range-scan without making appends non-HOT (see
``sql/operations/health_series.sql`` for the cost). A cohort younger than ``idle`` cannot have abandoned
conversations yet: they are still counted as active or waiting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ...errors import InvalidInput
from ..base import Ctx, Op, Stmt, Tx
from .args import positive, seconds
from .health import DEFAULT_IDLE, HEALTH_CATEGORIES

HOUR = 3600.0
DAY = 86400.0
#: The two views an operator watches: the last 24 hours by hour, the last 30 days by day.
DEFAULT_BUCKETS = {HOUR: 24, DAY: 30}
#: Time-to-completion percentiles reported per bucket.
QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99)
#: At most this many buckets per query (a year of days; 16 days of hours at 384).
MAX_BUCKETS = 400


@dataclass(frozen=True, slots=True)
class HealthPoint:
    """The conversations that started in one bucket (of one app and framework, or all of them), as of now.

    ``health`` has every category of :data:`~.health.HEALTH_CATEGORIES`; the rates are shares of
    ``started`` (None when nothing started). ``completion_seconds`` maps each of :data:`QUANTILES` (as
    text: ``"0.5"``) to the time from start to completion of the completed ones (None when none
    completed); ``completion_seconds_sum`` / ``health["completed"]`` is their mean.
    """

    started: int
    health: dict[str, int]
    with_stuck_steps: int
    stuck_steps: int
    duplicates_stopped: int
    completion_seconds: dict[str, float | None]
    completion_seconds_sum: float
    completion_rate: float | None
    abandonment_rate: float | None
    waiting_customer_rate: float | None
    stuck_rate: float | None


@dataclass(frozen=True, slots=True)
class HealthGroup:
    """One app and framework: the whole window, and one point per bucket (empty buckets included)."""

    app: str
    framework: str
    window: HealthPoint
    points: list[HealthPoint]


@dataclass(frozen=True, slots=True)
class HealthSeries:
    """Conversation health per bucket of ``every_seconds`` starting at each of ``buckets`` (UTC).

    ``total`` has every app and framework together, one point per bucket, and ``window`` the whole window
    (its percentiles computed over every completion in it, not averaged from the buckets'); ``groups``
    the same per (app, framework) that started a conversation in the window.
    """

    tenant: str
    every_seconds: float
    idle_seconds: float
    now: datetime
    buckets: list[datetime]
    total: list[HealthPoint]
    window: HealthPoint
    groups: list[HealthGroup] = field(default_factory=list)


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _point(row: Any | None) -> HealthPoint:
    """A point from one row of ``ops_health_series`` (its figures start at column 5), or an empty one."""
    if row is None:
        return _point((None,) * 5 + (0,) * 10 + (None, 0.0))
    started = int(row[5])
    health = dict(zip(HEALTH_CATEGORIES, (int(v) for v in row[6:12]), strict=True))
    quantiles = row[15]
    return HealthPoint(
        started=started,
        health=health,
        with_stuck_steps=int(row[12]),
        stuck_steps=int(row[13]),
        duplicates_stopped=int(row[14]),
        completion_seconds={
            str(q): (float(quantiles[i]) if quantiles is not None else None) for i, q in enumerate(QUANTILES)
        },
        completion_seconds_sum=float(row[16]),
        completion_rate=_rate(health["completed"], started),
        abandonment_rate=_rate(health["abandoned"], started),
        waiting_customer_rate=_rate(health["waiting_customer"], started),
        stuck_rate=_rate(int(row[12]), started),
    )


def _every(value: float | timedelta | str) -> float:
    if value in ("hour", "hourly"):
        return HOUR
    if value in ("day", "daily"):
        return DAY
    if isinstance(value, str):
        raise InvalidInput(f"unknown bucket {value!r}; use 'hour', 'day' or seconds", path="every")
    every = seconds(value, "every")
    if not every or every < 60:
        raise InvalidInput("every must be at least 60 seconds", path="every")
    return every


def health_series(
    ctx: Ctx,
    *,
    every: float | timedelta | str = HOUR,
    buckets: int | None = None,
    idle: float | timedelta = DEFAULT_IDLE,
    app: str | None = None,
    framework: str | None = None,
    now: datetime | None = None,
    rolling: bool = False,
) -> Op[HealthSeries]:
    """Conversation health per bucket of ``every`` (``"hour"``, ``"day"`` or seconds) over the last
    ``buckets`` buckets (default 24 hours, 30 days), the current one included and partial.

    Buckets start on whole multiples of ``every`` since the Unix epoch (UTC hours and days); with
    ``rolling`` they end at ``now`` instead (``every=86400, buckets=1, rolling=True`` is "the last 24
    hours", what ``/metrics`` reports). ``now`` defaults to the clock of this process.
    """
    step = _every(every)
    count = positive(buckets if buckets is not None else DEFAULT_BUCKETS.get(step, 24), "buckets")
    if count > MAX_BUCKETS:
        raise InvalidInput(f"buckets must be at most {MAX_BUCKETS}", path="buckets")
    idle_s = seconds(idle, "idle")
    assert idle_s is not None
    now = now or datetime.now(UTC)
    if now.tzinfo is None:
        raise InvalidInput("now must be timezone-aware", path="now")
    if rolling:
        last = now - timedelta(seconds=step)
    else:
        epoch = now.timestamp()
        last = datetime.fromtimestamp(epoch - epoch % step, UTC)
    starts = [last - timedelta(seconds=step * i) for i in range(count - 1, -1, -1)]
    params = {
        "every": step,
        "origin": starts[0],
        "until": now,
        "now": now,
        "idle": idle_s,
        "app": app,
        "framework": framework,
    }
    (rows,) = yield Tx((Stmt("ops_health_series", params, "all"),), snapshot=True)
    index = {start: i for i, start in enumerate(starts)}
    total: list[HealthPoint] = [_point(None)] * count
    grouped: dict[tuple[str, str], list[HealthPoint]] = {}
    window = _point(None)
    window_groups: dict[tuple[str, str], HealthPoint] = {}
    for row in rows:
        bucket, per_bucket, per_group, group = row[0], row[1], row[2], (row[3], row[4])
        if per_bucket and per_group:
            grouped.setdefault(group, [_point(None)] * count)[index[bucket.astimezone(UTC)]] = _point(row)
        elif per_bucket:
            total[index[bucket.astimezone(UTC)]] = _point(row)
        elif per_group:
            window_groups[group] = _point(row)
        else:
            window = _point(row)
    return HealthSeries(
        tenant=ctx.tenant,
        every_seconds=step,
        idle_seconds=idle_s,
        now=now,
        buckets=starts,
        total=total,
        window=window,
        groups=[HealthGroup(a, f, window_groups[(a, f)], grouped[(a, f)]) for a, f in sorted(grouped)],
    )
