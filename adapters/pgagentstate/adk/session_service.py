"""``PostgresSessionService``: ADK sessions on the pgagentstate core.

A session is a core conversation (``framework="adk"``); its events are the conversation's event log, stored
whole (``Event.model_dump(exclude_none=True, mode="json")``) under the ADK event id, so a re-delivered event
is not stored twice; session, ``user:`` and ``app:`` state are the conversation, user and app state
documents. A session object remembers the log position it was loaded at, and an append from an object that
is behind the log fails with ADK's ``StaleSessionError`` instead of silently interleaving two histories.
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from typing_extensions import override

from pgagentstate import AsyncStateStore, NewEvent, StateRef, arguments
from pgagentstate.errors import AlreadyExists, NotFound, VersionConflict
from pgagentstate.models import Conversation, StateDoc

from ._ids import FRAMEWORK, clean_session_id, conversation_id_for, session_id_of
from ._state import merge_state, split_delta
from ._store import StoreHandle
from ._trusted import events_from_json

# ADK's wording (google.adk.sessions.database_session_service), so callers matching on it keep working.
STALE_SESSION_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)
#: ``kind`` of the core events that hold ADK events.
EVENT_KIND = "adk_event"
_PAGE = 500


def _data(doc: StateDoc | None) -> dict[str, Any]:
    return dict(doc.data) if doc is not None else {}


def _ts(dt: datetime) -> float:
    return dt.timestamp()


class _ValidatedEvents:
    """Validated ADK events by their stored JSON text, least recently used first out.

    The Runner loads the whole session on every turn, and validating each stored event again costs more
    than reading it (with :mod:`._trusted`, about half of ``Event.model_validate_json``'s 15-17 us an event).
    A stored event never changes, so its JSON text identifies it; callers get a shallow copy, so
    reassigning a field of a returned event does not reach the cache (nested objects such as ``content``
    are shared).
    """

    def __init__(self, maxsize: int) -> None:
        self._maxsize = maxsize
        self._items: OrderedDict[str, Event] = OrderedDict()

    def get_many(self, texts: list[str]) -> list[Event]:
        if self._maxsize <= 0:
            return events_from_json(texts)
        items = self._items
        found: list[Event | None] = [items.get(t) for t in texts]
        missing = [i for i, e in enumerate(found) if e is None]
        if missing:
            # Validated in one call (one JSON array), the cache's own copies kept apart from the caller's.
            for i, fresh in zip(missing, events_from_json([texts[i] for i in missing]), strict=True):
                items[texts[i]] = fresh
                found[i] = fresh
            while len(items) > self._maxsize:
                items.popitem(last=False)
        out = []
        for text, event in zip(texts, found, strict=True):
            assert event is not None
            if text in items:  # (a session longer than the cache has pushed its own oldest events out)
                items.move_to_end(text)
            out.append(event.model_copy())
        return out


class PostgresSessionService(BaseSessionService):
    """A ``BaseSessionService`` that keeps sessions in Postgres through the pgagentstate core.

    Args:
        conn: a DSN (``"postgresql://..."``), a ``psycopg_pool.AsyncConnectionPool`` or a
            ``psycopg.AsyncConnection``; ``None`` means ``$PGAGENTSTATE_DSN`` / ``$DATABASE_URL``, else an
            embedded Postgres.
        store: an existing :class:`pgagentstate.AsyncStateStore` to share (its owner sets it up and closes
            it); exclusive with ``conn``.
        tenant: the tenant whose data this service sees (default ``"default"``, or the store's).
        schema: the Postgres schema of the tables (default ``"pgagentstate"``).
        setup: apply the schema migrations on first use (idempotent) when this service opens the store.
        uri: a ``pgagentstate://`` / ``pgagentstate+embedded://`` URI instead of ``conn`` (what ADK's
            ``services.yaml`` passes).
        db_url: a database URL, as ``DatabaseSessionService(db_url)`` takes it: ``postgresql://``,
            ``postgresql+asyncpg://``, ``postgresql+psycopg://`` (the driver suffix is ignored); exclusive
            with ``conn``.
        strict_state: refuse a state value that is not JSON (:class:`~pgagentstate.errors.InvalidPayload`
            naming its key, nothing written) instead of storing it as a string, as ADK's services do (with
            a warning in the ``pgagentstate.adk`` log).
        agents_dir: accepted and ignored: ADK's service registry passes it to every factory.
        event_cache_size: how many validated events to keep in memory (0 turns the cache off); the
            Runner reloads the session on every turn and stored events never change.
        **store_options: passed to ``AsyncStateStore`` (``min_size``, ``max_size``, ``pgbouncer``, ``limits``).
    """

    def __init__(
        self,
        conn: Any = None,
        *,
        store: AsyncStateStore | None = None,
        tenant: str | None = None,
        schema: str | None = None,
        setup: bool = True,
        uri: str | None = None,
        db_url: str | None = None,
        strict_state: bool = False,
        agents_dir: str | None = None,
        event_cache_size: int = 20_000,
        **store_options: Any,
    ) -> None:
        del agents_dir
        self._strict = strict_state
        self._events = _ValidatedEvents(maxsize=event_cache_size)
        self._handle = StoreHandle(
            conn, store=store, tenant=tenant, schema=schema, uri=uri, db_url=db_url, setup=setup,
            store_options=store_options,
        )  # fmt: skip

    async def store(self) -> AsyncStateStore:
        """The core store this service uses (opened on first use)."""
        return await self._handle.get()

    @staticmethod
    def conversation_id(app_name: str, user_id: str, session_id: str) -> str:
        """The core conversation id of a session, for the core store's own methods."""
        return conversation_id_for(app_name, user_id, session_id)

    # ------------------------------------------------------------------ sessions

    @override
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        store = await self._handle.get()
        sid = clean_session_id(session_id, new=True)
        cid = conversation_id_for(app_name, user_id, sid, store.limits)
        delta = split_delta(state, strict=self._strict)
        app_ref, user_ref = StateRef.app(app_name), StateRef.user(app_name, user_id)
        patches = [
            (ref, data)
            for ref, data in ((StateRef.conversation(cid), delta.session), (app_ref, delta.app), (user_ref, delta.user))
            if data
        ]
        # One transaction: a state the store rejects leaves no session behind without it.
        try:
            conv = await store.create_conversation(
                cid, app=app_name, framework=FRAMEWORK, user_id=user_id, state_patches=patches
            )
        except AlreadyExists:
            raise AlreadyExistsError(f"Session with id {sid} already exists.") from None
        app_doc, user_doc = await store.get_states([app_ref, user_ref])
        session = Session(
            id=sid,
            app_name=app_name,
            user_id=user_id,
            state=merge_state(delta.session, _data(app_doc), _data(user_doc)),
            # ADK's time of the last change is that of the last event, or of the creation.
            last_update_time=_ts(conv.created_at),
        )
        session._storage_update_marker = str(conv.last_seq)
        return session

    @override
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        store = await self._handle.get()
        sid = clean_session_id(session_id)
        cid = conversation_id_for(app_name, user_id, sid, store.limits)
        limit = config.num_recent_events if config else None
        after = config.after_timestamp if config else None
        # One round trip, one snapshot: the conversation (whose log position is the session's revision),
        # only the events asked for, and the session, app and user state documents. Only the events'
        # payloads, as JSON text: pydantic parses it faster than json.loads followed by validation.
        loaded = await store.load_conversation(
            cid,
            limit=limit,
            since=arguments.epoch(after, "config.after_timestamp") if after is not None else None,
            kinds=[EVENT_KIND],
            states=[StateRef.conversation(cid), StateRef.app(app_name), StateRef.user(app_name, user_id)],
            payloads_only=True,
        )
        conv = loaded.conversation
        if conv is None:
            return None
        if not _is_session(conv, app_name, user_id):
            return None
        own, app_doc, user_doc = loaded.states
        events = self._events.get_many([payload for _, payload in loaded.payloads])
        last_update = await self._last_update(
            store, conv, events if loaded.payloads and loaded.payloads[-1][0] == conv.last_seq else None
        )
        if after is not None:
            # Stored times have microsecond precision; the payload keeps ADK's exact float.
            events = [e for e in events if e.timestamp >= after]
        session = Session(
            id=sid,
            app_name=app_name,
            user_id=user_id,
            state=merge_state(_data(own), _data(app_doc), _data(user_doc)),
            events=events,
            last_update_time=last_update,
        )
        session._storage_update_marker = str(conv.last_seq)
        return session

    async def _last_update(self, store: AsyncStateStore, conv: Conversation, tail: list[Event] | None) -> float:
        """ADK's ``last_update_time``: the timestamp of the session's last event (``tail``, the events
        read up to the newest, when there are some), or its creation time."""
        if conv.last_seq == 0:
            return _ts(conv.created_at)
        if not tail:  # the newest event was not asked for: one more (indexed) read
            newest = await store.list_events(conv.id, limit=1, kinds=[EVENT_KIND], decode=False)
            if not newest:
                return _ts(conv.created_at)
            tail = self._events.get_many([newest[0].payload])
        return tail[-1].timestamp

    @override
    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        store = await self._handle.get()
        convs: dict[str, Conversation] = {}
        offset = 0
        while True:
            page = await store.list_conversations(
                app=app_name, framework=FRAMEWORK, user_id=user_id, limit=_PAGE, offset=offset
            )
            for conv in page:
                convs.setdefault(conv.id, conv)
            if len(page) < _PAGE:
                break
            offset += _PAGE
        if not convs:
            return ListSessionsResponse()
        users = sorted({c.user_id for c in convs.values()})
        ids = list(convs)
        refs = [StateRef.app(app_name)]
        refs += [StateRef.user(app_name, u) for u in users]
        refs += [StateRef.conversation(cid) for cid in ids]
        docs = await store.get_states(refs)
        app_state = _data(docs[0])
        user_state = {u: _data(d) for u, d in zip(users, docs[1 : 1 + len(users)], strict=True)}
        sessions = []
        for cid, doc in zip(ids, docs[1 + len(users) :], strict=True):
            conv = convs[cid]
            session = Session(
                id=session_id_of(cid),
                app_name=app_name,
                user_id=conv.user_id,
                state=merge_state(_data(doc), app_state, user_state[conv.user_id]),
                last_update_time=_ts(conv.updated_at),
            )
            session._storage_update_marker = str(conv.last_seq)
            sessions.append(session)
        # ADK's order: oldest update first, so the last session is the most recently active one.
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        store = await self._handle.get()
        sid = clean_session_id(session_id)
        # The conversation's events and state go with it; user and app state stay.
        await store.delete_conversation(conversation_id_for(app_name, user_id, sid, store.limits))

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        store = await self._handle.get()
        return _data(await store.get_state(StateRef.user(app_name, user_id)))

    # ------------------------------------------------------------------ events

    @override
    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        # temp: values stay visible to the rest of this invocation, but are trimmed before storage.
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        delta = split_delta(event.actions.state_delta if event.actions else None, strict=self._strict)

        store = await self._handle.get()
        cid = conversation_id_for(session.app_name, session.user_id, session.id, store.limits)
        marker = session._storage_update_marker
        # A session object built by hand (not loaded from this service) carries no revision: append
        # unconditionally, as ADK's own services do for such objects.
        expected = int(marker) if marker is not None and marker.isdigit() else None
        new = NewEvent(
            payload=event.model_dump(exclude_none=True, mode="json"),
            kind=EVENT_KIND,
            author=event.author,
            event_id=event.id,
            created_at=arguments.epoch(event.timestamp, "event.timestamp"),
        )
        # One statement: the position check, the insert and the state deltas (applied only if the event
        # was appended, so a re-delivered event does not apply its delta twice).
        patches: list[tuple[StateRef, dict[str, Any]]] = []
        if delta.session:
            patches.append((StateRef.conversation(cid), delta.session))
        if delta.app:
            patches.append((StateRef.app(session.app_name), delta.app))
        if delta.user:
            patches.append((StateRef.user(session.app_name, session.user_id), delta.user))
        try:
            (stored,) = await store.append_events(cid, [new], expected_seq=expected, state_patches=patches)
        except NotFound:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        except VersionConflict:
            raise StaleSessionError(STALE_SESSION_MESSAGE) from None
        if expected is not None and stored.seq <= expected:
            # Stored before (a retried call): nothing was written, as with ADK's in-memory service.
            if any(e.id == event.id for e in session.events):
                return event
        else:
            session._storage_update_marker = str(stored.seq)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    async def close(self) -> None:
        """Close the store if this service opened it."""
        await self._handle.close()

    async def __aenter__(self) -> PostgresSessionService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _is_session(conv: Conversation, app_name: str, user_id: str) -> bool:
    return conv.framework == FRAMEWORK and conv.app == app_name and conv.user_id == user_id
