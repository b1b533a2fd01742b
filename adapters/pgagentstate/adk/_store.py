"""The store behind a service: given, or opened lazily from a DSN / pool / connection / URI.

ADK builds services synchronously (``Runner(...)``, the CLI's URI factories), often before an event loop
runs, while an async pool belongs to the loop that opens it; so a service that owns its store opens it on
first use, inside the loop that uses it, and applies the schema migrations once (idempotent, advisory
locked).
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pgagentstate import AsyncStateStore
from pgagentstate.connect import dsn_from_url, resolve_dsn
from pgagentstate.embedded import embedded_dsn

#: URI schemes registered with ADK's service registry.
SCHEME = "pgagentstate"
EMBEDDED_SCHEME = "pgagentstate+embedded"
DEFAULT_SCHEMA = "pgagentstate"
_OPTIONS = ("tenant", "schema", "embed", "dims")


@dataclass(frozen=True)
class UriConfig:
    """What a ``pgagentstate://`` or ``pgagentstate+embedded://`` URI says."""

    dsn: str | None
    embedded_dir: Path | None
    tenant: str | None
    schema: str | None
    #: The memory service's embedder (see :func:`pgagentstate.embedding.embedder_from_spec`) and dimensions.
    embed: str | None = None
    dims: int | None = None


def parse_uri(uri: str) -> UriConfig:
    """Read a service URI.

    ``pgagentstate://user:pw@host:5432/db?tenant=acme&schema=agents&sslmode=require`` is the libpq URL
    ``postgresql://user:pw@host:5432/db?sslmode=require`` plus the store options ``tenant`` and ``schema``
    (any other scheme, e.g. one chosen in a ``services.yaml``, reads the same way).
    ``pgagentstate://`` alone means ``$PGAGENTSTATE_DSN`` / ``$DATABASE_URL``, else the embedded server.
    A memory service URI may add ``embed=`` (``hash``, ``module:name``, ``file.py:name`` or a LangChain
    provider string such as ``openai:text-embedding-3-small``) and ``dims=``: semantic (hybrid) search.
    ``pgagentstate+embedded://`` runs the embedded Postgres in ``./.pgagentstate/pg``;
    ``pgagentstate+embedded:///abs/dir`` or ``pgagentstate+embedded://rel/dir`` elsewhere.
    """
    parts = urlsplit(uri)
    if not parts.scheme:
        raise ValueError(f"not a URI (expected {SCHEME}://... or {EMBEDDED_SCHEME}://...): {uri!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    options = {k: v for k, v in query if k in _OPTIONS}
    rest = [(k, v) for k, v in query if k not in _OPTIONS]
    tenant = options.get("tenant") or None
    schema = options.get("schema") or None
    embed = options.get("embed") or None
    dims_text = options.get("dims") or None
    if dims_text is not None and not dims_text.isdigit():
        raise ValueError(f"dims= must be a positive integer, not {dims_text!r}")
    dims = int(dims_text) if dims_text else None
    if parts.scheme.lower().endswith("+embedded"):
        if rest:
            raise ValueError(
                f"{EMBEDDED_SCHEME}:// takes only {', '.join(o + '=' for o in _OPTIONS)}, not {[k for k, _ in rest]}"
            )
        where = parts.netloc + parts.path
        return UriConfig(None, Path(where) if where else Path(".pgagentstate/pg"), tenant, schema, embed, dims)
    if not parts.netloc and not parts.path.strip("/") and not rest:
        return UriConfig(None, None, tenant, schema, embed, dims)
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(rest), parts.fragment))
    return UriConfig(dsn, None, tenant, schema, embed, dims)


# What AsyncStateStore accepts besides what the handle passes itself.
_STORE_OPTIONS = frozenset(inspect.signature(AsyncStateStore).parameters) - {"conn", "tenant", "schema"}


def _check_options(options: dict[str, Any]) -> None:
    """Refuse unknown options when the service is built, before anything starts (an embedded server)."""
    unknown = sorted(set(options) - _STORE_OPTIONS)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {unknown}; store options are {sorted(_STORE_OPTIONS)}")


class StoreHandle:
    """One service's access to an :class:`AsyncStateStore`, opened on first use when the service owns it."""

    def __init__(
        self,
        conn: Any = None,
        *,
        store: AsyncStateStore | None,
        tenant: str | None,
        schema: str | None,
        uri: str | None,
        setup: bool,
        db_url: str | None = None,
        store_options: dict[str, Any],
        embeddings: bool = False,
    ) -> None:
        if store is not None and (conn is not None or uri is not None):
            raise ValueError("pass either store= or a connection (DSN, pool, connection, uri=), not both")
        if db_url is not None:
            if conn is not None:
                raise ValueError("pass either a connection (DSN, pool, connection) or db_url=, not both")
            conn = db_url
        if isinstance(conn, str) and conn.lower().startswith(SCHEME) and uri is None:
            conn, uri = None, conn  # a pgagentstate:// URI given where a database URL goes
        if isinstance(conn, str) and "://" in conn:
            conn = dsn_from_url(conn, path="db_url" if db_url is not None else "conn")
        if conn is not None and uri is not None:
            raise ValueError("pass either a connection (DSN, pool, connection) or uri=, not both")
        embedded: Path | None = None
        self.uri_config: UriConfig | None = None
        if uri is not None:
            cfg = self.uri_config = parse_uri(uri)
            if not embeddings and (cfg.embed or cfg.dims):
                raise ValueError("embed= and dims= are options of a memory service URI, not of this service")
            conn, embedded = cfg.dsn, cfg.embedded_dir
            tenant = tenant if tenant is not None else cfg.tenant
            schema = schema if schema is not None else cfg.schema
        if store is not None:
            if schema is not None and schema != store.schema:
                raise ValueError(f"schema={schema!r} differs from the given store's schema {store.schema!r}")
            if tenant is not None and tenant != store.tenant:
                store = store.with_tenant(tenant)
        self._store = store
        self._owned = store is None
        self._conn = conn
        self._embedded = embedded
        self._tenant = tenant or "default"
        self._schema = schema or DEFAULT_SCHEMA
        self._setup = setup
        _check_options(store_options)
        self._options = store_options
        # One opening at a time per event loop (a lock belongs to one loop; the service may serve several).
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()

    def add_option(self, name: str, value: Any) -> None:
        """A store option the service itself sets (the memory service's ``memory_index``)."""
        self._options[name] = value

    def derive(self, how: Callable[[AsyncStateStore], AsyncStateStore]) -> None:
        """Use ``how(store)`` instead of the store passed in (a clone with the service's memory index)."""
        assert self._store is not None and not self._owned
        self._store = how(self._store)

    async def get(self) -> AsyncStateStore:
        """The store, opened (and its schema migrated) on the first call."""
        if self._store is not None:
            return self._store
        lock = self._locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            if self._store is None:
                conn = self._conn
                # Starting the embedded server takes seconds; keep the event loop free meanwhile.
                if self._embedded is not None:
                    conn = await asyncio.to_thread(embedded_dsn, self._embedded)
                elif conn is None:
                    conn = await asyncio.to_thread(resolve_dsn, None)
                store = AsyncStateStore(conn, tenant=self._tenant, schema=self._schema, **self._options)
                if self._setup:
                    await store.setup()
                if self._store is None:
                    self._store = store
                else:  # another loop opened it meanwhile: its store serves every loop
                    await store.close()
        return self._store

    async def close(self) -> None:
        """Close the store if this handle opened it (a store passed in stays open for its owner)."""
        if self._owned and self._store is not None:
            store, self._store = self._store, None
            await store.close()
