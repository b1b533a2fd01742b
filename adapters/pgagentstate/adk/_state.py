"""ADK's state prefixes mapped onto the core's scoped state documents.

``app:k`` lives in ``StateRef.app(app)`` as ``k``, ``user:k`` in ``StateRef.user(app, user)`` as ``k``,
other keys in ``StateRef.conversation(<session's conversation>)``; ``temp:`` keys never reach storage.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.adk.sessions.state import State
from pydantic_core import PydanticSerializationError, to_jsonable_python

from pgagentstate.errors import InvalidPayload

log = logging.getLogger("pgagentstate.adk")


@dataclass
class ScopedDelta:
    """A state delta split by scope, keys without their prefix, values as JSON data."""

    app: dict[str, Any] = field(default_factory=dict)
    user: dict[str, Any] = field(default_factory=dict)
    session: dict[str, Any] = field(default_factory=dict)


def _json_value(key: str, value: Any, strict: bool) -> Any:
    # Rich values (datetimes, pydantic models...) become their JSON form, as in ADK's database service.
    # What has none is stored as a string in its place, as ADK's services do, so that one odd value does
    # not cost the whole turn; strict services refuse it instead.
    try:
        return to_jsonable_python(value)
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        if strict:
            raise InvalidPayload(f"state value of {key!r} is not JSON serialisable: {exc}", path=key) from exc
        try:
            degraded = to_jsonable_python(value, serialize_unknown=True)
        except (PydanticSerializationError, TypeError, ValueError) as again:  # e.g. nested too deep
            raise InvalidPayload(f"state value of {key!r} cannot be stored: {again}", path=key) from again
        log.warning("state value of %r is not JSON serialisable (%s): stored as the string %r", key, exc,
                    degraded if len(str(degraded)) <= 80 else f"{str(degraded)[:77]}...")
        return degraded


def split_delta(state: Mapping[str, Any] | None, *, strict: bool = False) -> ScopedDelta:
    """Split a state (or state delta) by prefix, dropping ``temp:`` keys. A value that is not JSON is
    stored as a string (and logged), or with ``strict`` refused (:class:`InvalidPayload` naming its key)."""
    out = ScopedDelta()
    for key, value in (state or {}).items():
        if key.startswith(State.TEMP_PREFIX):
            continue
        if key.startswith(State.APP_PREFIX):
            out.app[key[len(State.APP_PREFIX):]] = _json_value(key, value, strict)
        elif key.startswith(State.USER_PREFIX):
            out.user[key[len(State.USER_PREFIX):]] = _json_value(key, value, strict)
        else:
            out.session[key] = _json_value(key, value, strict)
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
