"""``PostgresMemoryService``: ADK long-term memory on the core's memory store.

Search is ranked full-text (the words of the query, Unicode-normalised, unspaced scripts split: what ADK's
``InMemoryMemoryService`` matches, from an index) — and, with ``embed=``, hybrid: the text of every memory
is embedded as it is added, and a search fuses the ranking by meaning with the ranking by words
(reciprocal rank fusion), so "how do I get my money back" finds "refund requested for order 12345".

Layout in the core (namespaces are per app and user, so one user's search never sees another's):

- an event with text becomes the memory ``("adk", app, user, "events", session_id) / event_id``;
- an item given to :meth:`add_memory` becomes ``("adk", app, user, "memories") / id``.

Only text is indexed: the core indexes every string value of a memory, so the author and the role are kept
as object keys (``{"by": {"user": true}}``), which are not, and a search for "user" does not match every
message by its author. Events are immutable in ADK, so ingesting a
session again only adds its new events; a deleted memory leaves a tombstone so that re-ingesting its
session does not bring it back (as ADK's in-memory service does).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from google.adk.memory import BaseMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.genai import types
from typing_extensions import override

from pgagentstate import AsyncStateStore, MemoryIndex
from pgagentstate.embedding import embedder_from_spec
from pgagentstate.models import Memory

from ._ids import conversation_id_for
from ._store import StoreHandle

if TYPE_CHECKING:
    from google.adk.events import Event
    from google.adk.sessions import Session

_ROOT = "adk"
_EVENTS = "events"
_MEMORIES = "memories"
# ADK's in-memory service uses this session id for events added without one.
_UNKNOWN_SESSION_ID = "__unknown_session_id__"
_TOMBSTONE = "deleted"


def _event_text(event: Event) -> str:
    if not event.content or not event.content.parts:
        return ""
    return " ".join(p.text for p in event.content.parts if p.text)


def _iso(ts: float) -> str:
    # ADK's memory services hand the model local ISO times (google.adk.memory._utils.format_timestamp).
    return datetime.fromtimestamp(ts).isoformat()


class PostgresMemoryService(BaseMemoryService):
    """A ``BaseMemoryService`` backed by the pgagentstate core: ranked full-text search per app and user.

    Works with ADK's ``load_memory`` and ``preload_memory`` tools. Constructor arguments are those of
    :class:`~pgagentstate.adk.PostgresSessionService`, plus ``max_results`` (memories per search) and, for
    search by meaning, ``embed`` (LangChain ``Embeddings``, a callable ``list[str] -> list[list[float]]``,
    sync or async, or a name such as ``"hash"`` / ``"module:name"`` /
    ``"openai:text-embedding-3-small"``) with ``dims`` (or a whole ``index=MemoryIndex(...)``).
    ``search`` is the core's search mode: ``"auto"`` (hybrid with an embedder, else words), ``"text"``,
    ``"vector"`` or ``"hybrid"``. ``custom_metadata={"ttl": seconds}`` on :meth:`add_events_to_memory` /
    :meth:`add_memory` makes the memories expire.
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
        agents_dir: str | None = None,
        max_results: int = 10,
        embed: Any = None,
        dims: int | None = None,
        index: MemoryIndex | None = None,
        search: str = "auto",
        **store_options: Any,
    ) -> None:
        del agents_dir
        if max_results <= 0:
            raise ValueError("max_results must be positive")
        self.max_results = max_results
        self.search = search
        self._handle = StoreHandle(
            conn, store=store, tenant=tenant, schema=schema, uri=uri, setup=setup, store_options=store_options,
            embeddings=True,
        )  # fmt: skip
        cfg = self._handle.uri_config
        if cfg is not None:
            embed = embed if embed is not None else cfg.embed
            dims = dims if dims is not None else cfg.dims
        self.index = index if index is not None else _index(embed, dims)
        self._index_ready = self.index is None or not setup
        if self.index is not None:
            index_ = self.index
            if store is not None:
                self._handle.derive(lambda s: s.with_memory_index(index_))
            else:
                self._handle.add_option("memory_index", self.index)

    async def store(self) -> AsyncStateStore:
        """The core store this service uses (opened on first use)."""
        store = await self._handle.get()
        if not self._index_ready:
            await store.setup()  # the index's pgvector index on a store passed in (idempotent)
            self._index_ready = True
        return store

    @override
    async def add_session_to_memory(self, session: Session) -> None:
        await self.add_events_to_memory(
            app_name=session.app_name, user_id=session.user_id, events=session.events, session_id=session.id
        )

    @override
    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        ttl = _ttl(custom_metadata)
        namespace = (_ROOT, app_name, user_id, _EVENTS, session_id or _UNKNOWN_SESSION_ID)
        items: list[tuple[str, dict[str, Any]]] = []
        for event in events:
            text = _event_text(event)
            if not text:
                continue
            value = {"text": text, "by": _label(event.author), "ts": event.timestamp}
            items.append((event.id, value))
        if not items:
            return
        store = await self.store()
        # One statement; events stored already (or deleted: a tombstone is stored) are left alone.
        await store.put_memories(
            [(namespace, key, value) for key, value in items], ttl=ttl, user_id=user_id, if_absent=True
        )

    @override
    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        ttl = _ttl(custom_metadata)
        store = await self.store()
        namespace = (_ROOT, app_name, user_id, _MEMORIES)
        writes: list[tuple[tuple[str, ...], str, dict[str, Any]]] = []
        for entry in memories:
            parts = entry.content.parts or []
            value: dict[str, Any] = {
                "text": " ".join(p.text for p in parts if p.text),
                "role": _label(entry.content.role),
                "by": _label(entry.author),
                "at": _label(entry.timestamp),
            }
            if any(not p.text for p in parts):
                # Not text only (an image, a function call...): keep the whole content.
                value["content"] = entry.content.model_dump(exclude_none=True, mode="json")
            if entry.custom_metadata:
                value["custom_metadata"] = entry.custom_metadata
            writes.append((namespace, entry.id or str(uuid.uuid4()), value))
        await store.put_memories(writes, ttl=ttl, user_id=user_id)

    @override
    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        if not query or not query.strip():
            return SearchMemoryResponse()
        store = await self.store()
        found = await store.search_memory(
            (_ROOT, app_name, user_id), query=query, user_id=user_id, limit=self.max_results, mode=self.search
        )
        return SearchMemoryResponse(memories=[_entry(m) for m in found if _TOMBSTONE not in m.value])

    @override
    async def delete_memory(self, *, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        if not memory_id:
            return
        store = await self.store()
        if await store.delete_memory((_ROOT, app_name, user_id, _MEMORIES), memory_id):
            return
        if "/" not in memory_id:
            return
        session_part, event_part = memory_id.split("/", 1)
        namespace = (_ROOT, app_name, user_id, _EVENTS, unquote(session_part))
        key = unquote(event_part)
        if await store.delete_memory(namespace, key):
            # Leave a tombstone so that ingesting the session again does not bring the event back.
            await store.put_memory(namespace, key, {_TOMBSTONE: True}, user_id=user_id)

    async def close(self) -> None:
        """Close the store if this service opened it."""
        await self._handle.close()


def _entry(m: Memory) -> MemoryEntry:
    value = m.value
    author = _unlabel(value.get("by"))
    if m.namespace[3] == _EVENTS:
        return MemoryEntry(
            id=f"{quote(m.namespace[4], safe='')}/{quote(m.key, safe='')}",
            content=types.Content(role="user" if author == "user" else "model",
                                  parts=[types.Part(text=value.get("text", ""))]),
            author=author,
            timestamp=_iso(float(value["ts"])) if value.get("ts") is not None else None,
        )
    if "content" in value:
        content = types.Content.model_validate(value["content"])
    else:
        content = types.Content(role=_unlabel(value.get("role")), parts=[types.Part(text=value.get("text", ""))])
    return MemoryEntry(
        id=m.key,
        content=content,
        custom_metadata=dict(value.get("custom_metadata") or {}),
        author=author,
        timestamp=_unlabel(value.get("at")),
    )


def _index(embed: Any, dims: int | None) -> MemoryIndex | None:
    """The index for ``embed=``: the text of each memory, embedded."""
    if embed is None:
        if dims is not None:
            raise ValueError("dims= needs embed= (the embedder)")
        return None
    if isinstance(embed, str):
        embed = embedder_from_spec(embed, dims=dims)
    dims = dims if dims is not None else getattr(embed, "dims", None)
    if not isinstance(dims, int):
        raise ValueError("pass dims= (the dimensions of the embeddings embed returns)")
    return MemoryIndex(dims=dims, embed=embed, fields=["text"])


def _label(text: str | None) -> dict[str, bool] | None:
    """A string stored where the full-text index does not look (an object key)."""
    return {text: True} if text else None


def _unlabel(label: Any) -> str | None:
    return next(iter(label)) if isinstance(label, dict) and label else None


def _ttl(custom_metadata: Mapping[str, object] | None) -> float | None:
    ttl = (custom_metadata or {}).get("ttl")
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0:
        raise ValueError(f"custom_metadata['ttl'] must be a positive number of seconds, not {ttl!r}")
    return float(ttl)




def distill_after_agent(store: AsyncStateStore) -> Callable[[Any], Awaitable[None]]:
    """An ADK ``after_agent_callback`` that wakes the distillation workers for the session just served
    (``pgagentstate.distill``): one NOTIFY, no extraction in the request. Facts land in this service's
    layout (``("adk", app, user, "memories")``), where ``search_memory`` and ``preload_memory`` find them.

    ``LlmAgent(..., after_agent_callback=distill_after_agent(store))``.
    """

    async def callback(callback_context: Any) -> None:
        session = callback_context.get_invocation_context().session
        await store.request_distill(conversation_id_for(session.app_name, session.user_id, session.id))

    return callback
