"""The durable inbox: accept a channel's message before any agent runs, then work each conversation's
messages one turn at a time, in arrival order, on whichever worker claims it.

How it holds together (the whole protocol, statement by statement in ``sql/inbox.sql``):

- **accept** stores the message under ``(conversation, delivery id)`` with the next sequence number of its
  conversation, in one transaction; once it commits the channel can have its 200. The same delivery
  accepted again is the same message (``Accepted.duplicate``), never a second one.
- **claim** takes the conversation whose next message waits longest among those no live lease holds
  (``FOR UPDATE SKIP LOCKED``: concurrent workers take different conversations), leases it for ``lease``
  seconds and hands out that one message. A conversation's second message waits in the queue behind the
  first (double texting) — nobody blocks on a lock — and many conversations run in parallel.
- **renew** extends the lease while the turn runs; **finish** records the outcome and moves the
  conversation on; **release** gives a failed attempt back for a retry after a delay.
- A worker that dies stops renewing: when its lease runs out, the next claim takes the same message
  over (a *recovery*, counted) with ``attempts`` > 1, and the handler resumes from the turn's last durable
  step — workflow steps and the idempotency ledger replay what the dead worker already did. No
  redelivery from the channel is needed. Each outcome is recorded only under the claim's owner, so a
  worker that was taken over cannot overwrite its successor (:class:`~pgagentstate.errors.LeaseLost`).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from typing import Any

from .. import arguments
from ..codec import check_id
from ..errors import IdempotencyConflict, InvalidInput, LeaseLost, NotFound
from ..models import Accepted, InboxMessage, InboxMetrics
from ..sealing import ad, seal, unseal
from . import conversations
from .base import Ctx, Op, Row, Stmt, Tx, many, one
from .ledger import error_text, request_hash

_OWNER_PREFIX = f"{socket.gethostname()}:{os.getpid()}"
#: The statements of :func:`metrics`, for operations that read them in a snapshot of their own (health).
METRICS_STMTS = (Stmt("inbox_metrics_messages", {}, "one"), Stmt("inbox_metrics_queues", {}, "one"))


def new_owner() -> str:
    """A worker's claim token: host, pid and a random suffix (one per claim loop)."""
    return f"{_OWNER_PREFIX}:{uuid.uuid4().hex[:8]}"


def _where(ctx: Ctx, conversation_id: str, delivery_id: str, part: str) -> Any:
    return ad(ctx.tenant, "inbox", conversation_id, delivery_id, part)


def message_from_row(ctx: Ctx, row: Row) -> InboxMessage:
    cid, delivery = row[0], row[2]
    return InboxMessage(
        conversation_id=cid,
        seq=row[1],
        delivery_id=delivery,
        message=unseal(ctx.cipher, row[4], _where(ctx, cid, delivery, "message")),
        status=row[5],
        attempts=row[6],
        worker=row[7],
        result=None if row[8] is None else unseal(ctx.cipher, row[8], _where(ctx, cid, delivery, "result")),
        error=_open_error(ctx, cid, delivery, row[9]),
        accepted_at=row[10],
        started_at=row[11],
        finished_at=row[12],
    )


def _seal_error(ctx: Ctx, msg: InboxMessage, text: str) -> str:
    where = _where(ctx, msg.conversation_id, msg.delivery_id, "error")
    sealed = seal(ctx.cipher, text, ctx.limits, where, path="error")
    value: str = json.loads(sealed)
    return value


def _open_error(ctx: Ctx, cid: str, delivery: str, stored: str | None) -> str | None:
    if stored is None:
        return None
    value: str = unseal(ctx.cipher, json.dumps(stored), _where(ctx, cid, delivery, "error"))
    return value


def accept(
    ctx: Ctx,
    conversation_id: str,
    message: Any,
    *,
    key: str,
    app: str = "",
    framework: str = "",
    user_id: str = "",
    channel: str = "",
) -> Op[Accepted]:
    """Store ``message`` as the next message of the conversation (created with these fields if missing)
    unless delivery ``key`` is stored already; one transaction."""
    lim = ctx.limits
    cid = check_id(conversation_id, "conversation_id", lim)
    delivery = check_id(key, "key", lim)
    sealed = seal(ctx.cipher, message, lim, _where(ctx, cid, delivery, "message"), path="message")
    digest = request_hash(ctx.cipher, "inbox", message)
    create = conversations.create_params(
        ctx, cid, app=app, framework=framework, user_id=user_id, channel=channel, status="active", metadata=None
    )
    params = {"conversation_id": cid, "delivery_id": delivery}
    _, _, inserted, row = yield Tx(
        (
            Stmt("conversation_create", create, "one"),
            Stmt("inbox_queue_lock", params, "none"),
            Stmt("inbox_accept", {**params, "request_hash": digest, "message": sealed}, "one"),
            Stmt("inbox_delivery", params, "one"),
        )
    )
    if row is None:  # the conversation was deleted while the message was accepted: nothing is stored
        raise NotFound(f"conversation {cid!r} was deleted while the message was accepted")
    # A stored hash made under an older key (or before encryption) is recomputed that way to compare.
    if inserted is None and row[3] != digest and request_hash(ctx.cipher, "inbox", message, like=row[3]) != row[3]:
        raise IdempotencyConflict(delivery, stored_hash=row[3], request_hash=digest)
    return Accepted(cid, row[1], delivery, row[5], duplicate=inserted is None)


def claim(ctx: Ctx, *, lease: float, owner: str | None) -> Op[InboxMessage | None]:
    """The next message of the conversation that waited longest, leased to ``owner``; None when no
    conversation has a message ready."""
    lease = arguments.duration(lease, "lease")
    owner = new_owner() if owner is None else check_id(owner, "owner", ctx.limits)
    row = yield from one("inbox_claim", owner=owner, lease=lease)
    return None if row is None else message_from_row(ctx, row)


def _turn(msg: InboxMessage) -> dict[str, Any]:
    if not isinstance(msg, InboxMessage) or msg.worker is None:
        raise InvalidInput("expected a message returned by claim_message", path="message")
    return {"conversation_id": msg.conversation_id, "seq": msg.seq, "owner": msg.worker}


def renew(ctx: Ctx, msg: InboxMessage, *, lease: float) -> Op[bool]:
    """Extend the lease of a claimed turn; False when another worker took it over."""
    row = yield from one("inbox_renew", **_turn(msg), lease=arguments.duration(lease, "lease"))
    return row is not None


def finish(ctx: Ctx, msg: InboxMessage, result: Any, *, error: str | None = None) -> Op[None]:
    """Record the turn's outcome — ``result``, or failed with ``error`` — and move the conversation on."""
    turn = _turn(msg)
    where = _where(ctx, msg.conversation_id, msg.delivery_id, "result")
    sealed = None if error is not None else seal(ctx.cipher, result, ctx.limits, where, path="result")
    params = {
        **turn,
        "status": "failed" if error is not None else "done",
        "result": sealed,
        "error": None if error is None else _seal_error(ctx, msg, error),
    }
    _, row = yield Tx((Stmt("inbox_hold", turn, "one"), Stmt("inbox_finish", params, "one")))
    if row is None:
        raise LeaseLost(msg.conversation_id, msg.seq)


def release(ctx: Ctx, msg: InboxMessage, error: BaseException | str, *, delay: float) -> Op[None]:
    """Give a failed attempt back: the same message is claimable again after ``delay`` seconds."""
    turn = _turn(msg)
    if not (isinstance(delay, int | float) and not isinstance(delay, bool) and 0 <= delay <= arguments.MAX_SECONDS):
        raise InvalidInput(f"delay must be a number of seconds >= 0, not {delay!r}", path="delay")
    text = error if isinstance(error, str) else error_text(error)
    row = yield from one("inbox_release", **turn, delay=float(delay), error=_seal_error(ctx, msg, text))
    if row is None:
        raise LeaseLost(msg.conversation_id, msg.seq)


def list_(ctx: Ctx, conversation_id: str) -> Op[list[InboxMessage]]:
    rows = yield from many("inbox_list", conversation_id=check_id(conversation_id, "conversation_id", ctx.limits))
    return [message_from_row(ctx, r) for r in rows]


def get(ctx: Ctx, conversation_id: str, key: str) -> Op[InboxMessage | None]:
    lim = ctx.limits
    row = yield from one(
        "inbox_delivery",
        conversation_id=check_id(conversation_id, "conversation_id", lim),
        delivery_id=check_id(key, "key", lim),
    )
    return None if row is None else message_from_row(ctx, row)


def metrics_from(messages: Row, queues: Row) -> InboxMetrics:
    """The metrics from the rows of :data:`METRICS_STMTS`."""
    return InboxMetrics(
        waiting=messages[0],
        running=messages[1],
        failed=messages[2],
        oldest_seconds=None if messages[3] is None else max(0.0, float(messages[3])),
        conversations=queues[0],
        stale_leases=queues[1],
        recoveries=queues[2],
    )


def metrics(ctx: Ctx) -> Op[InboxMetrics]:
    """Queue depth, the oldest unanswered message's age, stale leases and recoveries of the tenant."""
    messages, queues = yield Tx(METRICS_STMTS, snapshot=True)
    return metrics_from(messages, queues)
