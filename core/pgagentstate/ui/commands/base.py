"""What every operator command uses: a store opened from the arguments, output as a plain-text table or
JSON (``--json``), and the argument types for durations and days."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any

from ...ops import operations
from ...ops.operations import to_jsonable
from ...sync import StateStore
from ..term import parse_duration, printable

Command = Callable[[argparse.Namespace], int]
#: ``add(name, command, help)``: registers a subcommand (with the common options) and returns its parser.
Add = Callable[[str, Command, str], argparse.ArgumentParser]

def open_store(args: argparse.Namespace, *, max_size: int = 2) -> StateStore:
    """A store for the command: DSN, tenant, schema and PgBouncer mode from the arguments; encryption keys
    from ``$PGAGENTSTATE_ENCRYPTION_KEYS`` when set (plaintext rows still read, for mixed databases)."""
    kwargs: dict[str, Any] = {}
    if os.environ.get("PGAGENTSTATE_ENCRYPTION_KEYS"):
        from ...crypto import Encryption, EnvKeyProvider

        kwargs["encryption"] = Encryption(EnvKeyProvider(), required=False)
    return StateStore(
        args.dsn,
        tenant=args.tenant,
        schema=args.schema,
        min_size=1,
        max_size=max_size,
        pgbouncer=bool(getattr(args, "pgbouncer", False)),
        **kwargs,
    )


def emit(args: argparse.Namespace, data: Any, render: Callable[[], str]) -> None:
    """Print ``data`` as JSON with ``--json``, else the text ``render`` builds; control characters of
    customer data are escaped either way (:func:`~pgagentstate.ui.term.printable`)."""
    if args.json:
        print(printable(json.dumps(to_jsonable(data), indent=2, ensure_ascii=False)))
    else:
        print(printable(render()))


def duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("days must not be negative")
    return value


def idle_option(p: argparse.ArgumentParser) -> None:
    """``--idle DUR``: after how long without activity an open conversation counts as abandoned."""
    p.add_argument(
        "--idle",
        type=duration,
        default=operations.DEFAULT_IDLE,
        metavar="DUR",
        help="an open conversation without activity for this long counts as abandoned (default 24h)",
    )
