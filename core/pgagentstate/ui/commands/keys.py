"""``pgagentstate rotate-keys``: re-encrypt every stored value with the active key (resumable)."""

from __future__ import annotations

import argparse
import os
import sys

from ..term import Progress
from .base import Add, emit, open_store


def cmd_rotate_keys(args: argparse.Namespace) -> int:
    """Re-encrypt every stored ciphertext with the active key of ``$PGAGENTSTATE_ENCRYPTION_KEYS``."""
    if not os.environ.get("PGAGENTSTATE_ENCRYPTION_KEYS"):
        print(
            "pgagentstate: set PGAGENTSTATE_ENCRYPTION_KEYS (and PGAGENTSTATE_ENCRYPTION_ACTIVE_KEY)", file=sys.stderr
        )
        return 2
    progress = Progress()

    def report(table: str, scanned: int, rewritten: int) -> None:
        progress(f"{table} ({rewritten} re-encrypted)", scanned, scanned)

    with open_store(args) as store:
        counts = store.rotate_keys(
            all_tenants=args.all_tenants,
            batch_size=args.batch_size,
            include_plaintext=args.include_plaintext,
            progress=report,
        )
    progress.finish()
    emit(args, counts, lambda: "\n".join(f"{table:<20} {n} re-encrypted" for table, n in counts.items()))
    return 0


def register(add: Add) -> None:
    p = add("rotate-keys", cmd_rotate_keys, "re-encrypt stored values with the active key (resumable)")
    p.add_argument("--all-tenants", action="store_true", help="every tenant, not only --tenant (run as the owner)")
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--include-plaintext", action="store_true", help="also encrypt rows written before encryption")
