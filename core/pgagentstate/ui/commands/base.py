"""What every operator command uses: a store opened from the arguments, output as a plain-text table or
JSON (``--json``), and the argument types for durations and days."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

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


def find_conversation(store: StateStore, given: str) -> str | None:
    """The stored id of the conversation an operator means: ``given`` as it is, else with each part after
    the framework prefix percent-encoded, as the ADK adapter stores it (``adk:shop/ana@x.com/s1`` is
    ``adk:shop/ana%40x.com/s1``); None when neither exists."""
    prefix, colon, rest = given.partition(":")
    candidates = [given]
    if colon and rest:
        candidates.append(prefix + ":" + "/".join(quote(part, safe="") for part in rest.split("/")))
    for cid in dict.fromkeys(candidates):
        if store.get_conversation(cid) is not None:
            return cid
    return None


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
    """Days: a plain number (``30``) or a duration (``30d``, ``12h``, ``2w``)."""
    try:
        value = float(text)
    except ValueError:
        try:
            value = parse_duration(text) / 86400
        except ValueError:
            raise argparse.ArgumentTypeError(f"not days or a duration: {text!r} (e.g. 30, 30d, 12h)") from None
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
