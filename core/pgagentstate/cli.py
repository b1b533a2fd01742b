"""The ``pgagentstate`` command line: ``migrate`` here, the operator commands (doctor, conversations, show,
state, health, gc, stats, export, erase, ui) in :mod:`pgagentstate.ui.cli`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from .errors import PgAgentStateError
from .sync import StateStore
from .ui.cli import add_commands, open_store


def _store(args: argparse.Namespace) -> StateStore:
    return open_store(args)


def _print(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if args.json else text)


def cmd_migrate(args: argparse.Namespace) -> int:
    with _store(args) as store:
        applied = store.setup()
        current, pending = store.migration_status()
    _print(
        args,
        {"applied_now": applied, "schema_versions": current, "pending": pending},
        f"schema {args.schema!r}: applied {applied or 'nothing'}; now at {current[-1] if current else None}",
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgagentstate", description="Durable conversation state for AI agents.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dsn",
        default=None,
        help="Postgres DSN (default: $PGAGENTSTATE_DSN, $DATABASE_URL, "
        "else an embedded Postgres in ./.pgagentstate/pg)",
    )
    common.add_argument("--tenant", default="default")
    common.add_argument("--schema", default="pgagentstate")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument(
        "--pgbouncer", action="store_true", help="connecting through PgBouncer: no server-side prepared statements"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("migrate", parents=[common], help="create or upgrade the schema").set_defaults(fn=cmd_migrate)
    # doctor, conversations, show, state, health, gc, stats, export, erase, ui
    add_commands(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except PgAgentStateError as exc:
        print(f"pgagentstate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
