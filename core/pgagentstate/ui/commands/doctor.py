"""``pgagentstate doctor``: connectivity, server, schema, row-level security, encryption, pool and PgBouncer."""

from __future__ import annotations

import argparse
import time

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ...connect import resolve_dsn
from ...ops import operations
from ...ops.operations import Check, PoolSettings
from ..term import table
from .base import Add, emit, open_store


def cmd_doctor(args: argparse.Namespace) -> int:
    dsn = resolve_dsn(args.dsn)
    checks: list[Check] = []
    try:
        started = time.perf_counter()
        with psycopg.connect(dsn, connect_timeout=args.timeout, autocommit=True) as conn:
            conn.execute("SELECT 1")
        elapsed = (time.perf_counter() - started) * 1000
    except psycopg.Error as exc:
        checks.append(Check("connection", "fail", f"cannot connect: {str(exc).strip()}"))
    else:
        port = conninfo_to_dict(dsn).get("port")
        pool = PoolSettings(
            min_size=1,
            max_size=args.pool_size,
            pgbouncer=args.pgbouncer,
            tenant_isolation=args.tenant_isolation,
            dsn_port=int(str(port).split(",")[0]) if port else 5432,
            processes=args.processes,
        )
        with open_store(args) as store:
            checks = store.run(operations.doctor(store.context, args.schema, pool))
        checks.insert(1, Check("latency", "info", f"connect + first query: {elapsed:.1f} ms"))
    marks = {"ok": "ok", "info": "--", "warn": "WARN", "fail": "FAIL"}
    emit(
        args,
        checks,
        lambda: table(["", "check", "detail"], [(marks[c.status], c.name, c.detail) for c in checks],
                      whole=("detail",)),
    )
    return 1 if any(c.status == "fail" for c in checks) else 0


def register(add: Add) -> None:
    p = add("doctor", cmd_doctor, "check connectivity, server, schema, RLS, encryption, pool and PgBouncer settings")
    p.add_argument("--timeout", type=int, default=5, help="connect timeout in seconds (default 5)")
    p.add_argument("--pool-size", type=int, default=10, help="max_size of your application's pool (default 10)")
    p.add_argument("--processes", type=int, default=1, help="application processes sharing the server (default 1)")
    p.add_argument("--tenant-isolation", action="store_true", help="your application uses tenant_isolation=True")
