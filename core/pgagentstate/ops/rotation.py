"""Key rotation: re-encrypt every stored ciphertext with the active key, in batches.

Resumable by construction: a run skips what is already on the active key, so an interrupted rotation
is finished by running it again. Each write is a compare-and-swap on the old text, so a value changed
by the application meanwhile is never overwritten (the application wrote it with the active key).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..crypto import Cipher, bytes_key_id, is_envelope, is_sealed_bytes, key_id_of
from ..errors import InvalidInput
from ..sealing import SEP, ad
from .base import Call, Ctx, Op, Row, Stmt, Tx
from .snapshots import chunk_ad, data_ad, meta_ad, write_ad


@dataclass(frozen=True, slots=True)
class Column:
    table: str
    keys: int  # how many of the row's leading columns (after tenant_id) form its key
    numeric_last_key: bool
    document: bool  # sealed key by key
    where: Callable[[Row], str]


COLUMNS = (
    Column("events", 2, True, False, lambda r: ad(r[0], "event", r[1], r[3])),
    Column("state_documents", 1, False, True, lambda r: ad(r[0], "state", *r[1].split(SEP))),
    Column("state_changes", 2, True, True, lambda r: ad(r[0], "state", *r[1].split(SEP))),
    Column("conversations", 1, False, True, lambda r: ad(r[0], "metadata", r[1])),
    Column("memories", 2, False, False, lambda r: ad(r[0], "memory", r[1], r[2])),
    Column("scratchpad", 2, False, False, lambda r: ad(r[0], "scratch", r[1], r[2])),
    Column("workflow_steps", 3, False, False, lambda r: ad(r[0], "step", r[1], r[2], r[3])),
    Column("ledger_result", 1, False, False, lambda r: ad(r[0], "ledger", r[1], "result")),
    Column("ledger_request", 1, False, False, lambda r: ad(r[0], "ledger", r[1], "request")),
    Column("snapshot_metadata", 3, False, False, lambda r: meta_ad(r[0], r[1], r[2], r[3])),
)


@dataclass(frozen=True, slots=True)
class BytesColumn:
    """A bytea column sealed with :meth:`Cipher.seal_bytes`. Its page statement returns tenant_id, the
    key columns and the value; ``keys`` counts the key columns (tenant_id included)."""

    name: str
    keys: int
    where: Callable[[Row], str]


BYTES_COLUMNS = (
    BytesColumn("snapshot_data", 4, lambda r: data_ad(r[0], r[1], r[2], r[3])),
    BytesColumn("snapshot_chunks", 3, lambda r: chunk_ad(r[0], r[1], r[2])),
    BytesColumn("snapshot_writes", 6, lambda r: write_ad(r[0], r[1], r[2], r[3], r[4], r[5])),
)


def _reseal_bytes(cipher: Cipher, data: bytes, where: str, active: str, include_plaintext: bool) -> bytes | None:
    if is_sealed_bytes(data):
        if bytes_key_id(data) == active:
            return None
        return cipher.seal_bytes(cipher.open_bytes(data, where), where)
    return cipher.seal_bytes(data, where) if include_plaintext else None


def _rotate_bytes(
    cipher: Cipher, column: BytesColumn, tenant: str | None, batch_size: int, include_plaintext: bool,
    progress: Callable[[str, int, int], None] | None,
) -> Op[int]:
    active = cipher.active_key_id()
    last: Row | None = None
    scanned = changed = 0
    while True:
        keys = {f"k{i}": None if last is None else last[i] for i in range(column.keys)}
        page = {**keys, "first": last is None, "tenant": tenant, "limit": batch_size}
        (rows,) = yield Tx((Stmt(f"rot_{column.name}_page", page, binary=True),))
        if not rows:
            return changed
        updates = []
        for row in rows:
            old = bytes(row[column.keys])
            new = _reseal_bytes(cipher, old, column.where(row), active, include_plaintext)
            if new is not None:
                at = {f"k{i}": row[i] for i in range(column.keys)}
                updates.append(Stmt(f"rot_{column.name}_set", {**at, "new": new, "old": old}, "rowcount"))
        if updates:
            counts = yield Tx(tuple(updates))
            changed += sum(counts)
        scanned += len(rows)
        last = rows[-1]
        if progress is not None:
            yield Call(progress, (column.name, scanned, changed))


def _reseal(cipher: Cipher, stored: Any, where: str, active: str, include_plaintext: bool) -> Any | None:
    """The value sealed with the active key, or None when nothing needs to change."""
    if is_envelope(stored):
        if key_id_of(stored) == active:
            return None
        return cipher.seal(cipher.open(stored, where), where)
    if not include_plaintext:
        return None
    return cipher.seal(json.dumps(stored, ensure_ascii=False, separators=(",", ":")), where)


def _new_text(cipher: Cipher, column: Column, row: Row, active: str, include_plaintext: bool) -> str | None:
    stored = json.loads(row[4])
    where = column.where(row)
    if not column.document:
        new = _reseal(cipher, stored, where, active, include_plaintext)
        return None if new is None else json.dumps(new)
    changed = False
    out = {}
    for key, value in stored.items():
        new = _reseal(cipher, value, where + SEP + key, active, include_plaintext)
        changed |= new is not None
        out[key] = value if new is None else new
    return json.dumps(out, ensure_ascii=False) if changed else None


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
    active = cipher.active_key_id()
    tenant = None if all_tenants else ctx.tenant
    rewritten: dict[str, int] = {}
    for column in COLUMNS:
        last: list[str] = ["", "", "-1" if column.numeric_last_key and column.keys == 2 else "", ""]
        scanned = changed = 0
        while True:
            params: dict[str, Any] = {"k1": last[0], "k2": last[1], "k3": last[2], "k4": last[3]}
            (rows,) = yield Tx((Stmt(f"rot_{column.table}_page", {**params, "tenant": tenant, "limit": batch_size}),))
            if not rows:
                break
            updates = []
            for row in rows:
                new = _new_text(cipher, column, row, active, include_plaintext)
                if new is not None:
                    keys = {"k1": row[0], "k2": row[1], "k3": row[2], "k4": row[3]}
                    updates.append(Stmt(f"rot_{column.table}_set", {**keys, "new": new, "old": row[4]}, "rowcount"))
            if updates:
                counts = yield Tx(tuple(updates))
                changed += sum(counts)
            scanned += len(rows)
            last = [rows[-1][0], rows[-1][1], rows[-1][2], rows[-1][3]]
            if progress is not None:
                yield Call(progress, (column.table, scanned, changed))
        rewritten[column.table] = changed
    for bcolumn in BYTES_COLUMNS:
        rewritten[bcolumn.name] = yield from _rotate_bytes(
            cipher, bcolumn, tenant, batch_size, include_plaintext, progress
        )
    return rewritten
