"""A private PgBouncer (transaction pooling) in front of a Postgres server, for tests.

The same configuration as ``.ci/pgbouncer.sh`` (which serves the whole suite on 127.0.0.1:6432), but on a free
port, in a temporary directory, in front of any server: the reliability tests put it before their own
throwaway cluster so that killing server connections never touches the machine's main server.

Debian's ``pgbouncer`` package (1.18) has no prepared-statement support in transaction mode: clients must
not use server-side prepared statements (``AsyncStateStore(..., pgbouncer=True)``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
_AS_ROOT = os.geteuid() == 0


def available() -> str | None:
    """None when PgBouncer can be started here, else why not (for ``pytest.skip``)."""
    if not Path(PGBOUNCER).exists():
        return "pgbouncer is not installed (apt-get install -y pgbouncer)"
    return None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgBouncer:
    """``with PgBouncer(server_port=5432) as bouncer: bouncer.dsn("test")``."""

    def __init__(
        self,
        *,
        server_port: int,
        server_host: str = "127.0.0.1",
        port: int | None = None,
        pool_size: int = 10,
        users: tuple[str, ...] = ("postgres",),
    ) -> None:
        self.server_host, self.server_port = server_host, server_port
        self.port = port or _free_port()
        self.pool_size = pool_size
        self.users = users
        self.dir = Path(tempfile.mkdtemp(prefix="pgas-pgbouncer-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def dsn(self, dbname: str = "postgres", **params: str) -> str:
        extra = "".join(f" {k}={v}" for k, v in params.items())
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}{extra}"

    def start(self) -> PgBouncer:
        (self.dir / "userlist.txt").write_text("".join(f'"{u}" ""\n' for u in self.users))
        (self.dir / "pgbouncer.ini").write_text(
            f"""[databases]
* = host={self.server_host} port={self.server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir}/userlist.txt
pool_mode = transaction
default_pool_size = {self.pool_size}
max_db_connections = {self.pool_size}
max_client_conn = 2000
server_reset_query =
server_login_retry = 0
ignore_startup_parameters = extra_float_digits,options
logfile = {self.dir}/pgbouncer.log
admin_users = postgres
"""
        )
        cmd = [PGBOUNCER, str(self.dir / "pgbouncer.ini")]
        as_user: dict[str, object] = {}
        if _AS_ROOT:
            shutil.chown(self.dir, "postgres", "postgres")
            for f in self.dir.iterdir():
                shutil.chown(f, "postgres", "postgres")
            as_user = {"user": "postgres", "group": "postgres", "extra_groups": []}
        # Foreground process (no -d): its pid is ours to stop.
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **as_user)  # type: ignore[call-overload]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.dsn("pgbouncer"), autocommit=True, prepare_threshold=None) as conn:
                    conn.execute("SHOW VERSION")
                return self
            except psycopg.OperationalError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"pgbouncer did not start:\n{self.log_tail()}")

    def show(self, what: str) -> list[dict[str, object]]:
        """``SHOW POOLS``/``SHOW STATS``... from the admin console, as dicts."""
        with psycopg.connect(self.dsn("pgbouncer"), autocommit=True, prepare_threshold=None) as conn:
            cur = conn.execute(f"SHOW {what}")
            names = [d.name for d in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join((self.dir / "pgbouncer.log").read_text().splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # SIGTERM: exit now (SIGINT would wait for the clients to leave).
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
