"""Versioned state documents with compare-and-swap and a full change log."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from .. import arguments
from ..codec import check_id, check_text
from ..crypto import AD
from ..errors import InvalidInput, NotFound, PayloadTooLarge, VersionConflict
from ..models import StateDoc, StateRef
from ..sealing import ad, seal_doc, unseal_doc
from ..validation import check_document, check_patch
from .base import Ctx, Op, Row, Stmt, many, one, tx

_SCOPES = ("conversation", "user", "app")


def check_ref(ctx: Ctx, ref: StateRef) -> StateRef:
    if not isinstance(ref, StateRef):
        raise InvalidInput(f"expected a StateRef, not {type(ref).__name__}", path="ref")
    if ref.scope not in _SCOPES:
        raise InvalidInput(f"unknown state scope {ref.scope!r}", path="ref.scope")
    lim = ctx.limits
    check_id(ref.name, "ref.name", lim)
    if ref.scope == "conversation":
        check_id(ref.subject, "conversation_id", lim)
    elif ref.scope == "user":
        check_text(ref.app_name, "app", lim)
        check_id(ref.subject, "user_id", lim)
    else:
        check_text(ref.app_name, "app", lim)
    return ref


def ref_params(ref: StateRef) -> dict[str, Any]:
    return {"scope": ref.scope, "app": ref.app_name, "subject": ref.subject, "name": ref.name}


def doc_ad(ctx: Ctx, ref: StateRef) -> AD:
    """Where a state document's values belong (associated data of their ciphertexts)."""
    return ad(ctx.tenant, "state", ref.scope, ref.app_name, ref.subject, ref.name)


def _checked(ctx: Ctx, ref: StateRef, data: dict[str, Any]) -> dict[str, Any]:
    return check_document(ctx.schemas, ref.name, data, stored=True) if ref.name in ctx.schemas else data


def doc_from_row(ctx: Ctx, row: Row) -> StateDoc:
    return StateDoc(
        ref=(ref := StateRef(row[0], row[1], row[2], row[3])),
        version=row[4],
        data=_checked(ctx, ref, unseal_doc(ctx.cipher, row[5], doc_ad(ctx, ref))),
        updated_at=row[6],
    )


def one_subject(refs: Sequence[StateRef]) -> str | None:
    """The subject all ``refs`` share, else None: sent as a constant so that state partitioned (or distributed)
    by subject is read from one partition."""
    subjects = {r.subject for r in refs}
    return subjects.pop() if len(subjects) == 1 else None


def get_many(ctx: Ctx, refs: Sequence[StateRef]) -> Op[list[StateDoc | None]]:
    for ref in refs:
        check_ref(ctx, ref)
    if not refs:
        return []
    rows = yield from many(
        "state_get_many",
        scopes=[r.scope for r in refs],
        apps=[r.app_name for r in refs],
        subjects=[r.subject for r in refs],
        subject=one_subject(refs),
        names=[r.name for r in refs],
    )
    out: list[StateDoc | None] = [None] * len(refs)
    for row in rows:
        out[row[0] - 1] = doc_from_row(ctx, row[1:])
    return out


def write_stmt(
    ctx: Ctx,
    ref: StateRef,
    data: Mapping[str, Any] | None,
    delete: Iterable[str],
    *,
    replace: bool,
    expected_version: int | None,
) -> Stmt:
    """The statement for a put (``replace``) or a patch of top-level keys, with optional CAS."""
    check_ref(ctx, ref)
    if (data is not None or replace) and not isinstance(data, Mapping):
        raise InvalidInput(f"state must be a mapping, not {type(data).__name__}", path="data")
    # A string is one key: list("ab") would delete the keys "a" and "b".
    if isinstance(delete, str):
        removed = [delete]
    elif isinstance(delete, Iterable):
        removed = list(delete)
    else:
        raise InvalidInput(f"delete must be a key or keys, not {type(delete).__name__}", path="delete")
    for i, key in enumerate(removed):
        check_id(key, f"delete[{i}]", ctx.limits)
    arguments.optional_integer(expected_version, "expected_version")
    if replace:
        sealed = put_data(ctx, ref, data or {})
    else:
        if ref.name in ctx.schemas:
            data = check_patch(ctx.schemas, ref.name, data or {})
            if any(key in data for key in removed):  # a removed key must still leave a valid document
                raise InvalidInput("a key cannot be set and deleted in one patch", path="delete")
        sealed = seal_doc(ctx.cipher, data or {}, ctx.limits, doc_ad(ctx, ref), path="data")
    params = {
        **ref_params(ref),
        "data": sealed,
        "delete": removed,
        "replace": replace,
        "expected_version": expected_version,
        "max_bytes": ctx.limits.max_payload_bytes,  # the limit holds for a merge's result, not just the patch
    }
    return Stmt("state_cas" if expected_version else "state_upsert", params, "one")


def put_data(ctx: Ctx, ref: StateRef, data: Mapping[str, Any]) -> str:
    """The stored text of a whole document ``data`` for ``ref`` (validated against its schema, sealed)."""
    if ref.name in ctx.schemas:
        data = check_document(ctx.schemas, ref.name, data, stored=False)
    return seal_doc(ctx.cipher, data, ctx.limits, doc_ad(ctx, ref), path="data")


def write(
    ctx: Ctx,
    ref: StateRef,
    data: Mapping[str, Any] | None,
    delete: Iterable[str],
    *,
    replace: bool,
    expected_version: int | None,
) -> Op[StateDoc]:
    stmt = write_stmt(ctx, ref, data, delete, replace=replace, expected_version=expected_version)
    (row,) = yield tx(stmt)
    if row:
        return doc_from_row(ctx, row)
    yield from explain_failed_write(ref, expected_version, None if replace else ctx.limits.max_payload_bytes)
    raise AssertionError("unreachable")


def merge_too_large(limit: int, *, path: str) -> PayloadTooLarge:
    return PayloadTooLarge(0, limit, path=path, message=f"the document after this patch would exceed {limit} bytes")


def explain_failed_write(ref: StateRef, expected_version: int | None, merge_limit: int | None = None) -> Op[None]:
    """Why a write returned nothing: the conversation is gone, the version moved on, or (``merge_limit``:
    a patch) the version was right, so the merged document would have been over the limit."""
    if ref.scope == "conversation":
        head = yield from one("conversation_version", id=ref.subject)
        if head is None:
            raise NotFound(f"conversation {ref.subject!r} does not exist")
    row = yield from one("state_version", **ref_params(ref))
    actual = row[0] if row else 0
    if merge_limit is not None and row and expected_version in (None, actual):
        raise merge_too_large(merge_limit, path="data")
    raise VersionConflict(expected_version, actual, what=f"state {ref.name!r} version")


def history(
    ctx: Ctx, ref: StateRef, *, limit: int | None, version: int | None = None, at: datetime | None = None
) -> Op[list[StateDoc]]:
    check_ref(ctx, ref)
    params: dict[str, Any] = {
        "limit": arguments.optional_integer(limit, "limit"),
        "version": arguments.optional_integer(version, "version"),
        "at": arguments.timestamp(at, "at"),
    }
    rows = yield from many("state_history", replica=True, **ref_params(ref), **params)
    return [doc_from_row(ctx, r) for r in rows]
