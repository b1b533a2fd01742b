"""``pgagentstate migrate``: create or upgrade the schema (advisory-locked, idempotent)."""

from __future__ import annotations

import argparse

from .base import Add, emit, open_store


def cmd_migrate(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        applied = store.setup()
        current, pending = store.migration_status()
    # Numbers without a migration were never released (migrations are never renumbered): say so, or the
    # list reads as if one had been skipped.
    unused = sorted(set(range(1, max(current, default=0) + 1)) - set(current))
    note = f" (no migration {', '.join(map(str, unused))}: never released)" if unused else ""
    emit(
        args,
        {"applied_now": applied, "schema_versions": current, "pending": pending, "unused_numbers": unused},
        lambda: f"schema {args.schema!r}: applied {applied or 'nothing'}; now at {current[-1] if current else None}"
        + note,
    )
    return 0


def register(add: Add) -> None:
    add("migrate", cmd_migrate, "create or upgrade the schema")
