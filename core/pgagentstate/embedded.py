"""An embedded Postgres for machines that have none: the ``pgserver`` package ships the binaries.

The server's data directory defaults to ``./.pgagentstate/pg`` (``$PGAGENTSTATE_DATA_DIR`` overrides it).
The server is left running when the process exits, so the next run reuses it at once;
``pgagentstate embedded status`` shows it and ``pgagentstate embedded stop`` stops it (:func:`running`,
:func:`stop`).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_dsns: dict[Path, str] = {}


def data_dir() -> Path:
    return Path(os.environ.get("PGAGENTSTATE_DATA_DIR", ".pgagentstate/pg")).resolve()


def _pgserver() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless here.
        warnings.simplefilter("ignore")
        import pgserver

    return pgserver


def embedded_dsn(path: Path | None = None) -> str:
    """Start (or reuse) the embedded server and return its DSN; says so once on stderr."""
    path = (path or data_dir()).resolve()
    with _lock:
        if path in _dsns:
            return _dsns[path]
        path.mkdir(parents=True, exist_ok=True)
        server = _pgserver().get_server(path, cleanup_mode=None)
        dsn = str(server.get_uri())
        print(
            f"pgagentstate: no DSN given; using the embedded Postgres in {path} (it keeps running after this "
            "process exits; `pgagentstate embedded stop` stops it)",
            file=sys.stderr,
        )
        _dsns[path] = dsn
        return dsn


@dataclass(frozen=True)
class EmbeddedServer:
    """A running embedded server: its data directory, postmaster pid, DSN and start time."""

    data_dir: Path
    pid: int
    dsn: str
    started_at: datetime


def running(path: Path | None = None) -> EmbeddedServer | None:
    """The embedded server of ``path`` (default :func:`data_dir`) if it is running; never starts one."""
    path = (path or data_dir()).resolve()
    if not (path / "postmaster.pid").exists():
        return None
    _pgserver()  # imports it without the warning
    from pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(path)
    if info is None or not info.is_running():
        return None
    return EmbeddedServer(path, int(info.pid), str(info.get_uri()), info.start_time)


def stop(path: Path | None = None) -> EmbeddedServer | None:
    """Stop the embedded server of ``path`` (fast shutdown: open sessions are ended); the server it
    stopped, or None when none was running."""
    path = (path or data_dir()).resolve()
    server = running(path)
    if server is None:
        return None
    # pgserver runs the server as the system user "pgserver" when started by root: stop it as that user.
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    _pgserver().pg_ctl(["-w", "-m", "fast", "stop"], pgdata=path, user="pgserver" if as_root else None, timeout=120)
    with _lock:
        _dsns.pop(path, None)
    return server
