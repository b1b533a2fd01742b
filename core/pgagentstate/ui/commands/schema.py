"""``pgagentstate migrate``: create or upgrade the schema (advisory-locked, idempotent)."""

from __future__ import annotations

import argparse

from .base import Add, emit, open_store


def cmd_migrate(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        applied = store.setup()
        current, pending = store.migration_status()
    emit(
        args,
        {"applied_now": applied, "schema_versions": current, "pending": pending},
        lambda: f"schema {args.schema!r}: applied {applied or 'nothing'}; now at {current[-1] if current else None}",
    )
    return 0


def register(add: Add) -> None:
    add("migrate", cmd_migrate, "create or upgrade the schema")
