"""The ``pgagentstate`` command line: the parser with the options every command shares, and :func:`main`.
The commands themselves (migrate, doctor, conversations, show, state, health, gc, stats, export, erase,
rotate-keys, ui) are in :mod:`pgagentstate.ui.commands`, one module per command group."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .errors import PgAgentStateError
from .ui.commands import add_commands


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
    add_commands(parser.add_subparsers(dest="command", required=True), common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except PgAgentStateError as exc:
        print(f"pgagentstate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`pgagentstate export u | head`): not an error of ours. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
