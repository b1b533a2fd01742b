"""What a store did: operation counts, conflicts, retries and errors, and OpenTelemetry spans.

Counters are per process (``store.stats()``); spans go to whatever OpenTelemetry tracer provider the
application configured (``pip install 'pgagentstate[otel]'``), one span per store operation named
``pgagentstate.<module>.<operation>`` with the tenant, the conversation id when there is one, the number
of retries and whether it ended in a conflict. Without OpenTelemetry installed nothing is traced.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from .errors import ConflictError, PgAgentStateError

try:  # optional dependency
    from opentelemetry import trace as _otel_trace
except ImportError:  # pragma: no cover - exercised when opentelemetry is absent
    _otel_trace = None  # type: ignore[assignment]


def operation_name(op: Any) -> tuple[str, str | None]:
    """``("events.append", conversation_id or None)`` for an operation generator."""
    code = getattr(op, "gi_code", None)
    frame = getattr(op, "gi_frame", None)
    if code is None or frame is None:
        return type(op).__name__, None
    module = str(frame.f_globals.get("__name__", "")).rsplit(".", 1)[-1]
    conversation = frame.f_locals.get("conversation_id")
    return f"{module}.{code.co_name.rstrip('_')}", conversation if isinstance(conversation, str) else None


class Observation:
    """One running operation."""

    __slots__ = ("_span", "_telemetry", "name", "retries")

    def __init__(self, telemetry: Telemetry, name: str, span: Any) -> None:
        self._telemetry = telemetry
        self._span = span
        self.name = name
        self.retries = 0

    def retried(self) -> None:
        self.retries += 1

    def finish(self, error: BaseException | None) -> None:
        self._telemetry.record(self.name, self.retries, error)
        span = self._span
        if span is None:
            return
        span.set_attribute("pgagentstate.retries", self.retries)
        if error is not None:
            span.set_attribute("pgagentstate.conflict", isinstance(error, ConflictError))
            span.set_attribute("pgagentstate.error", type(error).__name__)
            span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR, str(error)[:200]))
        span.end()


class Telemetry:
    """Counters shared by a store and its ``with_tenant`` clones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.operations: Counter[str] = Counter()
        self.conflicts: Counter[str] = Counter()
        self.retries: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()

    def observe(self, op: Any, tenant: str) -> Observation:
        name, conversation = operation_name(op)
        span = None
        if _otel_trace is not None:
            attributes: dict[str, Any] = {"pgagentstate.tenant": tenant, "pgagentstate.operation": name}
            if conversation is not None:
                attributes["pgagentstate.conversation_id"] = conversation
            span = _otel_trace.get_tracer("pgagentstate").start_span(f"pgagentstate.{name}", attributes=attributes)
        return Observation(self, name, span)

    def record(self, name: str, retries: int, error: BaseException | None) -> None:
        with self._lock:
            self.operations[name] += 1
            if retries:
                self.retries[name] += retries
            if isinstance(error, ConflictError):
                self.conflicts[name] += 1
            elif isinstance(error, PgAgentStateError):
                self.errors[name] += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            total = sum(self.operations.values())
            return {
                "operations": dict(self.operations),
                "conflicts": dict(self.conflicts),
                "retries": dict(self.retries),
                "errors": dict(self.errors),
                "conflict_rate": sum(self.conflicts.values()) / total if total else 0.0,
                "retry_rate": sum(self.retries.values()) / total if total else 0.0,
            }
