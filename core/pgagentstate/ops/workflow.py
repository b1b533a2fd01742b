"""Durable workflow steps: where a multi-step task stands, so a retry resumes instead of restarting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import arguments
from ..codec import check_id
from ..errors import InvalidInput, NotFound
from ..models import STEP_STATUSES, Step
from ..sealing import ad, seal, unseal
from .base import Call, Ctx, Op, Row, many, one
from .ledger import error_text


def step_from_row(ctx: Ctx, row: Row) -> Step:
    return Step(
        conversation_id=row[0],
        workflow=row[1],
        step=row[2],
        position=row[3],
        status=row[4],
        attempts=row[5],
        last_error=row[6],
        result=None if row[7] is None else unseal(ctx.cipher, row[7], ad(ctx.tenant, "step", row[0], row[1], row[2])),
        started_at=row[8],
        completed_at=row[9],
        updated_at=row[10],
        lease_expires_at=row[11],
    )


def _key(ctx: Ctx, conversation_id: str, workflow: str, step: str) -> dict[str, Any]:
    lim = ctx.limits
    return {
        "conversation_id": check_id(conversation_id, "conversation_id", lim),
        "workflow": check_id(workflow, "workflow", lim),
        "step": check_id(step, "step", lim),
    }


def start(ctx: Ctx, conversation_id: str, workflow: str, step: str, *, position: int, lease: float) -> Op[Step]:
    key = _key(ctx, conversation_id, workflow, step)
    position = arguments.integer(position, "position", low=-arguments.INT - 1, high=arguments.INT)
    row = yield from one("step_start", **key, position=position, lease=arguments.duration(lease, "lease"))
    if row:
        return step_from_row(ctx, row)
    rows = yield from many("step_list", **key)
    if not rows:  # pragma: no cover - the insert above either returns or finds the completed row
        raise NotFound(f"step {step!r} of {workflow!r} vanished")
    return step_from_row(ctx, rows[0])


def set_status(
    ctx: Ctx,
    conversation_id: str,
    workflow: str,
    step: str,
    status: str,
    *,
    result: Any = None,
    error: str | None = None,
    position: int = 0,
) -> Op[Step]:
    if status not in STEP_STATUSES:
        raise InvalidInput(f"unknown step status {status!r}; use one of {STEP_STATUSES}", path="status")
    if error is not None and not isinstance(error, str):
        raise InvalidInput("error must be a string", path="error")
    row = yield from one(
        "step_set",
        **_key(ctx, conversation_id, workflow, step),
        status=status,
        position=arguments.integer(position, "position", low=-arguments.INT - 1, high=arguments.INT),
        result=None
        if result is None
        else seal(
            ctx.cipher, result, ctx.limits, ad(ctx.tenant, "step", conversation_id, workflow, step), path="result"
        ),
        error=None if error is None else error.replace("\x00", "\\0"),
    )
    assert row is not None  # an upsert always returns its row
    return step_from_row(ctx, row)


def list_(ctx: Ctx, conversation_id: str, workflow: str | None) -> Op[list[Step]]:
    rows = yield from many(
        "step_list",
        conversation_id=check_id(conversation_id, "conversation_id", ctx.limits),
        workflow=workflow,
        step=None,
    )
    return [step_from_row(ctx, r) for r in rows]


def run(
    ctx: Ctx, conversation_id: str, workflow: str, step: str, fn: Callable[[], Any], *, position: int, lease: float
) -> Op[Any]:
    """Run ``fn`` as the step unless it completed before; record its result or its error."""
    current = yield from start(ctx, conversation_id, workflow, step, position=position, lease=lease)
    if current.status == "completed":
        return current.result
    try:
        result = yield Call(fn)
    except Exception as exc:
        yield from set_status(
            ctx, conversation_id, workflow, step, "failed", error=error_text(exc), position=position
        )
        raise
    yield from set_status(ctx, conversation_id, workflow, step, "completed", result=result, position=position)
    return result
