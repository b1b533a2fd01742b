"""The checks of ``pgagentstate doctor``: connection, server version, schema and migrations, row-level
security, encryption, pool sizing and PgBouncer, autovacuum."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ...crypto import MARKER
from .. import migrations as migration_ops
from ..base import Ctx, Op, Row, Stmt, Tx

CheckStatus = Literal["ok", "info", "warn", "fail"]

#: Oldest PostgreSQL the schema is tested on (hashtextextended, jsonb subscripts, starts_with need >= 11/13).
MIN_SERVER_VERSION = 130000


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: CheckStatus
    detail: str


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """How the caller's store connects, for the pool and PgBouncer checks."""

    min_size: int = 1
    max_size: int = 10
    pgbouncer: bool = False
    tenant_isolation: bool = False
    dsn_port: int | None = None
    processes: int = 1


def doctor(ctx: Ctx, schema: str, pool: PoolSettings | None = None) -> Op[list[Check]]:
    """Connectivity, server version, schema version and pending migrations, row-level security,
    encryption, pool sizing and PgBouncer compatibility, as a list of checks."""
    pool = pool or PoolSettings()
    checks: list[Check] = []
    (server,) = yield Tx((Stmt("ops_doctor_server", {}, "one"),))
    (
        version,
        version_num,
        database,
        user,
        superuser,
        bypassrls,
        max_conn,
        in_use,
        stmt_timeout,
        idle_tx_timeout,
        lock_timeout,
        isolation,
        ssl,
        server_port,
        _now,
        autovacuum,
        track_counts,
    ) = server
    checks.append(Check("connection", "ok", f"connected to database {database!r} as {user!r}"))
    checks.append(
        Check(
            "server version",
            "ok" if version_num >= MIN_SERVER_VERSION else "fail",
            f"PostgreSQL {version}" + ("" if version_num >= MIN_SERVER_VERSION else " (13 or newer is required)"),
        )
    )
    applied, pending = yield from migration_ops.status(schema)
    known = {m.version for m in migration_ops.migrations()}
    newer = [v for v in applied if v not in known]
    if not applied:
        checks.append(Check("schema", "fail", f"schema {schema!r} is not set up: run `pgagentstate migrate`"))
    elif newer:
        checks.append(
            Check("schema", "fail", f"schema {schema!r} has migrations {newer} this library does not know: upgrade it")
        )
    elif pending:
        checks.append(
            Check("schema", "warn", f"schema {schema!r} at {applied[-1]}, pending {pending}: `pgagentstate migrate`")
        )
    else:
        checks.append(Check("schema", "ok", f"schema {schema!r} at version {applied[-1]}, nothing pending"))
    if applied:
        (rls_rows,) = yield Tx((Stmt("ops_doctor_rls", {"schema_name": schema}, "all"),))
        checks.extend(_rls_checks(rls_rows, superuser=bool(superuser), bypassrls=bool(bypassrls), pool=pool))
    sample = (0, 0)
    if applied:
        (sample,) = yield Tx((Stmt("ops_doctor_encryption", {"marker": MARKER, "limit": 500}, "one"),))
    checks.append(_encryption_check(ctx, ssl, encrypted=sample[0], sampled=sample[1]))
    checks.extend(pool_checks(pool, max_conn=max_conn, in_use=in_use, server_port=server_port))
    for name, value in (("statement_timeout", stmt_timeout), ("lock_timeout", lock_timeout)):
        checks.append(Check(name, "info", f"{name} = {value}"))
    checks.append(
        Check(
            "idle_in_transaction_session_timeout",
            "info" if idle_tx_timeout in ("0", "0ms") else "warn",
            f"= {idle_tx_timeout}"
            + (
                ""
                if idle_tx_timeout in ("0", "0ms")
                else "; conversation_lock and gc hold a transaction open while they run: keep this above their duration"
            ),
        )
    )
    checks.append(autovacuum_check(autovacuum, track_counts))
    if isolation != "read committed":
        checks.append(
            Check(
                "isolation",
                "warn",
                f"default_transaction_isolation = {isolation}; the store expects "
                "read committed (it raises the level itself where needed)",
            )
        )
    return checks


def _rls_checks(rows: Sequence[Row], *, superuser: bool, bypassrls: bool, pool: PoolSettings) -> list[Check]:
    if not rows:
        return [Check("row-level security", "fail", "no tables found")]
    off = [r[0] for r in rows if not r[1] or not r[5]]
    if off:
        return [Check("row-level security", "fail", f"RLS or its policy is missing on {', '.join(off)}")]
    owner = any(r[4] for r in rows)
    forced = all(r[2] for r in rows)
    binding = not superuser and not bypassrls and (forced or not owner)
    detail = f"enabled with a tenant policy on {len(rows)} tables"
    out = [Check("row-level security", "ok", detail)]
    if not binding:
        why = "a superuser" if superuser else "BYPASSRLS" if bypassrls else "the tables' owner"
        out.append(
            Check(
                "tenant isolation",
                "warn" if pool.tenant_isolation else "info",
                f"this role is {why}, so RLS does not bind it: tenants are separated by the store's tenant filter "
                "only. For isolation enforced by the database, run the application as a non-owner role with "
                "tenant_isolation=True (see docs/operations.md)",
            )
        )
    elif not pool.tenant_isolation:
        out.append(
            Check(
                "tenant isolation",
                "warn",
                "RLS binds this role but tenant_isolation is off: the store does not set pgagentstate.tenant, so "
                "every query sees no rows. Pass tenant_isolation=True",
            )
        )
    else:
        out.append(Check("tenant isolation", "ok", "RLS binds this role and the store sets the tenant"))
    return out


def _encryption_check(ctx: Ctx, ssl: Any, *, encrypted: int, sampled: int) -> Check:
    if ctx.cipher is not None:
        at_rest = "this store encrypts at rest" + (
            " (required)" if ctx.cipher.required else " (plaintext rows accepted)"
        )
    elif _has_module("cryptography"):
        at_rest = "encryption at rest is available but off for this store (set PGAGENTSTATE_ENCRYPTION_KEYS)"
    else:
        at_rest = "encryption at rest is off (install 'cryptography' and set PGAGENTSTATE_ENCRYPTION_KEYS)"
    if sampled:
        at_rest += f"; {encrypted} of {sampled} sampled event payloads are encrypted"
    in_transit = "TLS on this connection" if ssl else "this connection is not TLS-encrypted"
    mixed = sampled and 0 < encrypted < sampled
    status: CheckStatus = "warn" if mixed or (ctx.cipher is None and encrypted) else "info"
    if ctx.cipher is None and encrypted:
        at_rest += " but this store has no keys to read them"
    elif mixed:
        at_rest += ": run `pgagentstate rotate-keys` to encrypt the rest"
    return Check("encryption", status, f"{at_rest}; {in_transit}")


def autovacuum_check(autovacuum: str, track_counts: str) -> Check:
    """Autovacuum keeps the planner's statistics current. Without it a table's statistics stay those of
    when it was nearly empty, and a connection keeps the plans it made then: measured on a server with
    autovacuum off, a turn's save statement took 0.6 ms instead of 0.1 ms once 2,500 conversations existed
    (the foreign-key check of its new events became a sequential scan of ``conversations``)."""
    if autovacuum == "on" and track_counts == "on":
        return Check("autovacuum", "ok", "on: table statistics are kept current")
    setting = "autovacuum = off" if autovacuum != "on" else "track_counts = off (autovacuum needs it)"
    return Check(
        "autovacuum",
        "warn",
        f"{setting}: statistics go stale and plans made on small tables stay sequential scans as they grow "
        "(a turn's save 0.6 ms instead of 0.1 ms at 2,500 conversations); turn it on, or ANALYZE the schema's "
        "tables regularly",
    )


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def pool_checks(pool: PoolSettings, *, max_conn: int, in_use: int, server_port: int | None) -> list[Check]:
    """Pool sizing against the server's ``max_connections``, and whether a proxy (PgBouncer) sits between
    the DSN's port and the server's port without ``pgbouncer=True``."""
    out: list[Check] = []
    budget = pool.max_size * pool.processes
    status: CheckStatus = "ok" if budget + in_use <= max_conn * 0.8 else "warn"
    out.append(
        Check(
            "pool",
            status,
            f"max_size={pool.max_size} x {pool.processes} process(es) = {budget} connections; server has "
            f"{in_use} of max_connections={max_conn} in use"
            + ("" if status == "ok" else "; lower max_size or put PgBouncer (transaction mode) in front"),
        )
    )
    proxied = pool.dsn_port is not None and server_port is not None and pool.dsn_port != server_port
    if proxied and not pool.pgbouncer:
        out.append(
            Check(
                "pgbouncer",
                "warn",
                f"the DSN's port {pool.dsn_port} is not the server's {server_port}: a proxy such as PgBouncer is "
                "in between. In transaction mode pass pgbouncer=True (--pgbouncer) so no server-side prepared "
                "statements are used",
            )
        )
    else:
        out.append(
            Check(
                "pgbouncer",
                "ok" if pool.pgbouncer or not proxied else "info",
                ("pgbouncer=True: no server-side prepared statements; " if pool.pgbouncer else "direct connection; ")
                + "the store keeps no session state (tenant via SET LOCAL, transaction-level advisory locks), so "
                "PgBouncer transaction pooling is supported",
            )
        )
    return out
