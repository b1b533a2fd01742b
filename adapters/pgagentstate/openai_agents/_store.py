"""Turning the connection arguments adapters accept into one AsyncStateStore."""

from __future__ import annotations

from typing import Any

from pgagentstate import AsyncStateStore


def resolve_store(
    conn: Any, store: AsyncStateStore | None, *, tenant: str | None, schema: str
) -> tuple[AsyncStateStore, bool]:
    """Return ``(store, owned)``; ``owned`` is True when we built the store and must close it.

    ``conn`` may be a DSN, a psycopg ``AsyncConnection`` or ``AsyncConnectionPool``, or None (the core then
    uses $PGAGENTSTATE_DSN / $DATABASE_URL / an embedded Postgres).
    """
    if store is not None:
        if conn is not None:
            raise ValueError("pass either a connection (DSN, connection or pool) or store=, not both")
        if not isinstance(store, AsyncStateStore):
            raise TypeError(f"store must be an AsyncStateStore, not {type(store).__name__}")
        return (store.with_tenant(tenant) if tenant else store), False
    return AsyncStateStore(conn, tenant=tenant or "default", schema=schema), True
