"""The short-term scratchpad of a conversation (working notes with an optional expiry).

By default it is a Postgres table. A store whose Redis tier has ``scratchpad=True`` keeps it in Redis
instead (the brief: low latency, not necessarily durable): one Redis key per entry with the entry's TTL,
sealed like everything the tier stores. While Redis is unreachable the scratchpad is the Postgres one;
entries written there during an outage are read from there only while the outage lasts, and a key that
a failed Redis write left behind is deleted when Redis is back (never an older value after a newer one).
"""

from __future__ import annotations

import json
import time
from typing import Any

from .. import arguments
from ..codec import check_id, decode_text, encode
from ..sealing import ad, seal, unseal
from .base import Cache, Ctx, Op, count, many

_KIND = "scratch"
_UNAVAILABLE = object()  # what a Redis command answers when Redis is skipped or fails


def _index(ctx: Ctx, conversation_id: str) -> str:
    assert ctx.cache is not None
    return ctx.cache.name(ctx.tenant, "scratch-index", conversation_id)


def _entry(ctx: Ctx, conversation_id: str, key: str) -> str:
    assert ctx.cache is not None
    return ctx.cache.name(ctx.tenant, _KIND, conversation_id, key)


def put(ctx: Ctx, conversation_id: str, key: str, value: Any, *, ttl: float | None) -> Op[None]:
    ttl = arguments.optional_duration(ttl, "ttl")
    check_id(conversation_id, "conversation_id", ctx.limits)
    check_id(key, "key", ctx.limits)
    if ctx.scratch_in_redis and ctx.cache is not None:
        text = encode(value, ctx.limits, path="value")  # the same checks as the Postgres scratchpad
        plain = json.dumps([key, text], ensure_ascii=False).encode()
        stamp = f"{int(time.time() * 1_000_000):020d}{0:020d}"
        index, entry = _index(ctx, conversation_id), _entry(ctx, conversation_id, key)
        blob = ctx.cache.seal(stamp, plain, (ctx.tenant, _KIND, entry))
        ttl_ms = 0 if ttl is None else max(1, int(ttl * 1000))
        done = yield Cache("scratch_put", (index, entry), (blob, ttl_ms), default=_UNAVAILABLE)
        if done is not _UNAVAILABLE:
            return
    yield from count(
        "scratch_put",
        conversation_id=conversation_id,
        key=key,
        value=seal(ctx.cipher, value, ctx.limits, ad(ctx.tenant, "scratch", conversation_id, key), path="value"),
        ttl=None if ttl is None else float(ttl),
    )


def list_(ctx: Ctx, conversation_id: str, key: str | None = None) -> Op[dict[str, Any]]:
    check_id(conversation_id, "conversation_id", ctx.limits)
    if ctx.scratch_in_redis and ctx.cache is not None:
        found: Any
        if key is not None:
            entry = _entry(ctx, conversation_id, key)
            found = yield Cache("get", (entry,), default=_UNAVAILABLE)
            if found is not _UNAVAILABLE:
                return _opened(ctx, conversation_id, [] if found is None else [entry, found])
        else:
            found = yield Cache("scratch_list", (_index(ctx, conversation_id),), default=_UNAVAILABLE)
            if found is not _UNAVAILABLE:
                return _opened(ctx, conversation_id, list(found))
    rows = yield from many("scratch_list", conversation_id=conversation_id, key=key)
    return {r[0]: unseal(ctx.cipher, r[1], ad(ctx.tenant, "scratch", conversation_id, r[0])) for r in rows}


def _opened(ctx: Ctx, conversation_id: str, flat: list[Any]) -> dict[str, Any]:
    """The entries (``[name, value, name, value...]`` from Redis) that authenticate as this conversation's;
    the others are counted as rejected and left out, as if they had expired."""
    keys = ctx.cache
    assert keys is not None
    out: dict[str, Any] = {}
    for i in range(0, len(flat), 2):
        name = flat[i].decode() if isinstance(flat[i], bytes) else flat[i]
        # Sealed for its Redis key (an HMAC of tenant, conversation and scratch key), and the scratch key
        # inside must name that Redis key: a value moved to another key, conversation or tenant fails.
        opened = keys.open(flat[i + 1], (ctx.tenant, _KIND, name))
        if opened is None:
            keys.note("rejected")
            continue
        key, text = json.loads(opened[1])
        if keys.name(ctx.tenant, _KIND, conversation_id, key) != name:
            keys.note("rejected")
            continue
        out[key] = decode_text(text)
    return dict(sorted(out.items()))


def delete(ctx: Ctx, conversation_id: str, key: str) -> Op[bool]:
    check_id(conversation_id, "conversation_id", ctx.limits)
    check_id(key, "key", ctx.limits)
    if ctx.scratch_in_redis and ctx.cache is not None:
        index, entry = _index(ctx, conversation_id), _entry(ctx, conversation_id, key)
        n = yield Cache("scratch_delete", (index, entry), default=_UNAVAILABLE)
        if n is not _UNAVAILABLE:
            return bool(n)
    n = yield from count("scratch_delete", conversation_id=conversation_id, key=key)
    return bool(n)
