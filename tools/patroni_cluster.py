"""A Patroni-managed PostgreSQL 15 pair on loopback: one etcd, a primary and a synchronous standby.

For the failover test (``tests/reliability/test_patroni.py``). Debian's packages: ``patroni`` (3.0) and
``etcd-server`` (3.4); Patroni talks to etcd through its v3 API (``etcd3``). Everything lives in one
temporary directory (:func:`pg_cluster.temp_root`) and listens on free loopback ports. Patroni and its
Postgres run as the ``postgres`` OS user when this runs as root (Postgres refuses root).

Timings are short so that a failover takes seconds, not the defaults' half minute: ``ttl`` 6 s (the leader
key expires 6 s after the leader last renewed it), ``loop_wait`` 1 s, ``retry_timeout`` 2 s (Patroni asks
``loop_wait + 2 * retry_timeout <= ttl``). ``synchronous_mode``: Patroni names the standby in
``synchronous_standby_names`` and promotes only a synchronous standby, so a commit acknowledged by the
primary is on the standby that takes over. ``fsync=off`` as in ``pg_cluster.py``: the faults are process
kills, after which the OS still holds every write.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from pg_cluster import _AS_ROOT, BINDIR, PgCluster, _give_to_postgres, _process_tree, free_port

ETCD = shutil.which("etcd")
PATRONI = shutil.which("patroni")


def unavailable() -> str | None:
    """None when a Patroni cluster can be made here, else why not (for ``pytest.skip``)."""
    if PATRONI is None or ETCD is None:
        return "Patroni and etcd are not installed (apt-get install patroni etcd-server)"
    if not (BINDIR / "initdb").exists():
        return f"no PostgreSQL binaries in {BINDIR} (set $PG_BINDIR)"
    if _AS_ROOT and shutil.which("runuser") is None:
        return "running as root without runuser"
    return None


def _kill_tree(pid: int) -> None:
    for p in _process_tree(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


def _get(url: str, timeout: float = 1.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


class Etcd:
    """A single-member etcd on loopback, data in ``root/etcd``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.client_port, self.peer_port = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 20) -> Etcd:
        assert ETCD is not None
        client, peer = f"http://127.0.0.1:{self.client_port}", f"http://127.0.0.1:{self.peer_port}"
        with (self.root / "etcd.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [ETCD, "--name", "e1", "--data-dir", str(self.root / "etcd"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"e1={peer}", "--initial-cluster-state", "new"],
                stdout=log, stderr=log,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            try:
                if _get(f"{client}/health").get("health") == "true":
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"etcd did not start (log in {self.root / 'etcd.log'})")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class PatroniNode:
    """One Patroni process and the Postgres it manages (data in ``root/<name>``)."""

    def __init__(self, root: Path, name: str, etcd: Etcd, scope: str) -> None:
        self.root, self.name, self.etcd, self.scope = root, name, etcd, scope
        self.port, self.api_port = free_port(), free_port()
        self.pg = PgCluster(root, self.port, name)  # the verbs on its data directory (kill9, psql)
        self.config = root / f"{name}.yml"
        self.log = root / f"{name}-patroni.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def settings(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "namespace": "/pgagentstate-tests/",
            "name": self.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{self.api_port}", "connect_address": f"127.0.0.1:{self.api_port}"},
            "etcd3": {"hosts": self.etcd.hosts},
            "bootstrap": {
                "dcs": {
                    "ttl": 6,
                    "loop_wait": 1,
                    "retry_timeout": 2,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": False,
                        "use_slots": True,
                        "parameters": {
                            "max_connections": 200,
                            "shared_buffers": "32MB",
                            "fsync": "off",
                            "full_page_writes": "off",
                            "wal_keep_size": "256MB",
                            "hot_standby": "on",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}, "no-sync"],
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.port}",
                "connect_address": f"127.0.0.1:{self.port}",
                "data_dir": str(self.pg.data),
                "bin_dir": str(BINDIR),
                "pgpass": str(self.root / f"{self.name}.pgpass"),
                "authentication": {"superuser": {"username": "postgres"}, "replication": {"username": "postgres"}},
                "parameters": {"unix_socket_directories": str(self.root)},
                "basebackup": [{"checkpoint": "fast"}],
                # A node killed while primary may hold WAL its successor never got: it comes back as the new
                # standby from a fresh base backup (the soak's failover fault; small databases: seconds).
                "remove_data_directory_on_diverged_timelines": True,
                "remove_data_directory_on_rewind_failure": True,
            },
        }

    def start(self) -> PatroniNode:
        assert PATRONI is not None
        self.config.write_text(json.dumps(self.settings(), indent=1))  # JSON is YAML
        _give_to_postgres(self.config)
        cmd = [PATRONI, str(self.config)]
        if _AS_ROOT:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
        return self

    def status(self) -> dict[str, Any]:
        """Patroni's own view of this node (``GET /patroni``): role, state, timeline."""
        return dict(_get(f"http://127.0.0.1:{self.api_port}/patroni"))

    def kill9(self) -> None:
        """The machine dies: SIGKILL to Patroni and to the Postgres it started (which Patroni detaches)."""
        postmaster = self.pg.postmaster_pid()
        victims = [
            *(_process_tree(self.proc.pid) if self.proc else []),
            *(_process_tree(postmaster) if postmaster else []),
        ]
        for pid in victims:  # all at once; the postmaster is not waited for (its sockets die with it)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # Patroni stops its Postgres (fast) and leaves
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                _kill_tree(self.proc.pid)
                self.proc.wait(10)
        self.pg.stop("immediate")

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(FileNotFoundError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


class PatroniPair:
    """etcd + two Patroni nodes; ``with`` starts them and stops everything, whatever happened."""

    def __init__(self, root: Path, scope: str = "pgas") -> None:
        self.root = root
        self.etcd = Etcd(root)
        self.nodes = [PatroniNode(root, f"node{i}", self.etcd, scope) for i in (1, 2)]

    def dsn(self, **params: str) -> str:
        """The multi-host DSN a worker uses: libpq tries each node and keeps the one that accepts writes."""
        hosts = ",".join("127.0.0.1" for _ in self.nodes)
        ports = ",".join(str(n.port) for n in self.nodes)
        extra = "".join(f" {k}={v}" for k, v in params.items())
        return f"host={hosts} port={ports} user=postgres dbname=postgres target_session_attrs=read-write{extra}"

    def cluster(self) -> list[dict[str, Any]]:
        """The members as Patroni sees them (``GET /cluster`` of any node that answers)."""
        for node in self.nodes:
            with contextlib.suppress(OSError, ValueError):
                return list(_get(f"http://127.0.0.1:{node.api_port}/cluster")["members"])
        return []

    def roles(self) -> dict[str, str]:
        """Each member's role (``leader``, ``sync_standby``, ``replica``) while its Postgres is up."""
        return {m["name"]: m["role"] for m in self.cluster() if m.get("state") in ("running", "streaming")}

    def wait(self, want: dict[str, str], timeout: float = 90) -> None:
        """Until the members' roles are ``want`` (e.g. ``{"node1": "leader"}``)."""
        deadline = time.monotonic() + timeout
        while True:
            roles = self.roles()
            if all(roles.get(k) == v for k, v in want.items()):
                return
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n.name}\n{n.log_tail()}" for n in self.nodes)
                raise TimeoutError(f"Patroni cluster not {want} after {timeout} s: {roles}\n{logs}")
            time.sleep(0.2)

    def leader(self) -> PatroniNode | None:
        names = [name for name, role in self.roles().items() if role == "leader"]
        return next((n for n in self.nodes if n.name in names), None)

    def start(self) -> PatroniPair:
        _give_to_postgres(self.root)
        self.etcd.start()
        first, second = self.nodes
        first.start()
        self.wait({first.name: "leader"})
        second.start()  # pg_basebackup from the leader, then streams; Patroni makes it the sync standby
        self.wait({first.name: "leader", second.name: "sync_standby"})
        return self

    def stop(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.stop()
        self.etcd.stop()

    def __enter__(self) -> PatroniPair:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
