"""``pgagentstate export`` / ``erase``: everything of one user as JSON, or deleted in one transaction (GDPR)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from ...ops import operations
from ..term import printable, table
from .base import Add, emit, open_store


def cmd_export(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        doc = store.run(operations.export_user(store.context, args.user))
    text = json.dumps(doc, indent=2, ensure_ascii=False)
    if args.output and args.output != "-":
        _write_private(Path(args.output), text + "\n")
        print(
            f"exported {len(doc['conversations'])} conversation(s), {len(doc['memories'])} memories and "
            f"{len(doc['archived_conversations'])} archived conversation(s) of user {args.user!r} to {args.output}",
            file=sys.stderr,
        )
    else:
        print(printable(text))
    return 0


def _write_private(path: Path, text: str) -> None:
    """Write the export (personal data) readable by its owner only, whatever was at ``path`` before.

    A new file (mode 0600, as ``mkstemp`` creates it) next to the target is renamed over it: an existing
    file's wider mode is not kept, a symlink planted at ``path`` is replaced rather than followed, and a
    reader never sees half an export."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cmd_erase(args: argparse.Namespace) -> int:
    if not args.dry_run and not args.yes:
        if not sys.stdin.isatty():
            print("pgagentstate: erase deletes everything of the user; pass --yes to confirm", file=sys.stderr)
            return 2
        answer = input(f"Erase everything of user {args.user!r} in tenant {args.tenant!r}? Type the user id: ")
        if answer.strip() != args.user:
            print("not confirmed; nothing erased", file=sys.stderr)
            return 1
    with open_store(args) as store:
        counts = store.run(operations.erase_user(store.context, args.user, dry_run=args.dry_run))
    verb = "would erase" if args.dry_run else "erased"
    emit(
        args,
        {"user_id": args.user, "dry_run": args.dry_run, "counts": counts},
        lambda: f"{verb} for user {args.user!r}:\n" + table(["what", "rows"], list(counts.items())),
    )
    return 0


def register(add: Add) -> None:
    p = add("export", cmd_export, "export everything of one user as JSON (GDPR access request)")
    p.add_argument("user", help="user id")
    p.add_argument("-o", "--output", help="file to write (mode 0600); default stdout")

    p = add("erase", cmd_erase, "erase everything of one user (GDPR erasure), in one transaction")
    p.add_argument("user", help="user id")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--dry-run", action="store_true", help="count what would be erased")
