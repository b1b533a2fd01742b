"""Who a run is for: tenant, user and conversation, read from the Agents SDK run context.

The SDK passes whatever the application gave ``Runner.run(context=...)`` to tools, dynamic instructions and
(through the ``wrapper`` opt-in) to sessions. We accept three shapes so applications rarely need glue:

* a :class:`StateContext` (or any subclass of it),
* any object with the attributes ``user_id``, ``tenant`` (or ``tenant_id``), ``conversation_id``
  (or ``session_id``) — a dataclass or pydantic model the application already has,
* a mapping with those keys.

Missing or empty values mean "not known"; callers fall back to what they were constructed with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents import RunContextWrapper

_TENANT_KEYS = ("tenant", "tenant_id")
_USER_KEYS = ("user_id",)
_CONVERSATION_KEYS = ("conversation_id", "session_id")


@dataclass
class StateContext:
    """A ready-made run context carrying the identity pgagentstate needs.

    Pass it as ``Runner.run(agent, input, context=StateContext(user_id="u1", tenant="acme"))`` or subclass it
    to add the application's own fields.
    """

    user_id: str = ""
    tenant: str = ""
    conversation_id: str = ""


@dataclass(frozen=True, slots=True)
class Identity:
    """The identity found in a run context; ``None`` means the context did not say."""

    user_id: str | None = None
    tenant: str | None = None
    conversation_id: str | None = None


def _pick(context: Any, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = context.get(key) if isinstance(context, Mapping) else getattr(context, key, None)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise TypeError(f"run context field {key!r} must be a string, not {type(value).__name__}")
        return value
    return None


def identity_of(context: Any) -> Identity:
    """Read tenant, user and conversation from a run context (or a ``RunContextWrapper`` around one)."""
    if isinstance(context, RunContextWrapper):
        context = context.context
    if context is None:
        return Identity()
    return Identity(
        user_id=_pick(context, _USER_KEYS),
        tenant=_pick(context, _TENANT_KEYS),
        conversation_id=_pick(context, _CONVERSATION_KEYS),
    )
