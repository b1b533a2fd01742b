"""``pgagentstate embedded status|stop``: the embedded Postgres that runs when no DSN is given. It keeps
running after the process that started it exits (so the next run starts at once) until stopped here."""

from __future__ import annotations

import argparse
from pathlib import Path

from ... import embedded
from ..term import clock, key_values
from .base import Add, emit


def cmd_embedded(args: argparse.Namespace) -> int:
    path = Path(args.data_dir) if args.data_dir else embedded.data_dir()
    server = embedded.stop(path) if args.action == "stop" else embedded.running(path)
    if server is None:
        emit(args, {"data_dir": str(path.resolve()), "running": False},
             lambda: f"no embedded Postgres running in {path.resolve()}")
        return 0 if args.action == "stop" else 1
    if args.action == "stop":
        emit(args, {"data_dir": str(server.data_dir), "running": False, "stopped_pid": server.pid},
             lambda: f"stopped the embedded Postgres in {server.data_dir} (pid {server.pid})")
        return 0
    emit(
        args,
        {"data_dir": str(server.data_dir), "running": True, "pid": server.pid, "dsn": server.dsn,
         "started_at": server.started_at.isoformat()},
        lambda: key_values([("embedded Postgres", "running"), ("data directory", server.data_dir),
                            ("pid", server.pid), ("dsn", server.dsn),
                            ("started", clock(server.started_at.astimezone()))]),
    )
    return 0


def register(add: Add) -> None:
    p = add("embedded", cmd_embedded, "the embedded Postgres used when no DSN is given: status (exit 1 when not "
            "running) or stop")
    p.add_argument("action", choices=["status", "stop"])
    p.add_argument("--data-dir", help="its data directory (default $PGAGENTSTATE_DATA_DIR, else ./.pgagentstate/pg)")
