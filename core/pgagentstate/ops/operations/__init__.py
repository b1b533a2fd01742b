"""Operator operations: conversation health (:mod:`.health`) and its time series (:mod:`.health_series`),
listings (:mod:`.listing`), timelines and time travel (:mod:`.timeline`), checkpointed threads read as plain
data (:mod:`.checkpoints`), one rendering of every framework's messages and tool calls (:mod:`.rendering`),
retention (:mod:`.retention`), export and erase of one user (:mod:`.privacy`), statistics (:mod:`.stats`) and
the checks of ``pgagentstate doctor`` (:mod:`.doctor`).

Like every operation these are generators run by either store::

    from pgagentstate.ops import operations
    report = store.run(operations.health(store.context, idle=3600))

They are not methods of the stores because applications rarely need them; the CLI and the timeline viewer
(:mod:`pgagentstate.ui`) call them this way, and so can an application's own admin endpoints.
"""

from __future__ import annotations

from .checkpoints import ThreadMessage, ThreadSignal, ThreadValues, ThreadView, thread_view
from .doctor import Check, PoolSettings, autovacuum_check, doctor, pool_checks
from .health import DEFAULT_IDLE, HEALTH_CATEGORIES, OPEN_STATUSES, Health, StuckStep, health, health_of
from .health_series import QUANTILES, HealthGroup, HealthPoint, HealthSeries, health_series
from .jsonable import to_jsonable
from .listing import ConversationSummary, list_conversations, tenants
from .privacy import erase_user, export_user, read_archive
from .rendering import call_names, message_text, tool_call, tool_result
from .retention import GC_LOCK_NAME, GC_TASKS, GcReport, RetentionPolicy, gc, gc_plan
from .stats import Stats, TableStats, stats
from .timeline import (
    Change,
    ScratchItem,
    SnapshotSummary,
    StateVersion,
    Timeline,
    TimelineEntry,
    diff,
    state_at,
    timeline,
)

__all__ = [
    "DEFAULT_IDLE",
    "GC_LOCK_NAME",
    "GC_TASKS",
    "HEALTH_CATEGORIES",
    "OPEN_STATUSES",
    "QUANTILES",
    "Change",
    "Check",
    "ConversationSummary",
    "GcReport",
    "Health",
    "HealthGroup",
    "HealthPoint",
    "HealthSeries",
    "PoolSettings",
    "RetentionPolicy",
    "ScratchItem",
    "SnapshotSummary",
    "StateVersion",
    "Stats",
    "StuckStep",
    "TableStats",
    "ThreadMessage",
    "ThreadSignal",
    "ThreadValues",
    "ThreadView",
    "Timeline",
    "TimelineEntry",
    "autovacuum_check",
    "call_names",
    "diff",
    "doctor",
    "erase_user",
    "export_user",
    "gc",
    "gc_plan",
    "health",
    "health_of",
    "health_series",
    "list_conversations",
    "message_text",
    "pool_checks",
    "read_archive",
    "state_at",
    "stats",
    "tenants",
    "thread_view",
    "timeline",
    "to_jsonable",
    "tool_call",
    "tool_result",
]
