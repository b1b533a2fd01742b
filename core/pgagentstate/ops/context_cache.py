"""A turn's load served from Redis: the short-term context cache (see :mod:`pgagentstate.redis_tier`).

One entry per conversation: the conversation row, its newest events and one state document, as of one
version. It is a hint only: :func:`pgagentstate.ops.turn.commit` checks the version in Postgres, so a
stale entry costs a :class:`~pgagentstate.errors.VersionConflict` (and is dropped: the retry reads
Postgres), never a lost or wrong write. After a commit the entry is rewritten from what the commit
wrote (no read); any other write to the conversation through a store with the tier drops it.

Staleness: a turn's load may be stale only when a write reached Postgres without reaching Redis — Redis
unreachable right after the commit, a writer without the tier — and then only until the next commit
finds it out, or the entry's TTL. Reads that hand data back with no later version check
(``load_conversation``, ``list_events``, ``get_state``...) never read Redis: they are never stale.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..models import Conversation, Event, StateDoc, StateRef
from ..redis_tier import STAMP_LEN, TierKeys
from .base import Cache, Ctx, Op

KIND = "context"
Context = tuple[Conversation, list[Event], StateDoc | None]


def _stamp(conv: Conversation) -> str:
    """The entry's order: created_at (a conversation deleted and made again is newer) then version."""
    micros = int(conv.created_at.timestamp() * 1_000_000)
    return f"{micros:020d}{conv.version:020d}"


def _where(ctx: Ctx, conversation_id: str) -> tuple[str, ...]:
    return (ctx.tenant, KIND, conversation_id)


def _keys(ctx: Ctx) -> TierKeys | None:
    keys = ctx.cache
    return keys if keys is not None and keys.tier.context else None


def key(ctx: Ctx, conversation_id: str) -> str:
    assert ctx.cache is not None
    return ctx.cache.name(ctx.tenant, KIND, conversation_id)


def note(ctx: Ctx, outcome: str) -> None:
    if ctx.cache is not None:
        ctx.cache.note(outcome)


def lookup(
    ctx: Ctx, conversation_id: str, state_name: str, recent: int | None
) -> Op[tuple[Conversation, list[Event], StateDoc | None, bool] | None]:
    """The cached context (and whether its events are the whole history) when it holds what the turn asks
    for (its newest ``recent`` events, or all); None otherwise (no tier, Redis down, a miss, an entry that
    does not authenticate)."""
    keys = _keys(ctx)
    if keys is None:
        return None
    name = key(ctx, conversation_id)
    raw = yield Cache("get", (name,))
    if raw is None:
        keys.note("misses")
        return None
    opened = keys.open(raw, _where(ctx, conversation_id))
    if opened is None:
        keys.note("rejected")
        yield Cache("delete", (name,), default=0)  # never serve it; the load below puts a good one back
        return None
    entry = json.loads(opened[1])
    complete, events = entry["all"], entry["e"]
    if entry["n"] != state_name or not (complete or (recent is not None and recent <= len(events))):
        keys.note("misses")
        return None
    keys.note("hits")
    c = entry["c"]
    fromiso = datetime.fromisoformat
    conv = Conversation(
        c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], fromiso(c[10]), fromiso(c[11])
    )
    if recent is not None and recent < len(events):
        events, complete = (events[len(events) - recent :] if recent else []), False
    doc = None
    if entry["d"] is not None:
        version, data, updated = entry["d"]
        doc = StateDoc(StateRef.conversation(conversation_id, state_name), data, version, fromiso(updated))
    loaded = [Event(conversation_id, s, i, k, a, p, fromiso(t)) for s, i, k, a, p, t in events]
    return conv, loaded, doc, complete


def remember(
    ctx: Ctx, context: Context, *, state_name: str, recent: int | None, complete: bool | None = None
) -> Op[None]:
    """Put the context in Redis unless a newer one is there. ``complete``: the events are the whole
    history (a load with ``recent`` None, or fewer events than asked for)."""
    keys = _keys(ctx)
    if keys is None:
        return
    conv, events, doc = context
    if complete is None:
        complete = recent is None or len(events) < recent
    if recent is not None and len(events) > recent:
        events, complete = events[len(events) - recent :], False
    entry = {
        "c": [
            conv.tenant_id,
            conv.id,
            conv.app,
            conv.framework,
            conv.user_id,
            conv.channel,
            conv.status,
            conv.metadata,
            conv.version,
            conv.last_seq,
            conv.created_at.isoformat(),
            conv.updated_at.isoformat(),
        ],
        "n": state_name,
        "d": None if doc is None else [doc.version, doc.data, doc.updated_at.isoformat()],
        "e": [[e.seq, e.event_id, e.kind, e.author, e.payload, e.created_at.isoformat()] for e in events],
        "all": complete,
    }
    plain = json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode()
    stamp = _stamp(conv)
    assert len(stamp) == STAMP_LEN
    blob = keys.seal(stamp, plain, _where(ctx, conv.id))
    ttl_ms = int(keys.tier.ttl * 1000)
    stored = yield Cache("put_newer", (key(ctx, conv.id),), (blob, ttl_ms), default=0)
    if not stored:
        keys.note("not_stored")


def committed(
    ctx: Ctx,
    context: Context,
    *,
    state_name: str,
    recent: int | None,
    complete: bool,
    appended: Sequence[Event],
    status: str | None,
    new_state: dict[str, Any] | None,
    now: datetime,
) -> Op[None]:
    """After a turn's commit: the entry as the commit left the conversation (version + 1, the appended
    events, the new state document), written without reading anything back."""
    if _keys(ctx) is None:
        return
    conv, events, doc = context
    conv = Conversation(
        conv.tenant_id,
        conv.id,
        conv.app,
        conv.framework,
        conv.user_id,
        conv.channel,
        status or conv.status,
        conv.metadata,
        conv.version + 1,
        max([conv.last_seq, *(e.seq for e in appended)]),
        conv.created_at,
        now,
    )
    if new_state is not None:
        doc = StateDoc(
            StateRef.conversation(conv.id, state_name), new_state, (doc.version if doc else 0) + 1, now
        )
    yield from remember(
        ctx, (conv, [*events, *appended], doc), state_name=state_name, recent=recent, complete=complete
    )


def forget(ctx: Ctx, conversation_id: str) -> Op[None]:
    """Drop the conversation's entry (its next turn reads Postgres)."""
    if _keys(ctx) is None:
        return
    yield Cache("delete", (key(ctx, conversation_id),), default=0)


def forget_cmd(ctx: Ctx, conversation_id: str) -> Cache | None:
    """The command that drops the entry, for the driver (after writes that do not go through a turn)."""
    if _keys(ctx) is None:
        return None
    return Cache("delete", (key(ctx, conversation_id),), default=0)
