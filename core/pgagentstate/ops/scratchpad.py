"""The short-term scratchpad of a conversation (working notes with an optional expiry)."""

from __future__ import annotations

from typing import Any

from ..codec import check_id
from ..errors import InvalidInput
from ..sealing import ad, seal, unseal
from .base import Ctx, Op, count, many


def put(ctx: Ctx, conversation_id: str, key: str, value: Any, *, ttl: float | None) -> Op[None]:
    if ttl is not None and ttl <= 0:
        raise InvalidInput("ttl must be positive (seconds) or None", path="ttl")
    yield from count(
        "scratch_put",
        conversation_id=check_id(conversation_id, "conversation_id", ctx.limits),
        key=check_id(key, "key", ctx.limits),
        value=seal(ctx.cipher, value, ctx.limits, ad(ctx.tenant, "scratch", conversation_id, key), path="value"),
        ttl=None if ttl is None else float(ttl),
    )


def list_(ctx: Ctx, conversation_id: str, key: str | None = None) -> Op[dict[str, Any]]:
    rows = yield from many(
        "scratch_list", conversation_id=check_id(conversation_id, "conversation_id", ctx.limits), key=key
    )
    return {r[0]: unseal(ctx.cipher, r[1], ad(ctx.tenant, "scratch", conversation_id, r[0])) for r in rows}


def delete(ctx: Ctx, conversation_id: str, key: str) -> Op[bool]:
    n = yield from count(
        "scratch_delete",
        conversation_id=check_id(conversation_id, "conversation_id", ctx.limits),
        key=check_id(key, "key", ctx.limits),
    )
    return bool(n)
