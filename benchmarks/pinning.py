"""Benchmark client on one CPU, the local Postgres server on another (``--pin``).

On loopback a round trip costs about twice as much when a connection's server process runs on another
core than the client's thread as when it runs on the same one (2 cores here, `SELECT 1` on six fresh
connections: 36-38 us on the client's core, 72-86 us on the other). Where the scheduler puts each
server process is luck that lasts as long as its connection, so two sides of a comparison, each with its
own connections, can draw different luck: one side's pooled connection kept 2x slower round trips for a
whole run. Pinned, every connection of every side pays the same cross-core round trip, as every
connection pays a network's in production.

Needs a server on this machine whose processes this user may re-pin (root, or the server's own user);
otherwise it says why and changes nothing. The server's processes get their CPUs back at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg


def _parent(pid: int) -> int:
    # /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after its ")"
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _children(parent: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if _parent(int(entry.name)) == parent:
                    out.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue  # a process that ended meanwhile
    return out


@contextmanager
def pinned(dsn: str, client_cpu: int = 0, server_cpu: int = 1) -> Iterator[str]:
    """Pin this process to ``client_cpu`` and the server behind ``dsn`` (its postmaster and every process
    it has started; backends started later inherit it) to ``server_cpu``; yields what was done."""
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        yield "not pinned: needs Linux and 2 CPUs"
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        backend = conn.info.backend_pid
        postmaster = _parent(backend) if Path(f"/proc/{backend}").exists() else 0
    if not postmaster:
        yield "not pinned: the server is not on this machine"
        return
    saved: dict[int, set[int]] = {}
    mine = os.sched_getaffinity(0)
    try:
        for pid in [postmaster, *_children(postmaster)]:
            try:
                saved[pid] = os.sched_getaffinity(pid)
                os.sched_setaffinity(pid, {server_cpu})
            except ProcessLookupError:
                continue
        os.sched_setaffinity(0, {client_cpu})
    except PermissionError as exc:
        for pid, cpus in saved.items():
            with suppress(ProcessLookupError, PermissionError):
                os.sched_setaffinity(pid, cpus)
        yield f"not pinned: {exc}"
        return
    try:
        others = len(saved) - 1
        yield f"pinned: client on CPU {client_cpu}, Postgres (pid {postmaster} and {others} others) on CPU {server_cpu}"
    finally:
        os.sched_setaffinity(0, mine)
        for pid in [postmaster, *_children(postmaster)]:
            with suppress(ProcessLookupError, PermissionError):
                os.sched_setaffinity(pid, saved.get(pid, saved[postmaster]))

