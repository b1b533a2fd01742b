"""Key rotation: re-encrypt every stored ciphertext with the active key, in batches.

Resumable by construction: a run skips what is already on the active key (and in the current associated
data encoding, see :mod:`pgagentstate.crypto`), so an interrupted rotation is finished by running it again.
Each write is a compare-and-swap on the old value, so a value changed by the application meanwhile is
never overwritten (the application wrote it with the active key). Pages follow each table's primary key
as a row comparison, so no two rows share a cursor position whatever their ids contain.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..codec import decode_text, unescape, unescape_text
from ..crypto import AD, Cipher, is_current, is_current_bytes, is_envelope, is_sealed_bytes
from ..errors import InvalidInput
from ..sealing import ad
from .base import Call, Ctx, Op, Row, Stmt, Tx
from .events import event_ad
from .ledger import request_hash
from .snapshots import chunk_ad, data_ad, meta_ad, write_ad


@dataclass(frozen=True, slots=True)
class Column:
    """A column that holds ciphertexts. Its statement ``rot_<name>_page`` returns the row's primary key
    (``keys`` columns, tenant_id first), any other column its associated data needs, and the stored value
    last (JSON text, or bytes for ``bytes`` columns); ``rot_<name>_set`` takes the key as k0, k1, ... and
    the new and the old value."""

    name: str
    keys: int
    form: Literal["value", "document", "bytes"]
    where: Callable[[Row], AD]
    #: more parameters of the set statement, from the row and the value's plaintext
    also: Callable[[Cipher, Row, Any], dict[str, Any]] | None = None


def _request_hash(cipher: Cipher, row: Row, request: Any) -> dict[str, Any]:
    """A ledger request's hash, made again with the active key along with its ciphertext (a retry after
    the old key is retired still matches; one made before encryption no longer gives the request away)."""
    return {"hash": request_hash(cipher, row[2], request)}


COLUMNS = (
    Column("events", 3, "value", lambda r: event_ad(r[0], r[1], r[3], r[4], r[5])),
    Column("state_documents", 5, "document", lambda r: ad(r[0], "state", r[1], r[2], r[3], r[4])),
    Column("state_changes", 6, "document", lambda r: ad(r[0], "state", r[1], r[2], r[3], r[4])),
    Column("conversations", 2, "document", lambda r: ad(r[0], "metadata", r[1])),
    Column("memories", 3, "value", lambda r: ad(r[0], "memory", r[1], r[2])),
    Column("scratchpad", 3, "value", lambda r: ad(r[0], "scratch", r[1], r[2])),
    Column("workflow_steps", 4, "value", lambda r: ad(r[0], "step", r[1], r[2], r[3])),
    Column("ledger_result", 2, "value", lambda r: ad(r[0], "ledger", r[1], "result")),
    Column("ledger_request", 2, "value", lambda r: ad(r[0], "ledger", r[1], "request"), _request_hash),
    Column("ledger_error", 2, "value", lambda r: ad(r[0], "ledger", r[1], "error")),
    Column("snapshot_metadata", 4, "value", lambda r: meta_ad(r[0], r[1], r[2], r[3])),
    Column("snapshot_data", 4, "bytes", lambda r: data_ad(r[0], r[1], r[2], r[3])),
    Column("snapshot_chunks", 3, "bytes", lambda r: chunk_ad(r[0], r[1], r[2])),
    Column("snapshot_writes", 6, "bytes", lambda r: write_ad(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7])),
)


def _reseal(cipher: Cipher, stored: Any, where: AD, active: str, include_plaintext: bool) -> Any | None:
    """The value sealed with the active key, or None when nothing needs to change."""
    if is_envelope(stored):
        if is_current(stored, active):
            return None
        return cipher.seal(cipher.open(stored, where), where)
    if not include_plaintext:
        return None
    return cipher.seal(json.dumps(stored, ensure_ascii=False, separators=(",", ":")), where)


def _plaintext(cipher: Cipher, text: str, where: AD) -> Any:
    stored = json.loads(text)
    return decode_text(cipher.open(stored, where)) if is_envelope(stored) else unescape(stored)


def _new_value(cipher: Cipher, column: Column, row: Row, active: str, include_plaintext: bool) -> Any | None:
    """What to write instead of the row's value, or None when nothing needs to change."""
    where = column.where(row)
    if column.form == "bytes":
        data = bytes(row[-1])
        if is_sealed_bytes(data):
            return None if is_current_bytes(data, active) else cipher.seal_bytes(cipher.open_bytes(data, where), where)
        return cipher.seal_bytes(data, where) if include_plaintext else None
    stored = json.loads(row[-1])
    if column.form == "value":
        new = _reseal(cipher, stored, where, active, include_plaintext)
        return None if new is None else json.dumps(new)
    changed = False
    out = {}
    for key, value in stored.items():  # stored keys are escaped (codec); reads bind the real key
        new = _reseal(cipher, value, where.key(unescape_text(key)), active, include_plaintext)
        changed |= new is not None
        out[key] = value if new is None else new
    return json.dumps(out, ensure_ascii=False) if changed else None


def _rotate(
    cipher: Cipher, column: Column, tenant: str | None, batch_size: int, include_plaintext: bool,
    progress: Callable[[str, int, int], None] | None,
) -> Op[int]:
    active = cipher.active_key_id()
    binary = column.form == "bytes"
    last: Row | None = None
    scanned = changed = 0
    while True:
        keys = {f"k{i}": None if last is None else last[i] for i in range(column.keys)}
        page = {**keys, "first": last is None, "tenant": tenant, "limit": batch_size}
        (rows,) = yield Tx((Stmt(f"rot_{column.name}_page", page, binary=binary),))
        if not rows:
            return changed
        updates = []
        for row in rows:
            new = _new_value(cipher, column, row, active, include_plaintext)
            if new is not None:
                at = {f"k{i}": row[i] for i in range(column.keys)}
                old = bytes(row[-1]) if binary else row[-1]
                params = {**at, "new": new, "old": old}
                if column.also is not None:
                    params |= column.also(cipher, row, _plaintext(cipher, row[-1], column.where(row)))
                updates.append(Stmt(f"rot_{column.name}_set", params, "rowcount"))
        if updates:
            counts = yield Tx(tuple(updates))
            changed += sum(counts)
        scanned += len(rows)
        last = rows[-1]
        if progress is not None:
            yield Call(progress, (column.name, scanned, changed))


def rotate(
    ctx: Ctx,
    *,
    all_tenants: bool,
    batch_size: int,
    include_plaintext: bool,
    progress: Callable[[str, int, int], None] | None = None,
) -> Op[dict[str, int]]:
    """Re-encrypt with the active key; returns rows rewritten per table. ``progress(table, scanned,
    rewritten)`` is called after each batch."""
    cipher = ctx.cipher
    if cipher is None:
        raise InvalidInput("key rotation needs a store with encryption configured", path="encryption")
    tenant = None if all_tenants else ctx.tenant
    rewritten: dict[str, int] = {}
    for column in COLUMNS:
        rewritten[column.name] = yield from _rotate(cipher, column, tenant, batch_size, include_plaintext, progress)
    return rewritten
