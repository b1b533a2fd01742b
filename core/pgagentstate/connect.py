"""Where a store's connections come from: a DSN (a pool the store owns), a pool, or one connection.

With no DSN at all, ``$PGAGENTSTATE_DSN`` or ``$DATABASE_URL`` is used, and failing those an embedded
Postgres (see :mod:`pgagentstate.embedded`).
"""

from __future__ import annotations

import os
import select
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict

from .errors import InvalidInput

#: Seconds the first connection of a store may take (unless the DSN sets ``connect_timeout``): a server
#: that refuses fails at once; this bounds one that does not answer at all.
FIRST_CONNECT_TIMEOUT = 10


def resolve_dsn(dsn: str | None = None) -> str:
    """The DSN to use: the argument, the environment, or the embedded server's."""
    if dsn:
        return dsn
    for var in ("PGAGENTSTATE_DSN", "DATABASE_URL"):
        value = os.environ.get(var)
        if value:
            return value
    from .embedded import embedded_dsn

    return embedded_dsn()


def first_connect_kwargs(dsn: str) -> dict[str, Any]:
    """Keyword arguments for the probe a store makes before it starts its pool (see ``_AsyncSource``)."""
    return {} if "connect_timeout" in conninfo_to_dict(dsn) else {"connect_timeout": FIRST_CONNECT_TIMEOUT}


def where(dsn: str) -> str:
    """``host:port/dbname`` of a DSN (URL or ``key=value`` form), without user or password."""
    info = conninfo_to_dict(dsn)
    host = str(info.get("host") or os.environ.get("PGHOST") or "localhost")
    port = str(info.get("port") or os.environ.get("PGPORT") or "5432")
    return f"{host}:{port}/{info.get('dbname') or info.get('user') or ''}"


def unreachable(dsn: str, exc: BaseException) -> str:
    """The message for a server that cannot be reached: where, and the driver's reason on one line."""
    return f"cannot connect to Postgres at {where(dsn)}: {' '.join(str(exc).split())}"


def dsn_url(dsn: str, scheme: str = "postgresql") -> str:
    """A DSN in URL form, whichever form it was given in (``postgresql://...`` or libpq's ``key=value``),
    with another ``scheme`` if asked: an ADK service URI (``pgagentstate://``) or a SQLAlchemy URL."""
    info = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    user = quote(info.pop("user", ""), safe="")
    password = info.pop("password", None)
    auth = f"{user}:{quote(password, safe='')}@" if password is not None else (f"{user}@" if user else "")
    host = info.pop("host", "")
    if host.startswith("/") or "," in host:  # a socket directory or several hosts: a query parameter
        info["host"] = host
        host = ""
    port = info.pop("port", "")
    netloc = f"{auth}{host}{':' + port if port and host else ''}"
    if port and not host:
        info["port"] = port
    path = "/" + quote(info.pop("dbname", ""), safe="")
    query = urlencode(sorted(info.items()))
    return f"{scheme}://{netloc}{path}{'?' + query if query else ''}"


def behind_pgbouncer() -> bool:
    """The default for ``pgbouncer=``: ``$PGAGENTSTATE_PGBOUNCER`` set to 1/true/yes."""
    return os.environ.get("PGAGENTSTATE_PGBOUNCER", "").strip().lower() in ("1", "true", "yes", "on")


#: libpq settings the store's own pools use unless the DSN (or ``$PGCONNECT_TIMEOUT``) sets them, so that
#: a server that vanished from the network (a partition, a lost machine, a failed-over primary whose
#: address went silent) costs a call a bounded wait and a ``ConnectionLost`` instead of a hang. libpq's
#: defaults leave that to the kernel: ~2 min for a connection attempt (SYN retries), ~15 min for a request
#: that is not acknowledged (``tcp_retries2``) and 2 h + 9 × 75 s for an acknowledged one whose answer
#: never comes (keepalive defaults). With these: a connection attempt gives up after 5 s (per host of a
#: multi-host DSN); unacknowledged data fails the connection after 10 s (``tcp_user_timeout``); a
#: silent peer is probed after 5 s idle and dropped ~11 s after it last answered. A long query is not
#: affected: the server's kernel answers the probes. Unix sockets ignore all but ``connect_timeout``.
TCP_DEADLINES: dict[str, Any] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}

#: Seconds a call waits for a pooled connection before ``ConnectionLost`` (psycopg_pool's default is 30):
#: during a partition the pool cannot connect, and a caller should hear so in about the time a dead
#: connection takes to be noticed (``TCP_DEADLINES``), not three times that.
POOL_WAIT = 10.0


#: Seconds a transaction may wait for its answer (by default; the store's ``deadline=``) before its
#: connection is cut and the call fails with ``DeadlineExceeded``: what bounds a hung middlebox, which TCP
#: cannot see. A turn's transactions take 1-3 ms on an idle server and under 1 s at a load average of 19;
#: 15 s leaves room for lock waits. Migrations and index builds (``Tx.patient``) have none.
DEADLINE = 15.0

#: Seconds a call keeps trying to connect while every attempt is refused or reset (the server is down, its
#: port closed) before ``ServerRefused``: enough for a fast restart's closed port, far below ``POOL_WAIT``.
REFUSED_RETRY = 1.0

#: Seconds a call keeps trying to connect while the server answers but cannot take the session yet: it is
#: starting up or shutting down, or (a multi-host DSN with ``target_session_attrs=read-write``) the only
#: server up is a standby not yet promoted. A Patroni failover promoted in 6.4 s here (``ttl`` 6 s).
FAILOVER_WAIT = 10.0

_REFUSED = ("connection refused", "no such file or directory", "closed the connection unexpectedly", "reset by peer")
_NOT_YET = (
    "starting up",
    "shutting down",
    "in recovery",
    "hot standby",
    "read-only",
    "too many clients",
    "not yet accepting",
)


def connect_failure(exc: BaseException) -> str:
    """What a failed connection attempt says: ``"not_yet"`` (a server answered but cannot take the session
    yet), ``"refused"`` (turned away: nothing listens, or the peer reset) or ``"other"`` (no answer in
    ``connect_timeout``, authentication, a wrong database...)."""
    text = str(exc).lower()
    if any(m in text for m in _NOT_YET):
        return "not_yet"
    if any(m in text for m in _REFUSED):
        return "refused"
    return "other"


def refused(dsn: str, exc: BaseException) -> str:
    return f"Postgres at {where(dsn)} refused the connection: {' '.join(str(exc).split())}"


def pool_kwargs(*, pgbouncer: bool, dsn: str = "") -> dict[str, Any]:
    """Connection settings for pools the store creates.

    Autocommit lets a one-statement operation cost one round trip (no BEGIN/COMMIT). Behind PgBouncer in
    transaction mode, server-side prepared statements may land on another server connection, so
    automatic preparation is switched off there. ``TCP_DEADLINES`` fill in what ``dsn`` does not set.
    """
    given = conninfo_to_dict(dsn) if dsn else {}
    if os.environ.get("PGCONNECT_TIMEOUT"):
        given["connect_timeout"] = os.environ["PGCONNECT_TIMEOUT"]
    deadlines = {k: v for k, v in TCP_DEADLINES.items() if k not in given}
    return {"autocommit": True, "prepare_threshold": None if pgbouncer else 5, **deadlines}


def idle_connection_is_dead(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """True when an idle pooled connection has been closed by the server.

    An idle connection has nothing to read; when the server restarts or ``pg_terminate_backend`` ends
    the backend, it sends a FATAL message and closes the socket, which makes the socket readable. A
    zero-timeout poll finds that without a round trip (a ``SELECT 1`` check would add one per checkout).
    """
    if conn.closed:
        return True
    try:
        fd = conn.pgconn.socket
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError, psycopg.OperationalError):
        return True
    # Anything waiting on an idle connection is the server's goodbye (an ErrorResponse, then EOF) or, very
    # rarely, an asynchronous notice; discarding the connection costs one reconnect either way.
    return bool(readable)


def dsn_from_url(url: str, *, path: str = "url") -> str:
    """A libpq DSN from the database URL a user of the frameworks' own services types.

    ``postgresql+asyncpg://...``, ``postgresql+psycopg://...`` (SQLAlchemy's driver suffixes) and
    ``postgres://...`` become ``postgresql://...``; a URL of another database is refused
    (:class:`~pgagentstate.errors.InvalidInput` naming ``path``).
    """
    if not isinstance(url, str) or "://" not in url:
        raise InvalidInput(f"expected a postgresql:// URL, got {url!r}", path=path)
    scheme, rest = url.split("://", 1)
    if scheme.lower().split("+", 1)[0] not in ("postgresql", "postgres"):
        raise InvalidInput(f"pgagentstate stores in Postgres; {scheme}:// is not a Postgres URL", path=path)
    return f"postgresql://{rest}"
