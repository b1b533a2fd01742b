"""An embedded Postgres for machines that have none: the ``pgserver`` package ships the binaries.

The server's data directory defaults to ``./.pgagentstate/pg`` (``$PGAGENTSTATE_DATA_DIR`` overrides it).
The server is left running when the process exits, so the next run reuses it at once.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from pathlib import Path

_lock = threading.Lock()
_dsns: dict[Path, str] = {}


def data_dir() -> Path:
    return Path(os.environ.get("PGAGENTSTATE_DATA_DIR", ".pgagentstate/pg")).resolve()


def embedded_dsn(path: Path | None = None) -> str:
    """Start (or reuse) the embedded server and return its DSN; says so once on stderr."""
    path = (path or data_dir()).resolve()
    with _lock:
        if path in _dsns:
            return _dsns[path]
        path.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless here.
            warnings.simplefilter("ignore")
            import pgserver

            server = pgserver.get_server(path, cleanup_mode=None)  # type: ignore[attr-defined]
        dsn = server.get_uri()
        print(f"pgagentstate: no DSN given; using the embedded Postgres in {path}", file=sys.stderr)
        _dsns[path] = dsn
        return dsn
