"""A hypothesis state machine drives the store and a plain in-memory model side by side."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pgagentstate import (
    AlreadyExists,
    InvalidInput,
    NewEvent,
    NotFound,
    StateRef,
    StateStore,
    VersionConflict,
)

CIDS = st.sampled_from(["a", "b", "c"])
EVENT_IDS = st.one_of(st.none(), st.sampled_from(["e1", "e2", "e3", "e4"]))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)


@dataclass
class ModelConversation:
    events: list[tuple[str | None, Any, int]] = field(default_factory=list)  # (event id, payload, seq)
    last_seq: int = 0
    state: dict[str, Any] | None = None
    state_version: int = 0


class StoreMachine(RuleBasedStateMachine):
    store: StateStore

    def __init__(self) -> None:
        super().__init__()
        self.s = self.store.with_tenant(f"hyp-{uuid.uuid4().hex[:10]}")
        self.model: dict[str, ModelConversation] = {}

    @rule(cid=CIDS)
    def create(self, cid: str) -> None:
        if cid in self.model:
            with pytest.raises(AlreadyExists):
                self.s.create_conversation(cid)
        else:
            self.s.create_conversation(cid)
            self.model[cid] = ModelConversation()

    @rule(cid=CIDS, batch=st.lists(st.tuples(EVENT_IDS, JSON), min_size=1, max_size=3),
          use_expected=st.booleans(), offset=st.integers(-1, 1))
    def append(self, cid: str, batch: list[tuple[str | None, Any]], use_expected: bool, offset: int) -> None:
        ids = [eid for eid, _ in batch if eid is not None]
        if len(ids) != len(set(ids)):
            return  # rejected up front (covered elsewhere)
        conv = self.model.get(cid)
        expected = (conv.last_seq if conv else 0) + offset if use_expected else None
        events = [NewEvent(payload, event_id=eid) for eid, payload in batch]
        if expected is not None and expected < 0:  # no log position is negative: refused before any read
            with pytest.raises(InvalidInput):
                self.s.append_events(cid, events, expected_seq=expected)
            return
        if conv is None:
            with pytest.raises(NotFound):
                self.s.append_events(cid, events, expected_seq=expected)
            return
        known = {eid for eid, _, _ in conv.events if eid is not None}
        fresh = [(eid, p) for eid, p in batch if eid is None or eid not in known]
        if fresh and expected is not None and expected != conv.last_seq:
            with pytest.raises(VersionConflict):
                self.s.append_events(cid, events, expected_seq=expected)
            return
        stored = self.s.append_events(cid, events, expected_seq=expected)
        assert len(stored) == len(batch)
        conv.events.extend((eid, p, conv.last_seq + i) for i, (eid, p) in enumerate(fresh, 1))
        conv.last_seq += len(fresh)

    @rule(cid=CIDS)
    def pop(self, cid: str) -> None:
        popped = self.s.pop_event(cid)
        conv = self.model.get(cid)
        if conv is None or not conv.events:
            assert popped is None
            return
        _, payload, seq = conv.events.pop()
        assert popped is not None and popped.payload == payload and popped.seq == seq
        conv.last_seq += 1  # the log's position moves on: the seq is not handed out again

    @rule(cid=CIDS)
    def clear(self, cid: str) -> None:
        n = self.s.clear_events(cid)
        conv = self.model.get(cid)
        assert n == (len(conv.events) if conv else 0)
        if conv and conv.events:
            conv.events.clear()
            conv.last_seq += 1

    @rule(cid=CIDS, data=st.dictionaries(st.text(max_size=4), JSON, max_size=3), offset=st.integers(-1, 1),
          use_expected=st.booleans())
    def put_state(self, cid: str, data: dict[str, Any], offset: int, use_expected: bool) -> None:
        conv = self.model.get(cid)
        ref = StateRef.conversation(cid)
        expected = max(0, (conv.state_version if conv else 0) + offset) if use_expected else None
        if conv is None:
            with pytest.raises(NotFound):
                self.s.put_state(ref, data, expected_version=expected)
            return
        if expected is not None and expected != conv.state_version:
            with pytest.raises(VersionConflict):
                self.s.put_state(ref, data, expected_version=expected)
            return
        doc = self.s.put_state(ref, data, expected_version=expected)
        conv.state, conv.state_version = data, conv.state_version + 1
        assert doc.version == conv.state_version

    @rule(cid=CIDS)
    def delete(self, cid: str) -> None:
        assert self.s.delete_conversation(cid) == (cid in self.model)
        self.model.pop(cid, None)

    @invariant()
    def store_matches_model(self) -> None:
        for cid in ("a", "b", "c"):
            conv = self.model.get(cid)
            stored = self.s.get_conversation(cid)
            assert (stored is None) == (conv is None)
            if conv is None or stored is None:
                continue
            assert stored.last_seq == conv.last_seq
            events = self.s.list_events(cid)
            assert [(e.payload, e.seq) for e in events] == [(p, seq) for _, p, seq in conv.events]
            doc = self.s.get_state(StateRef.conversation(cid))
            assert (doc.data if doc else None) == conv.state
            assert (doc.version if doc else 0) == conv.state_version


@pytest.mark.slow
def test_store_behaves_like_the_model(store: StateStore) -> None:
    StoreMachine.store = store
    run = StoreMachine.TestCase
    run.settings = settings(max_examples=25, stateful_step_count=25, deadline=None,
                            suppress_health_check=[HealthCheck.too_slow])
    run().runTest()
