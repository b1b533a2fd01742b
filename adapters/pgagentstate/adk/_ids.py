"""How an ADK session is addressed in the core: one conversation per (app, user, session id).

ADK allows the same session id under two users or two apps (its own services key sessions by all three),
so the conversation id encodes all three. Each part is percent-encoded, which makes the id unambiguous
and keeps it readable in other tools: ``adk:shop/alice/conv_12345``.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

PREFIX = "adk:"
#: ``framework`` of every conversation this adapter creates.
FRAMEWORK = "adk"


def conversation_id_for(app_name: str, user_id: str, session_id: str) -> str:
    """The core conversation id of an ADK session (use it with the core store's own methods)."""
    return PREFIX + "/".join(quote(part, safe="") for part in (app_name, user_id, session_id))


def session_id_of(conversation_id: str) -> str:
    """The ADK session id inside a conversation id made by :func:`conversation_id_for`."""
    if not conversation_id.startswith(PREFIX):
        raise ValueError(f"{conversation_id!r} is not the conversation of an ADK session")
    parts = conversation_id[len(PREFIX):].split("/")
    if len(parts) != 3:
        raise ValueError(f"{conversation_id!r} is not the conversation of an ADK session")
    return unquote(parts[2])
