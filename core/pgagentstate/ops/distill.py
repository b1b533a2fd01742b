"""Distillation operations (see :mod:`pgagentstate.distill`): the plan, then the work that runs under
``run_once``: read, extract, and commit the facts with the watermark in one transaction."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from ..codec import check_id
from ..distill import Distiller, DistillResult, Fact
from ..models import Memory
from ..textsearch import normalize
from . import events as event_ops
from . import memory as memory_ops
from . import memory_index
from .base import Call, Ctx, Op, Stmt, Tx, many, one

# How many of the user's known facts the extractor sees (to consolidate with).
_KNOWN = 200
# Events before the watermark the extractor sees as context (Message.new False): distilled after every turn,
# an answer ("Produto chegou quebrado") comes one batch after the question it answers.
_CONTEXT = 4


@dataclass(frozen=True, slots=True)
class Plan:
    conversation_id: str
    app: str
    user_id: str
    framework: str
    seq: int  # the log position to distill up to
    watermark: int  # the position distilled so far

    @property
    def key(self) -> str:
        """The run_once key: one distillation per conversation and position."""
        return f"distill:{self.conversation_id}:{self.seq}"


def plan(ctx: Ctx, conversation_id: str) -> Op[Plan | None]:
    """What to distill; None when the conversation does not exist."""
    check_id(conversation_id, "conversation_id", ctx.limits)
    row = yield from one("distill_plan", conversation_id=conversation_id)
    if row is None:
        return None
    user_id, app, framework, last_seq, watermark = row
    return Plan(conversation_id, app, user_id, framework, last_seq, watermark)


def pending(ctx: Ctx, limit: int) -> Op[list[str]]:
    rows = yield from many("distill_pending", limit=limit)
    return [r[0] for r in rows]


def topic_key(topic: str) -> str:
    return " ".join(normalize(topic).split())[:200]


def fact_key(fact: Fact) -> str:
    if fact.topic:
        return topic_key(fact.topic)
    return "fact:" + hashlib.sha256(" ".join(normalize(fact.text).split()).encode()).hexdigest()[:20]


def _known(memories: list[Memory]) -> list[Fact]:
    out = []
    for m in memories:
        text = m.value.get("text")
        if isinstance(text, str) and m.value.get("kind") == "fact":
            out.append(Fact(text, m.value.get("topic") or None))
    return out


def work(ctx: Ctx, p: Plan, distiller: Distiller) -> Op[dict[str, Any]]:
    """Extract the facts of the events in (watermark, seq] and commit them with the watermark."""
    events = yield from event_ops.list_(
        ctx, p.conversation_id, limit=None, after_seq=max(0, p.watermark - _CONTEXT), since=None, kinds=None,
        decode=True,
    )
    events = [e for e in events if e.seq <= p.seq]
    namespace = distiller.namespace_for(p.app, p.user_id, p.conversation_id, p.framework)
    existing = yield from memory_ops.search(
        ctx, namespace, query=None, filter=None, user_id=None, limit=_KNOWN, offset=0, refresh_ttl=False,
        mode="text",
    )
    by_key = {m.key: m for m in existing}
    messages = [m if m.seq > p.watermark else replace(m, new=False) for m in distiller.messages(events)]
    facts: list[Fact] = []
    if any(m.new for m in messages):
        produced = yield Call(distiller.extractor, (messages, _known(existing)))
        facts = [f for f in produced if isinstance(f, Fact) and f.text.strip()]
    now = datetime.now(UTC).isoformat()
    writes: dict[str, dict[str, Any]] = {}
    for fact in facts:
        key = fact_key(fact)
        old = by_key.get(key)
        if old is not None and old.value.get("text") == fact.text:
            continue  # known already: nothing piles up
        history = list(old.value.get("history") or []) if old is not None else []
        if old is not None and isinstance(old.value.get("text"), str):
            history.insert(0, {"text": old.value["text"], "source": old.value.get("source"), "until": now})
        writes[key] = {
            "kind": "fact",
            "topic": fact.topic or "",
            "text": fact.text,
            "facts": [fact.text],
            "source": {"conversation": p.conversation_id, "seq": p.seq, "at": now},
            "history": history[:20],
        }
    # One transaction: the watermark moves from where we read it, or nothing is written.
    (moved,) = yield Tx(
        (
            Stmt(
                "distill_advance",
                {"conversation_id": p.conversation_id, "seq": p.seq, "expected": p.watermark, "facts": len(writes)},
                "one",
            ),
        ),
        hold=True,
    )
    if moved is None or not writes:
        yield Tx(())  # commit (nothing, or the watermark alone)
        return {"seq": p.seq, "facts": 0 if moved is None else len(writes), "moved": moved is not None}
    entries = [
        memory_ops.entry(ctx, namespace, key, value, None, f"facts[{i}]")
        for i, (key, value) in enumerate(writes.items())
    ]
    if ctx.memory_index is not None:
        yield from memory_index.write(
            ctx, entries, ttl=None, user_id=p.user_id, if_absent=False, expected_version=None, hold=True
        )
    else:
        yield from memory_ops.write_plain(ctx, entries, ttl=None, user_id=p.user_id, if_absent=False)
    return {"seq": p.seq, "facts": len(writes), "moved": True}


def result(p: Plan, outcome: Any, *, skipped: bool = False) -> DistillResult:
    facts = int(outcome.get("facts", 0)) if isinstance(outcome, dict) else 0
    return DistillResult(p.conversation_id, p.seq, facts, skipped)


def notify(ctx: Ctx, conversation_id: str, channel: str) -> Op[None]:
    check_id(conversation_id, "conversation_id", ctx.limits)
    yield Tx((Stmt("distill_notify", {"conversation_id": conversation_id, "channel": channel}, "none"),))
