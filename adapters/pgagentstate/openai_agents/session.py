"""``PostgresSession``: the Agents SDK ``Session`` protocol on the pgagentstate core.

A session is a core conversation (``framework="openai_agents"``); its items are the conversation's event
log. The core gives what the SDK's own sessions lack: ``add_items`` is one atomic statement that takes
contiguous sequence numbers under the conversation's row lock (concurrent writers never interleave inside a
batch, order never depends on timestamps), ``pop_item`` removes exactly the last item atomically, and every
item is stored as ``jsonb`` that reads back equal to what was written.

Round trips are what a session costs, so each method is one statement in the common case: the conversation
row is created lazily, on the first append that finds it missing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, cast

from agents import RunContextWrapper, SessionSettings
from agents.items import TResponseInputItem
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit

from pgagentstate import AsyncStateStore, arguments
from pgagentstate.codec import check_id
from pgagentstate.connect import dsn_from_url
from pgagentstate.errors import ConflictError, ConnectionLost, InvalidPayload, NotFound, PgAgentStateError
from pgagentstate.models import Conversation, Event, NewEvent

from ._identity import identity_of
from ._store import resolve_store

try:  # The SDK's hook for compaction that keeps older history (private to the SDK, hence optional).
    from agents.memory.session import _CompactionSnapshot
except ImportError:  # pragma: no cover - older SDKs compact with the whole-history path only
    _CompactionSnapshot = None  # type: ignore[assignment,misc]

FRAMEWORK = "openai_agents"

# A lost connection during an append is retried with the same event ids: the core treats a re-appended
# event id as a no-op, so a retry after a commit that did land cannot duplicate items.
_APPEND_ATTEMPTS = 3


class InvalidItem(InvalidPayload, TypeError):
    """An item that cannot be stored as JSON. Also a ``TypeError``: what the SDK's own sessions raise
    (``json.dumps`` does), so code written for them catches it."""


class SessionUserMismatch(PgAgentStateError, PermissionError):
    """The run context names a different user than the one the session belongs to."""

    def __init__(self, session_id: str, owner: str, user_id: str) -> None:
        self.session_id = session_id
        self.owner = owner
        self.user_id = user_id
        super().__init__(f"session {session_id!r} belongs to user {owner!r}, not to {user_id!r}")


class PostgresSession:
    """Conversation history of one Agents SDK session, stored in Postgres.

    Example::

        store = AsyncStateStore("postgresql://...")      # one pool for the whole application
        await store.setup()
        session = PostgresSession("whatsapp:+5511999990000", store=store, user_id="cust-42")
        result = await Runner.run(agent, "Oi, quero reembolso", session=session)

    Args:
        session_id: Identifier of the conversation (the core conversation id).
        conn: A DSN, a psycopg ``AsyncConnection`` or ``AsyncConnectionPool``; the session then owns a store
            of its own (close it with :meth:`aclose`). Prefer ``store=`` to share one pool.
        store: An :class:`~pgagentstate.AsyncStateStore` to use (not closed by the session).
        tenant: Tenant to store under; overrides the store's tenant. A ``tenant`` (or ``tenant_id``) in the
            run context overrides both, per call, except on a store with ``tenant_isolation``: there a
            different tenant in the context is refused (``InvalidInput``).
        schema: Postgres schema of the pgagentstate tables (only used with ``conn``).
        session_settings: Default ``limit`` for :meth:`get_items` (a ``SessionSettings`` or a dict).
        user_id: Owner recorded on the conversation when the session creates it. A ``user_id`` in the run
            context takes precedence, and is checked against the stored owner
            (:class:`SessionUserMismatch`).
        app: Application name recorded on the conversation.
        channel: Channel recorded on the conversation (``"whatsapp"``, ``"web"``, ...).
        metadata: Metadata recorded on the conversation when the session creates it.
        setup: Run the core's (idempotent) migrations before the first operation, when the session
            opens its own store (from ``conn`` or :meth:`from_url`); a store passed as ``store=`` is set up
            by its owner.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        conn: Any = None,
        *,
        store: AsyncStateStore | None = None,
        tenant: str | None = None,
        schema: str = "pgagentstate",
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        user_id: str = "",
        app: str = "",
        channel: str = "",
        metadata: Mapping[str, Any] | None = None,
        setup: bool = True,
    ) -> None:
        self.session_id = check_id(session_id, "session_id")
        self.session_settings = (
            coerce_session_settings(dict(session_settings) if isinstance(session_settings, Mapping)
                                    else session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self.user_id = user_id
        self.app = app
        self.channel = channel
        self.metadata = dict(metadata or {})
        # Last: with no connection at all, this starts the embedded server.
        self._store, self._owns_store = resolve_store(conn, store, tenant=tenant, schema=schema)
        self._needs_setup = setup and self._owns_store
        self._tenant_stores: dict[str, AsyncStateStore] = {}
        # (tenant, user) pairs already checked against the stored owner: saves a round trip on every later
        # call of this instance.
        self._owner_checked: set[tuple[str, str]] = set()

    @classmethod
    def from_url(
        cls,
        session_id: str,
        *,
        url: str,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        create_tables: bool | None = None,
        **kwargs: Any,
    ) -> PostgresSession:
        """A session with a store of its own on the database at ``url``, as ``SQLAlchemySession.from_url``.

        ``url`` may carry a SQLAlchemy driver (``postgresql+asyncpg://...``: the suffix is ignored).
        ``create_tables`` is ``setup`` under the SQLAlchemy session's name; ``kwargs`` go to the
        constructor (``tenant``, ``schema``, ``user_id``, ...). Close it with :meth:`aclose`.
        """
        if "conn" in kwargs or "store" in kwargs:
            raise TypeError("from_url takes the database as url=, not conn= or store=")
        if create_tables is not None:
            kwargs.setdefault("setup", create_tables)
        return cls(session_id, dsn_from_url(url), session_settings=session_settings, **kwargs)

    @property
    def store(self) -> AsyncStateStore:
        """The store this session writes to (for its default tenant)."""
        return self._store

    # ------------------------------------------------------------------ Session protocol

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        """Return the latest ``limit`` items (``session_settings.limit`` when None; all if both are None),
        oldest first."""
        n = resolve_session_limit(limit, self.session_settings)
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
            raise ValueError(f"limit must be a non-negative integer or None, not {n!r}")
        store, tenant, user = await self._route(wrapper)
        if user:
            await self._check_owner(store, tenant, user, create=False)
        if n == 0:
            return []
        return await store.list_event_payloads(self.session_id, limit=n)

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        """Append ``items`` atomically, in order, after everything already stored."""
        items = arguments.items(items, "items")
        store, tenant, user = await self._route(wrapper)
        if user:
            await self._check_owner(store, tenant, user, create=True)
        if not items:
            return
        events = [_to_event(item) for item in items]
        # Every retry below re-sends the same event ids, which the core stores at most once.
        for attempt in range(1, _APPEND_ATTEMPTS + 1):
            try:
                await store.append_events(self.session_id, events)
                return
            except InvalidPayload as exc:
                raise _invalid_item(exc) from exc
            except NotFound:
                # New session, or deleted by someone else since we last saw it: create it, as SQLiteSession
                # does on its first write.
                await self._ensure(store, user)
            except ConnectionLost:
                if attempt == _APPEND_ATTEMPTS:
                    raise
        raise ConflictError(f"add_items on {self.session_id!r}: the session kept disappearing while appending")

    async def pop_item(self, *, wrapper: RunContextWrapper[Any] | None = None) -> TResponseInputItem | None:
        """Remove and return the most recent item, or None when the session is empty."""
        store, tenant, user = await self._route(wrapper)
        if user:
            await self._check_owner(store, tenant, user, create=False)
        event = await store.pop_event(self.session_id)
        return None if event is None else cast(TResponseInputItem, event.payload)

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Remove every item. The conversation itself (owner, status, metadata, paused runs) stays."""
        store, tenant, user = await self._route(wrapper)
        if user:
            await self._check_owner(store, tenant, user, create=False)
        await store.clear_events(self.session_id)

    # ------------------------------------------------------------------ compaction

    async def replace_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        """Replace the whole history with ``items`` in one transaction (e.g. with a summary of it): a crash
        leaves the old items or the new ones, never an empty session."""
        items = arguments.items(items, "items")
        store, tenant, user = await self._route(wrapper)
        if user:
            await self._check_owner(store, tenant, user, create=True)
        events = [_to_event(item) for item in items]
        try:
            await store.replace_events(self.session_id, events)
        except InvalidPayload as exc:
            raise _invalid_item(exc) from exc
        except NotFound:
            if events:
                await self._ensure(store, user)
                await store.replace_events(self.session_id, events)

    # OpenAIResponsesCompactionSession looks for these two hooks on the session it wraps; without them it
    # replaces history with clear_session() then add_items(), and a process that dies in between loses the
    # whole conversation. A subclass may transform items on the way in or out, so it gets the SDK's
    # fallback, as subclasses of the SDK's own sessions do.

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        if type(self) is not PostgresSession:
            return False
        await self.replace_items(items)
        return True

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[TResponseInputItem], bool] | None = None
    ) -> _CompactionSnapshot | None:
        """The newest ``limit`` items, whether they are the whole history, and a replacement of a suffix of
        them that is refused (False) when the session changed since: the SDK's compaction then keeps the
        older history instead of reading and rewriting all of it."""
        if _CompactionSnapshot is None or type(self) is not PostgresSession:
            return None
        store, _, _ = await self._route(None)
        events = await store.list_events(self.session_id, limit=limit + 1)  # one more tells completeness
        complete = len(events) <= limit
        events = events[-limit:] if limit > 0 else []
        ids = [e.event_id for e in events]

        def prune(event: Event) -> bool:
            assert prune_prefix is not None
            return bool(prune_prefix(cast(TResponseInputItem, event.payload)))

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            tail = ids[start:]
            if not tail:
                return False
            try:
                new = await store.replace_events(
                    self.session_id, [_to_event(item) for item in output], tail=tail,
                    prune=None if prune_prefix is None else prune,
                )  # fmt: skip
            except NotFound:  # deleted meanwhile
                return False
            return new is not None

        return _CompactionSnapshot([cast(TResponseInputItem, e.payload) for e in events], complete, replace_suffix)

    # ------------------------------------------------------------------ beyond the protocol

    async def get_conversation(self, *, wrapper: RunContextWrapper[Any] | None = None) -> Conversation | None:
        """The core conversation behind this session (owner, status, metadata, version), if it exists."""
        store, _, _ = await self._route(wrapper)
        return await store.get_conversation(self.session_id)

    async def delete(self, *, wrapper: RunContextWrapper[Any] | None = None) -> bool:
        """Delete the conversation with everything attached to it (items, state, paused runs)."""
        store, tenant, user = await self._route(wrapper)
        if user:
            await self._check_owner(store, tenant, user, create=False)
        return await store.delete_conversation(self.session_id)

    async def aclose(self) -> None:
        """Close the store if this session created it (a store passed as ``store=`` is left open)."""
        if self._owns_store:
            await self._store.close()

    async def __aenter__(self) -> PostgresSession:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"PostgresSession(session_id={self.session_id!r})"

    # ------------------------------------------------------------------ internals

    async def _route(self, wrapper: RunContextWrapper[Any] | None) -> tuple[AsyncStateStore, str, str]:
        """Pick the tenant's store and the acting user for one call."""
        if self._needs_setup:
            await self._store.setup()
            self._needs_setup = False
        ident = identity_of(wrapper) if wrapper is not None else None
        tenant = ident.tenant if ident and ident.tenant else ""
        user = ident.user_id if ident and ident.user_id else ""
        if not tenant:
            return self._store, "", user
        store = self._tenant_stores.get(tenant)
        if store is None:
            # Refused on a tenant_isolation store: a context built from request data must not pick the tenant.
            store = self._tenant_stores[tenant] = self._store.with_context_tenant(tenant)
        return store, tenant, user

    async def _ensure(self, store: AsyncStateStore, user: str) -> Conversation:
        conv = await store.ensure_conversation(
            self.session_id,
            app=self.app,
            framework=FRAMEWORK,
            user_id=user or self.user_id,
            channel=self.channel,
            metadata=self.metadata or None,
        )
        return conv

    async def _check_owner(self, store: AsyncStateStore, tenant: str, user: str, *, create: bool) -> None:
        """Refuse to serve a session owned by another user than the run context's (checked once)."""
        if (tenant, user) in self._owner_checked:
            return
        conv = await (self._ensure(store, user) if create else store.get_conversation(self.session_id))
        if conv is None:
            return  # nothing stored yet: the first append creates it owned by `user`
        if conv.user_id and conv.user_id != user:
            raise SessionUserMismatch(self.session_id, conv.user_id, user)
        self._owner_checked.add((tenant, user))


def _invalid_item(exc: InvalidPayload) -> InvalidItem:
    """The core's error, as an :class:`InvalidItem` (the same message and path)."""
    error = InvalidItem(str(exc))
    error.path = exc.path
    return error


def _to_event(item: Any) -> NewEvent:
    # The item type doubles as the event kind, so the log can be filtered by kind in SQL and by tools.
    kind = "message"
    author = ""
    if isinstance(item, Mapping):
        t = item.get("type")
        if isinstance(t, str) and t:
            kind = t
        role = item.get("role")
        if isinstance(role, str):
            author = role
    return NewEvent(payload=item, kind=kind, author=author, event_id=uuid.uuid4().hex)
