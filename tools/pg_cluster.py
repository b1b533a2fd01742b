"""Throwaway PostgreSQL clusters for the reliability tests: a primary, streaming replicas, crashes, promotion.

Postgres's own machinery only (``initdb``, ``pg_ctl``, ``pg_basebackup``), from Debian's PostgreSQL 15 binaries
in ``/usr/lib/postgresql/15/bin`` (or ``$PG_BINDIR``). Each cluster lives in its own temporary directory and
listens on a free loopback port, so a test can crash and restart it without touching the machine's main server.
When run as root the server runs as the ``postgres`` OS user (``runuser``), as Postgres refuses root.

``fsync=off``: the faults simulated here are process kills (``kill -9`` of the postmaster and its children),
after which the operating system still holds every write; power loss is not simulated, and with fsync off the
tests do not pay for the disk on a shared machine. ``synchronous_commit`` stays on, so a commit still waits for
its WAL to be written (and, with a synchronous standby, for the standby to have it).

Command line, for the benchmark scripts and by hand::

    python tools/pg_cluster.py start /tmp/pgc      # prints the DSN; Ctrl-C stops it
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

BINDIR = Path(os.environ.get("PG_BINDIR", "/usr/lib/postgresql/15/bin"))
_AS_ROOT = os.geteuid() == 0


def available() -> str | None:
    """None when clusters can be made here, else why not (for ``pytest.skip``)."""
    if not (BINDIR / "initdb").exists():
        return f"no PostgreSQL binaries in {BINDIR} (set $PG_BINDIR)"
    if _AS_ROOT and shutil.which("runuser") is None:
        return "running as root without runuser"
    if _AS_ROOT:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres OS user to run the server as"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(*args: str | Path, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [str(a) for a in args]
    if _AS_ROOT:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=timeout)


def _give_to_postgres(path: Path) -> None:
    if _AS_ROOT:
        shutil.chown(path, "postgres", "postgres")


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the postmaster's backends and auxiliary processes)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True, check=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        child, parent = (int(x) for x in line.split())
        children.setdefault(parent, []).append(child)
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


class PgCluster:
    """One Postgres server: a data directory, a port, and the verbs a failure test needs."""

    def __init__(self, root: Path, port: int, name: str) -> None:
        self.root = root
        self.port = port
        self.name = name
        self.data = root / name
        self.log = root / f"{name}.log"

    # --- making clusters ---------------------------------------------------------------------------------

    @classmethod
    def create(cls, root: Path, *, name: str = "primary", port: int | None = None, **settings: str) -> PgCluster:
        """``initdb`` a new cluster (trust auth on loopback, replication allowed) and start it."""
        root.mkdir(parents=True, exist_ok=True)
        _give_to_postgres(root)
        cluster = cls(root, port or free_port(), name)
        _run(BINDIR / "initdb", "-D", cluster.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{root}'",
            "wal_level": "replica",
            "max_wal_senders": "8",
            "hot_standby": "on",
            "max_connections": "120",
            "shared_buffers": "64MB",
            "fsync": "off",
            "full_page_writes": "off",
            "wal_keep_size": "256MB",
            "logging_collector": "off",
            **settings,
        }
        with (cluster.data / "postgresql.conf").open("a") as f:
            f.write("\n# pgagentstate reliability tests\n")
            f.writelines(f"{k} = {v}\n" for k, v in conf.items())
        (cluster.data / "pg_hba.conf").write_text(
            "local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n"
        )
        cluster.start()
        return cluster

    def make_replica(self, name: str = "replica1", *, port: int | None = None) -> PgCluster:
        """A streaming replica of this (running) cluster, made with ``pg_basebackup``, started.

        Its walreceiver connects as ``application_name=<name>``, the name ``synchronous_standby_names`` uses.
        """
        replica = PgCluster(self.root, port or free_port(), name)
        _run(
            BINDIR / "pg_basebackup",
            "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
            "-D", replica.data, "-X", "stream", "-c", "fast", "--no-sync",
        )  # fmt: skip
        with (replica.data / "postgresql.conf").open("a") as f:
            f.write(f"port = {replica.port}\n")
        with (replica.data / "postgresql.auto.conf").open("a") as f:
            f.write(f"primary_conninfo = 'host=127.0.0.1 port={self.port} user=postgres application_name={name}'\n")
        (replica.data / "standby.signal").touch()
        _give_to_postgres(replica.data / "standby.signal")
        replica.start()
        return replica

    # --- verbs -----------------------------------------------------------------------------------------------

    def dsn(self, dbname: str = "postgres", **params: str) -> str:
        extra = "".join(f" {k}={v}" for k, v in params.items())
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}{extra}"

    def start(self, timeout: float = 60) -> None:
        if self.running():
            return
        _run(BINDIR / "pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", str(int(timeout)), "-o",
             f"-p {self.port}", "start", timeout=timeout + 10)  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m fast|immediate|smart``; no error when it is not running."""
        if self.running():
            _run(BINDIR / "pg_ctl", "-D", self.data, "-w", "-m", mode, "stop", check=False)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError, PermissionError):
            return None

    def running(self) -> bool:
        pid = self.postmaster_pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    def kill9(self) -> None:
        """Crash: SIGKILL to the postmaster and every process under it at once (a lost machine, not a shutdown)."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        for p in _process_tree(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)

    def promote(self) -> None:
        """``pg_ctl promote``: this standby becomes a primary (waits until it accepts writes)."""
        _run(BINDIR / "pg_ctl", "-D", self.data, "-w", "promote")

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        out = _run(BINDIR / "psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", dbname,
                   "-AtX", "-c", sql)  # fmt: skip
        return out.stdout.strip()

    def set(self, **settings: str) -> None:
        """``ALTER SYSTEM SET`` each setting and reload."""
        for key, value in settings.items():
            self.psql(f"ALTER SYSTEM SET {key} = '{value}'")
        self.psql("SELECT pg_reload_conf()")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


@contextlib.contextmanager
def temp_root(prefix: str = "pgas-cluster-") -> Iterator[Path]:
    """A temporary directory the postgres OS user can use; every cluster in it is stopped on exit."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(root, 0o755)
    _give_to_postgres(root)
    try:
        yield root
    finally:
        for pidfile in root.glob("*/postmaster.pid"):
            PgCluster(root, 0, pidfile.parent.name).stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def wait_streaming(primary: PgCluster, replica_name: str, timeout: float = 30) -> None:
    """Until the primary sees the replica streaming."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = primary.psql(f"SELECT state FROM pg_stat_replication WHERE application_name = '{replica_name}'")
        if state == "streaming":
            return
        time.sleep(0.1)
    raise TimeoutError(f"{replica_name} is not streaming from {primary.name}")


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "start":
        print("usage: python tools/pg_cluster.py start DIR", file=sys.stderr)
        return 2
    root = Path(argv[1])
    cluster = PgCluster.create(root)
    print(cluster.dsn(), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
