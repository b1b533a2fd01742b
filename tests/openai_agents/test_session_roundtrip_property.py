"""Property: any JSON item reads back equal, with the same Python types, in order (SQLite and Postgres)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oa_samples import SessionFactory

scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
items = st.builds(
    lambda kind, value: {"type": kind, "payload": value},
    st.sampled_from(["message", "function_call", "function_call_output", "reasoning"]),
    json_values,
)


def canonical(value: Any) -> str:
    """Equal JSON with equal types (json.dumps writes 1 and 1.0 differently)."""
    return json.dumps(value, sort_keys=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(items, min_size=1, max_size=4), min_size=1, max_size=4))
async def test_any_json_round_trips(session_factory: SessionFactory, batches: list[list[dict[str, Any]]]) -> None:
    s = session_factory(f"prop-{uuid.uuid4().hex}")
    for batch in batches:
        await s.add_items(batch)  # type: ignore[arg-type]
    flat = [item for batch in batches for item in batch]
    got = await s.get_items()
    assert [canonical(i) for i in got] == [canonical(i) for i in flat]
    assert await s.get_items(limit=2) == flat[-2:]
