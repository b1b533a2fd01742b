"""Distillation: a conversation's new messages become durable facts in its user's long-term memory.

``store.distill(conversation_id, distiller)`` reads the events past the conversation's watermark, asks the
extractor for facts, and writes them — consolidated with the user's existing facts — in the transaction
that advances the watermark. It runs under ``run_once`` keyed by the conversation and the log position it
covers, so a position is distilled once: a crash before the commit leaves neither facts nor watermark (the
next attempt, after the lease, does it all), a crash after it leaves a watermark that makes the retry a
no-op. Nothing here runs in a request: a worker (:class:`DistillWorker`, ``python -m
pgagentstate.ui.distill_worker --follow``) picks up conversations whose log moved past their watermark; an
adapter's after-turn hook only wakes it (:meth:`AsyncStateStore.request_distill`, a NOTIFY).

Consolidation: a fact has a ``topic`` (``"email"``); a new fact on a topic replaces the older one — the
item's version goes up and the superseded text moves to the item's ``history`` with when it stopped being
true (as Zep's ``invalid_at``) — and a fact equal to what is known writes nothing. Facts without a topic
are keyed by their normalised text, so the same fact never piles up twice.

The stored value serves every adapter: ``{"topic", "text", "facts": [text], "source", "history"}`` — ADK's
memory service reads ``text``, the Agents SDK's memory tools read ``topic`` and ``facts``.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Message:
    """One message of the conversation as the extractor sees it."""

    seq: int
    role: str  # "user" (the customer) or "assistant" (the agent), or the event's author
    text: str
    #: False for context: a message distilled before (just before the watermark), given so that a new one
    #: can be understood (the question a new answer answers); facts come from new messages only.
    new: bool = True


@dataclass(frozen=True, slots=True)
class Fact:
    """A durable fact. ``topic`` makes it replace older facts on the same topic."""

    text: str
    topic: str | None = None


Extractor = Callable[[Sequence[Message], Sequence[Fact]], "Sequence[Fact] | Awaitable[Sequence[Fact]]"]

#: Where each adapter keeps a user's memories (``{app}``, ``{user}``, ``{conversation}`` are filled in):
#: ADK's memory service, the Agents SDK's memory tools; others (LangGraph, LangMem's default) "memories/{user}".
DISTILL_CHANNEL = "pgagentstate_distill"
NAMESPACES: dict[str, str] = {
    "adk": "adk/{app}/{user}/memories",
    "openai_agents": "openai_agents/memories/{user}",
}
DEFAULT_NAMESPACE = "memories/{user}"
_USER_ROLES = ("user", "customer", "human")
_HISTORY = 20


def default_messages(events: Sequence[Any]) -> list[Message]:
    """Messages from core events: the role from the payload (``role``, or the ADK ``author``) or the
    event's author, the text from its string values (``content``, ``text``, parts...)."""
    out: list[Message] = []
    for e in events:
        payload = e.payload
        role = e.author or ""
        if isinstance(payload, Mapping):
            role = str(payload.get("role") or payload.get("author") or role)
            body: Any = payload.get("content", payload.get("text", payload))
            if isinstance(payload.get("type"), str) and payload["type"] not in ("message",) and "role" not in payload:
                continue  # tool calls and results carry no words of the customer
        else:
            body = payload
        text = " ".join(t for t in _texts(body) if t.strip())
        if text:
            out.append(Message(seq=e.seq, role=role, text=text))
    return out


def _texts(value: Any) -> Iterator[str]:
    """The words of a message body: strings, and under ``text`` / ``content`` / ``parts`` of objects (not
    ``type``, ``id``... which name the structure, not what was said)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)
    elif isinstance(value, Mapping):
        for key in ("text", "content", "parts"):
            if key in value:
                yield from _texts(value[key])


@dataclass
class Distiller:
    """How to distill: the extractor, where facts go, and how events read as messages.

    ``namespace``: a template (``"memories/{user}"``; ``{app}``, ``{user}``, ``{conversation}``) or a function
    of (app, user, conversation); None picks the conversation's framework's layout (:data:`NAMESPACES`).
    """

    extractor: Extractor = field(default_factory=lambda: RuleExtractor())
    namespace: str | Callable[[str, str, str], Sequence[str]] | None = None
    messages: Callable[[Sequence[Any]], list[Message]] = default_messages
    lease: float = 60.0

    def namespace_for(self, app: str, user: str, conversation: str, framework: str) -> tuple[str, ...]:
        spec = self.namespace
        if callable(spec):
            return tuple(spec(app, user, conversation))
        template = spec or NAMESPACES.get(framework, DEFAULT_NAMESPACE)
        values = {"app": app or "default", "user": user or conversation, "conversation": conversation}
        return tuple(part.format(**values) for part in template.split("/") if part)


@dataclass(frozen=True, slots=True)
class DistillResult:
    conversation_id: str
    seq: int  # the log position distilled up to
    facts: int  # facts written (new or changed)
    skipped: bool = False  # nothing new since the last distillation


# --- the deterministic extractor ---------------------------------------------------------------------------

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_ORDER = re.compile(
    r"(?:#\s*(\d{3,})|\b(?:order|pedido|encomenda|orden)\s*(?:n[.ºo°]*\s*)?#?\s*(\d{3,}))", re.IGNORECASE
)
_REASON_QUESTION = re.compile(
    r"\b(raz[aã]o|motivo|reason|why|por ?que|o que aconteceu|what happened)\b", re.IGNORECASE
)
_PREFERENCE = re.compile(r"\b(?:i prefer|prefiro|i like|gosto de|please always|sempre)\b\s+(.+)", re.IGNORECASE)


class RuleExtractor:
    """Facts found without a model: the customer's email, order number, a reason given when the agent asked
    for one, and stated preferences ("prefiro ...", "I prefer ..."). Deterministic; what the refund demo
    uses when no model key is configured."""

    def __call__(self, messages: Sequence[Message], known: Sequence[Fact]) -> list[Fact]:
        del known
        facts: dict[str, Fact] = {}
        asked_reason = False
        for m in messages:
            if m.role.lower() not in _USER_ROLES:
                asked_reason = bool(_REASON_QUESTION.search(m.text))
                continue
            if not m.new:  # context: distilled already
                asked_reason = False
                continue
            text = m.text.strip()
            for email in _EMAIL.findall(text):
                facts["email"] = Fact(f"email: {email}", "email")
            for hash_number, word_number in _ORDER.findall(text):
                number = hash_number or word_number
                facts["order"] = Fact(f"order: {number}", "order")
            if asked_reason and not _EMAIL.search(text) and not _ORDER.search(text):
                facts["reason"] = Fact(f"reason: {text}", "reason")
            preference = _PREFERENCE.search(text)
            if preference:
                facts["preference"] = Fact(f"preference: {preference.group(1).strip()}", "preference")
            asked_reason = False
        return list(facts.values())
