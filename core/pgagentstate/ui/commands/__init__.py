"""The ``pgagentstate`` subcommands, one module per command group: each holds its ``cmd_*`` functions (run
operations of :mod:`pgagentstate.ops.operations` on a ``StateStore``, print a plain-text table or JSON with
``--json``) and ``register(add)``, which declares them and their options. A new command: a module with both,
listed in :data:`MODULES` (the order of ``pgagentstate --help``).
"""

from __future__ import annotations

import argparse
from typing import Any

from . import conversations, doctor, embedded, health, keys, privacy, retention, schema, stats, timeline, viewer
from .base import Command, emit, open_store

MODULES = (schema, doctor, keys, conversations, timeline, health, retention, stats, privacy, viewer, embedded)


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register every subcommand on the ``pgagentstate`` parser, each with the ``common`` options."""

    def add(name: str, fn: Command, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help, description=help)
        p.set_defaults(fn=fn)
        return p

    for module in MODULES:
        module.register(add)


__all__ = ["add_commands", "emit", "open_store"]
