"""The idempotency ledger: run an external side effect once per key, and remember what it returned.

Exactly-once toward an external API needs the key to reach that API: the intent (key, request hash) is
committed before the call, the key is handed to the call so the API can deduplicate, and the outcome is
committed after it. A retry with the same key replays the recorded outcome without calling again.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..codec import check_id, check_text
from ..errors import IdempotencyConflict, IdempotencyInProgress, InvalidInput
from ..models import LedgerEntry
from ..sealing import ad, seal, unseal
from .base import Call, Ctx, Op, Row, Sleep, count, many, one

_OWNER_PREFIX = f"{socket.gethostname()}:{os.getpid()}"


def entry_from_row(ctx: Ctx, row: Row) -> LedgerEntry:
    return LedgerEntry(
        key=row[0],
        conversation_id=row[1],
        api=row[2],
        request_hash=row[3],
        status=row[4],
        result=None if row[5] is None else unseal(ctx.cipher, row[5], ad(ctx.tenant, "ledger", row[0], "result")),
        error=row[6],
        owner=row[7],
        attempts=row[8],
        duplicate_hits=row[9],
        lease_expires_at=row[10],
        created_at=row[11],
        updated_at=row[12],
        completed_at=row[13],
    )


def request_hash(api: str, request: Any) -> str:
    canonical = json.dumps({"api": api, "request": request}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def run_once(
    ctx: Ctx,
    key: str,
    fn: Callable[[str], Any],
    *,
    api: str,
    request: Any,
    conversation_id: str | None,
    lease: float,
    wait: float | None,
) -> Op[Any]:
    lim = ctx.limits
    check_id(key, "key", lim)
    check_text(api, "api", lim)
    if conversation_id is not None:
        check_id(conversation_id, "conversation_id", lim)
    if lease <= 0:
        raise InvalidInput("lease must be positive", path="lease")
    request_json = seal(ctx.cipher, request, lim, ad(ctx.tenant, "ledger", key, "request"), path="request")
    digest = request_hash(api, request)
    owner = f"{_OWNER_PREFIX}:{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + (lease * 2 + 5 if wait is None else wait)
    delay = 0.005
    while True:
        claimed = yield from one(
            "ledger_claim",
            key=key,
            conversation_id=conversation_id,
            api=api,
            request_hash=digest,
            request=request_json,
            owner=owner,
            lease=float(lease),
        )
        if claimed:
            break
        row = yield from one("ledger_peek", key=key, request_hash=digest)
        if row is None:  # deleted between the two statements
            continue
        entry = entry_from_row(ctx, row)
        if entry.request_hash != digest:
            raise IdempotencyConflict(key, stored_hash=entry.request_hash, request_hash=digest)
        if entry.status == "succeeded":
            return entry.result
        # Another worker holds a live claim: wait for its outcome (or for its lease to run out).
        if time.monotonic() >= deadline:
            raise IdempotencyInProgress(key)
        yield Sleep(delay)
        delay = min(delay * 2, 0.25)

    try:
        result = yield Call(fn, (key,))
    except Exception as exc:
        yield from count("ledger_fail", key=key, owner=owner, error=f"{type(exc).__name__}: {exc}"[:2000])
        raise
    try:
        result_json = seal(ctx.cipher, result, lim, ad(ctx.tenant, "ledger", key, "result"), path="result")
    except InvalidInput as exc:
        # The side effect happened but its result cannot be recorded: mark the attempt failed so the
        # next one re-sends with the same key (the API deduplicates) rather than waiting for a lease.
        yield from count("ledger_fail", key=key, owner=owner, error=f"result not recordable: {exc}")
        raise
    row = yield from one("ledger_succeed", key=key, owner=owner, result=result_json)
    if row is None:
        # Our lease ran out and a successor recorded its own outcome first: everyone gets that one.
        row = yield from one("ledger_get", key=key)
        if row is None:
            return result
    return entry_from_row(ctx, row).result


def get(ctx: Ctx, key: str) -> Op[LedgerEntry | None]:
    row = yield from one("ledger_get", key=check_id(key, "key", ctx.limits))
    return entry_from_row(ctx, row) if row else None


def list_(ctx: Ctx, conversation_id: str | None) -> Op[list[LedgerEntry]]:
    rows = yield from many("ledger_list", conversation_id=conversation_id)
    return [entry_from_row(ctx, r) for r in rows]
