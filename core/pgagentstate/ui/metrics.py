"""Conversation health as OpenMetrics text, for Prometheus to scrape at the viewer's ``/metrics``.

The figures are those of :func:`~pgagentstate.ops.operations.health_series` over one rolling window (the
last 24 hours unless ``?window=`` says otherwise), per ``app`` and ``framework``: conversations that
started in the window, how many of them are in each health now, their rates, stuck steps, duplicate side
effects stopped and time-to-completion quantiles. Every family is a gauge: the rows behind them are
deleted by retention (``pgagentstate gc``), so no figure only grows, and a counter that falls would read
as a restart to ``rate()``. Prometheus keeps the history; graph the gauges as they are.

The durable inbox's figures (:class:`~pgagentstate.models.InboxMetrics`: queue depth, the oldest unanswered
message's age, stale leases, recoveries) follow, for the whole tenant and now, not per window.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..models import InboxMetrics
from ..ops.operations import HEALTH_CATEGORIES, QUANTILES, HealthPoint, HealthSeries

#: Content type of the OpenMetrics text format 1.0 (Prometheus asks for it in its Accept header).
CONTENT_TYPE = "application/openmetrics-text; version=1.0.0"

#: (name, help) of every family, in the order written.
FAMILIES: tuple[tuple[str, str], ...] = (
    ("pgagentstate_health_window_seconds", "Length of the window the conversation figures cover."),
    ("pgagentstate_health_idle_seconds", "An open conversation idle this long counts as abandoned."),
    ("pgagentstate_conversations_started", "Conversations started in the window."),
    ("pgagentstate_conversations", "Conversations started in the window, by their health now."),
    ("pgagentstate_conversations_ratio", "Share of the conversations started in the window in each health now."),
    ("pgagentstate_conversations_stuck", "Conversations started in the window with a step past its lease."),
    ("pgagentstate_conversations_stuck_ratio", "Share of the conversations started in the window with a stuck step."),
    ("pgagentstate_stuck_steps", "Steps in progress past their lease, of the conversations started in the window."),
    (
        "pgagentstate_duplicate_side_effects_stopped",
        "Replays of a recorded side effect the ledger stopped, for conversations started in the window.",
    ),
    (
        "pgagentstate_time_to_completion_seconds",
        "Quantiles of start-to-completion time of the conversations started in the window and completed.",
    ),
)


#: (name, help) of the inbox's families (no labels but ``state``: the queue is the tenant's).
INBOX_FAMILIES: tuple[tuple[str, str], ...] = (
    (
        "pgagentstate_inbox_messages",
        "Inbox messages accepted and not answered (waiting, running) or given up on (failed).",
    ),
    ("pgagentstate_inbox_depth", "Inbox messages accepted and not answered yet (waiting + running)."),
    ("pgagentstate_inbox_oldest_unanswered_seconds", "Age of the oldest inbox message not answered yet."),
    ("pgagentstate_inbox_conversations_queued", "Conversations with inbox messages not answered yet."),
    ("pgagentstate_inbox_stale_leases", "Turns whose worker let its lease run out, not taken over yet."),
    ("pgagentstate_inbox_recoveries", "Turns another worker took over after their worker's lease ran out."),
)


def _inbox_samples(name: str, inbox: InboxMetrics) -> Iterator[tuple[str, float]]:
    if name == "pgagentstate_inbox_messages":
        for state in ("waiting", "running", "failed"):
            yield _labels(state=state), getattr(inbox, state)
    elif name == "pgagentstate_inbox_depth":
        yield "", inbox.depth
    elif name == "pgagentstate_inbox_oldest_unanswered_seconds" and inbox.oldest_seconds is not None:
        yield "", inbox.oldest_seconds
    elif name == "pgagentstate_inbox_conversations_queued":
        yield "", inbox.conversations
    elif name == "pgagentstate_inbox_stale_leases":
        yield "", inbox.stale_leases
    elif name == "pgagentstate_inbox_recoveries":
        yield "", inbox.recoveries


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _samples(name: str, app: str, framework: str, point: HealthPoint) -> Iterator[tuple[str, float]]:
    """The samples of family ``name`` for one (app, framework): (labels, value)."""
    base = {"app": app, "framework": framework}
    if name == "pgagentstate_conversations_started":
        yield _labels(**base), point.started
    elif name == "pgagentstate_conversations":
        for health in HEALTH_CATEGORIES:
            yield _labels(**base, health=health), point.health[health]
    elif name == "pgagentstate_conversations_ratio" and point.started:
        for health in HEALTH_CATEGORIES:
            yield _labels(**base, health=health), point.health[health] / point.started
    elif name == "pgagentstate_conversations_stuck":
        yield _labels(**base), point.with_stuck_steps
    elif name == "pgagentstate_conversations_stuck_ratio" and point.stuck_rate is not None:
        yield _labels(**base), point.stuck_rate
    elif name == "pgagentstate_stuck_steps":
        yield _labels(**base), point.stuck_steps
    elif name == "pgagentstate_duplicate_side_effects_stopped":
        yield _labels(**base), point.duplicates_stopped
    elif name == "pgagentstate_time_to_completion_seconds":
        for q in QUANTILES:
            value = point.completion_seconds[str(q)]
            if value is not None:
                yield _labels(**base, quantile=str(q)), value


def render(series: HealthSeries, inbox: InboxMetrics | None = None) -> str:
    """``series`` (one bucket: the window) and ``inbox`` as OpenMetrics text, ending with ``# EOF``."""
    lines: list[str] = []
    for name, help_text in FAMILIES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        if name == "pgagentstate_health_window_seconds":
            lines.append(f"{name} {_number(series.every_seconds * len(series.buckets))}")
        elif name == "pgagentstate_health_idle_seconds":
            lines.append(f"{name} {_number(series.idle_seconds)}")
        else:
            for group in series.groups:
                lines += [
                    f"{name}{labels} {_number(v)}"
                    for labels, v in _samples(name, group.app, group.framework, group.window)
                ]
    if inbox is not None:
        for name, help_text in INBOX_FAMILIES:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
            lines += [f"{name}{labels} {_number(v)}" for labels, v in _inbox_samples(name, inbox)]
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


__all__ = ["CONTENT_TYPE", "FAMILIES", "INBOX_FAMILIES", "render"]
