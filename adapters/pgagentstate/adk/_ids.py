"""How an ADK session is addressed in the core: one conversation per (app, user, session id).

ADK allows the same session id under two users or two apps (its own services key sessions by all three),
so the conversation id encodes all three. Each part is percent-encoded, which makes the id unambiguous
and keeps it readable in other tools: ``adk:shop/alice/conv_12345``.
"""

from __future__ import annotations

import uuid
from urllib.parse import quote, unquote

from pgagentstate.codec import DEFAULT_LIMITS, Limits, check_id, check_text
from pgagentstate.errors import InvalidId

PREFIX = "adk:"
#: ``framework`` of every conversation this adapter creates.
FRAMEWORK = "adk"


def conversation_id_for(app_name: str, user_id: str, session_id: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """The core conversation id of an ADK session (use it with the core store's own methods).

    :class:`~pgagentstate.errors.InvalidId` names the part at fault: one that is not text, or the longest
    one when the percent-encoded id is over the limit."""
    parts = {"app_name": app_name, "user_id": user_id, "session_id": session_id}
    for what, part in parts.items():
        (check_text if what == "app_name" else check_id)(part, what, limits)
    cid = PREFIX + "/".join(quote(part, safe="") for part in parts.values())
    if len(cid) > limits.max_id_length:  # ASCII once percent-encoded: a CJK character takes 9 bytes
        longest = max(parts, key=lambda what: len(parts[what].encode()))
        raise InvalidId(
            f"app_name, user_id and session_id make a conversation id of {len(cid)} bytes once "
            f"percent-encoded; the limit is {limits.max_id_length}",
            path=longest,
        )
    return cid


def clean_session_id(session_id: object, *, new: bool = False) -> str:
    """A caller's session id without surrounding blanks (as ADK's own services); ``new``: None or "" make a
    new id. A blank id is an error, not a new session."""
    if new and (session_id is None or session_id == ""):
        return str(uuid.uuid4())
    sid = check_id(session_id, "session_id").strip()
    if not sid:
        raise InvalidId("session_id must not be blank", path="session_id")
    return sid


def session_id_of(conversation_id: str) -> str:
    """The ADK session id inside a conversation id made by :func:`conversation_id_for`."""
    if not conversation_id.startswith(PREFIX):
        raise ValueError(f"{conversation_id!r} is not the conversation of an ADK session")
    parts = conversation_id[len(PREFIX):].split("/")
    if len(parts) != 3:
        raise ValueError(f"{conversation_id!r} is not the conversation of an ADK session")
    return unquote(parts[2])
