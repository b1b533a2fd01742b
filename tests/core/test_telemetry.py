"""Operation counts, conflicts and retries, and OpenTelemetry spans around store operations."""

from __future__ import annotations

import pytest

from pgagentstate import NewEvent, StateRef, StateStore, VersionConflict


def test_stats_count_operations_conflicts_and_retries(store: StateStore) -> None:
    store.create_conversation("c1")
    store.append_events("c1", [NewEvent(1, event_id="e1")])
    store.append_events("c1", [NewEvent(1, event_id="e1")])  # re-delivery: fast path fails, fallback skips it
    store.put_state(StateRef.conversation("c1"), {"a": 1}, expected_version=0)
    with pytest.raises(VersionConflict):
        store.put_state(StateRef.conversation("c1"), {"a": 2}, expected_version=0)
    stats = store.with_tenant("other").stats()  # clones share the counters
    assert stats["operations"]["events.append"] == 2
    assert stats["operations"]["conversations.create"] == 1
    assert stats["retries"]["events.append"] == 1
    assert stats["conflicts"] == {"state.write": 1}
    assert stats["conflict_rate"] == pytest.approx(1 / 5)


def test_spans_carry_operation_conversation_and_outcome(store: StateStore) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # type: ignore[attr-defined]
    store.create_conversation("c1")
    store.append_events("c1", [NewEvent({"t": 1})])
    with pytest.raises(VersionConflict):
        store.append_events("c1", [NewEvent({"t": 2})], expected_seq=0)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    ok = [s for s in exporter.get_finished_spans() if s.name == "pgagentstate.events.append"]
    assert len(ok) == 2
    assert ok[0].attributes["pgagentstate.conversation_id"] == "c1"
    assert ok[0].attributes["pgagentstate.tenant"] == "default"
    assert ok[1].attributes["pgagentstate.conflict"] is True
    assert ok[1].status.status_code.name == "ERROR"
    assert "pgagentstate.conversations.create" in spans
