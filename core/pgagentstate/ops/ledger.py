"""The idempotency ledger: run an external side effect once per key, and remember what it returned.

Exactly-once toward an external API needs the key to reach that API: the intent (key, request hash) is
committed before the call, the key is handed to the call so the API can deduplicate, and the outcome is
committed after it. A retry with the same key replays the recorded outcome without calling again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from .. import arguments
from ..codec import check_id, check_text
from ..crypto import Cipher
from ..errors import IdempotencyConflict, IdempotencyInProgress, InvalidInput
from ..models import LedgerEntry
from ..sealing import ad, seal, unseal
from .base import Call, Ctx, Op, Row, Sleep, count, many, one

_OWNER_PREFIX = f"{socket.gethostname()}:{os.getpid()}"
_log = logging.getLogger("pgagentstate.ledger")


def error_text(exc: BaseException) -> str:
    """What is recorded of a callee's exception: its type and message, storable whatever the message holds
    (NUL and lone surrogates escaped; Postgres text takes neither), cut to 2000 characters."""
    text = f"{type(exc).__name__}: {exc}"[:2000].replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _seal_error(ctx: Ctx, key: str, text: str) -> str:
    """The error column's text: the message itself, or with encryption its ciphertext (a JSON string)."""
    sealed = seal(ctx.cipher, text, ctx.limits, ad(ctx.tenant, "ledger", key, "error"), path="error")
    value: str = json.loads(sealed)
    return value


def open_error(ctx: Ctx, key: str, stored: str | None) -> str | None:
    if stored is None:
        return None
    value: str = unseal(ctx.cipher, json.dumps(stored), ad(ctx.tenant, "ledger", key, "error"))
    return value


def entry_from_row(ctx: Ctx, row: Row) -> LedgerEntry:
    return LedgerEntry(
        key=row[0],
        conversation_id=row[1],
        api=row[2],
        request_hash=row[3],
        status=row[4],
        result=None if row[5] is None else unseal(ctx.cipher, row[5], ad(ctx.tenant, "ledger", row[0], "result")),
        error=open_error(ctx, row[0], row[6]),
        owner=row[7],
        attempts=row[8],
        duplicate_hits=row[9],
        lease_expires_at=row[10],
        created_at=row[11],
        updated_at=row[12],
        completed_at=row[13],
    )


def request_hash(cipher: Cipher | None, api: str, request: Any, *, like: str | None = None) -> str:
    """The digest that tells a retry (same api and request) from a reuse of its key for another request.
    Without encryption a SHA-256 of the canonical JSON; with encryption an HMAC under a subkey of the
    active key, ``<key id>:<hex>``, since a plain hash of an encrypted request gives it away to a guess.
    ``like``: a stored digest, to compute ours the way it was made (an older key, or before encryption)."""
    canonical = json.dumps({"api": api, "request": request}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    message = canonical.encode("utf-8", "surrogatepass")
    key_id = cipher.active_key_id() if cipher is not None else None
    if like is not None:
        key_id = like.partition(":")[0] if ":" in like else None
    if key_id is None or cipher is None:
        return hashlib.sha256(message).hexdigest()
    return f"{key_id}:{cipher.keyed_digest('pgagentstate ledger request', message, key_id).hex()}"


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
    lease = arguments.duration(lease, "lease")
    # wait=0 is allowed (do not wait for another worker's outcome); NaN fails the range test.
    if wait is not None and (
        isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= arguments.MAX_SECONDS
    ):
        raise InvalidInput(f"wait must be a finite number of seconds >= 0, not {wait!r}", path="wait")
    request_json = seal(ctx.cipher, request, lim, ad(ctx.tenant, "ledger", key, "request"), path="request")
    digest = request_hash(ctx.cipher, api, request)
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
            if request_hash(ctx.cipher, api, request, like=entry.request_hash) == entry.request_hash:
                digest = entry.request_hash  # the same request, hashed with an older key: claim with that
                continue
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
        yield from count("ledger_fail", key=key, owner=owner, error=_seal_error(ctx, key, error_text(exc)))
        raise
    try:
        result_json = seal(ctx.cipher, result, lim, ad(ctx.tenant, "ledger", key, "result"), path="result")
    except InvalidInput as exc:
        # The side effect happened but its result cannot be recorded: mark the attempt failed so the
        # next one re-sends with the same key (the API deduplicates) rather than waiting for a lease.
        error = _seal_error(ctx, key, f"result not recordable: {error_text(exc)}")
        yield from count("ledger_fail", key=key, owner=owner, error=error)
        raise
    row = yield from one("ledger_succeed", key=key, owner=owner, result=result_json)
    if row is not None:
        return entry_from_row(ctx, row).result
    # Our lease ran out, a successor claimed the key and one of us recorded a success first. Its caller
    # may have acted on that result already, so it stands, and we return it rather than ours.
    row = yield from one("ledger_get", key=key)
    if row is None:  # deleted meanwhile (retention, erase): nothing recorded to agree with
        return result
    _log.warning(
        "run_once %r ran again after its lease (%ss) ran out; the result recorded first is returned", key, lease
    )
    return entry_from_row(ctx, row).result


def get(ctx: Ctx, key: str) -> Op[LedgerEntry | None]:
    row = yield from one("ledger_get", key=check_id(key, "key", ctx.limits))
    return entry_from_row(ctx, row) if row else None


def list_(ctx: Ctx, conversation_id: str | None) -> Op[list[LedgerEntry]]:
    rows = yield from many("ledger_list", conversation_id=conversation_id)
    return [entry_from_row(ctx, r) for r in rows]
