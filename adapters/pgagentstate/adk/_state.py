"""ADK's state prefixes mapped onto the core's scoped state documents.

``app:k`` lives in ``StateRef.app(app)`` as ``k``, ``user:k`` in ``StateRef.user(app, user)`` as ``k``,
other keys in ``StateRef.conversation(<session's conversation>)``; ``temp:`` keys never reach storage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.adk.sessions.state import State
from pydantic_core import PydanticSerializationError, to_jsonable_python

from pgagentstate.errors import InvalidPayload


@dataclass
class ScopedDelta:
    """A state delta split by scope, keys without their prefix, values as JSON data."""

    app: dict[str, Any] = field(default_factory=dict)
    user: dict[str, Any] = field(default_factory=dict)
    session: dict[str, Any] = field(default_factory=dict)


def _json_value(key: str, value: Any) -> Any:
    # ADK's own database service converts rich values (datetimes, pydantic models...) to their JSON
    # form; do the same, but refuse what has none instead of storing its repr.
    try:
        return to_jsonable_python(value)
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        raise InvalidPayload(f"state value of {key!r} is not JSON serialisable: {exc}", path=key) from exc


def split_delta(state: Mapping[str, Any] | None) -> ScopedDelta:
    """Split a state (or state delta) by prefix, dropping ``temp:`` keys."""
    out = ScopedDelta()
    for key, value in (state or {}).items():
        if key.startswith(State.TEMP_PREFIX):
            continue
        if key.startswith(State.APP_PREFIX):
            out.app[key[len(State.APP_PREFIX):]] = _json_value(key, value)
        elif key.startswith(State.USER_PREFIX):
            out.user[key[len(State.USER_PREFIX):]] = _json_value(key, value)
        else:
            out.session[key] = _json_value(key, value)
    return out


def merge_state(
    session: Mapping[str, Any] | None, app: Mapping[str, Any] | None, user: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The state a Session shows: its own keys plus ``app:`` and ``user:`` keys with their prefixes."""
    merged = dict(session or {})
    for key, value in (app or {}).items():
        merged[State.APP_PREFIX + key] = value
    for key, value in (user or {}).items():
        merged[State.USER_PREFIX + key] = value
    return merged
