"""What every memory operation shares: where an item lives (``ns_path``), its associated data, and a row
read back as a :class:`~pgagentstate.models.Memory`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import textsearch
from ..crypto import AD
from ..models import Memory
from ..sealing import ad, unseal
from .base import Ctx, Row

SEP = "\x1f"


def memory_ad(ctx: Ctx, labels: Sequence[str], key: str) -> AD:
    return ad(ctx.tenant, "memory", ns_path(labels), key)


def memory_from_row(ctx: Ctx, row: Row) -> Memory:
    return Memory(
        namespace=tuple(row[0]),
        key=row[1],
        value=unseal(ctx.cipher, row[2], memory_ad(ctx, row[0], row[1])),
        user_id=row[3],
        version=row[4],
        created_at=row[5],
        updated_at=row[6],
        expires_at=row[7],
        score=None if row[8] is None else float(row[8]),
    )


def ns_path(labels: Sequence[str]) -> str:
    return "".join(label + SEP for label in labels)


def contains(value: Any, pattern: Any) -> bool:
    """jsonb ``@>`` for decrypted values."""
    if isinstance(pattern, dict):
        return isinstance(value, dict) and all(k in value and contains(value[k], v) for k, v in pattern.items())
    if isinstance(pattern, list):
        return isinstance(value, list) and all(any(contains(v, p) for v in value) for p in pattern)
    return bool(value == pattern)


def word_params(words: Sequence[Sequence[str]]) -> dict[str, Any]:
    """A query's words (:func:`~pgagentstate.textsearch.query_words`) as memory_search and
    memory_search_hybrid take them: one tsquery per word, and their OR, which the full-text index serves."""
    tsqueries = [textsearch.tsquery(w) for w in words]
    return {"tsq": " | ".join(f"({q})" for q in tsqueries), "words": tsqueries}
