"""A checkpointed thread (LangGraph) as an operator sees it: its messages, its state values over time and
its interrupts and errors, read from the stored checkpoints (decrypted by the store when encryption is on).

Why the core decodes checkpoints itself rather than asking the adapter: the operator tools run where the
framework may not be installed (``pip install pgagentstate`` on an ops box), and the core never imports an
adapter, so a renderer registered by the adapter would only exist in processes that happened to import it.
What is stored is LangGraph's default serde output (msgpack whose extension types name Python classes) in
the layout of ``pgagentstate.langgraph._codec``; the core reads it as plain data
(:mod:`pgagentstate.msgpack_plain`) and never rebuilds an object. A value written by another serde (an
``EncryptedSerializer``, pickle) is shown as a placeholder naming its type.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...errors import PgAgentStateError
from ...msgpack_plain import unpack
from ..base import Ctx, Op
from ..snapshot_packing import decompress
from ..snapshot_reads import read
from ..snapshots import Snapshot, SnapshotBlob
from .rendering import call_names, message_text

#: Blob type of a list stored one element per chunk (``pgagentstate.langgraph._codec.LIST_TYPE``).
LIST_TYPE = "pgagentstate/list"
#: LangGraph's conventional message channel (``MessagesState``, ``add_messages``).
MESSAGES = "messages"
#: How many checkpoints of a thread are read (newest first): a message's time is that of the first one
#: holding it; ~3-5 checkpoints per turn make this the last 100-150 turns.
MAX_CHECKPOINTS = 500


@dataclass(frozen=True, slots=True)
class ThreadMessage:
    """One message of the thread's newest checkpoint, timed by the first checkpoint that held it."""

    at: datetime
    role: str
    text: str
    data: Any


@dataclass(frozen=True, slots=True)
class ThreadValues:
    """The thread's channel values (other than messages and LangGraph's internals) at one checkpoint."""

    checkpoint_id: str
    at: datetime
    step: int | None
    values: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ThreadSignal:
    """An interrupt (the run waits for input), a resume value, or a task's error, from pending writes."""

    at: datetime
    kind: str  # interrupt | resume | error
    value: Any
    pending: bool  # written against the newest checkpoint: still waiting / unresolved


@dataclass(frozen=True, slots=True)
class ThreadView:
    checkpoints: int
    messages: list[ThreadMessage]
    values: list[ThreadValues]
    signals: list[ThreadSignal]


def decode_value(typ: str, data: bytes) -> Any:
    """One serde-typed value as plain data (``(type, bytes)`` as ``dumps_typed`` made it)."""
    typ, data = decompress(typ, data)
    if typ == "msgpack":
        try:
            return unpack(data)
        except PgAgentStateError:
            return f"<msgpack value that could not be read ({len(data)} bytes)>"
    if typ == "json":
        try:
            return json.loads(data)
        except ValueError:
            return f"<json value that could not be read ({len(data)} bytes)>"
    if typ == "null":
        return None
    if typ in ("bytes", "bytearray"):
        return f"<{len(data)} bytes>"
    return f"<{typ} value, {len(data)} bytes: written by the application's own serde>"


class _Blobs:
    """Decodes blobs, each distinct chunk once (the checkpoints of a thread share most of theirs)."""

    def __init__(self) -> None:
        self._chunks: dict[str, Any] = {}

    def piece(self, chunk: bytes | str, key: str) -> Any:
        if key not in self._chunks:
            assert isinstance(chunk, bytes)
            typ, _, data = chunk.partition(b"\0")
            self._chunks[key] = decode_value(typ.decode("utf-8", "replace"), data)
        return self._chunks[key]

    def value(self, blob: SnapshotBlob) -> Any:
        if blob.type == LIST_TYPE:
            keys = blob.hashes if len(blob.hashes) == len(blob.chunks) else [str(id(c)) for c in blob.chunks]
            return [self.piece(c, k) for c, k in zip(blob.chunks, keys, strict=True)]
        return decode_value(blob.type, b"".join(c for c in blob.chunks if isinstance(c, bytes)))


def internal(channel: str) -> bool:
    """LangGraph's own channels (``__start__``, ``branch:to:node``, ``__pregel_tasks``): bookkeeping."""
    return channel.startswith(("__", "branch:", "start:", "join:")) or ":" in channel


def message_role(message: Any) -> str:
    if isinstance(message, Mapping):
        role = message.get("type") or message.get("role")
        if isinstance(role, str):
            return {"human": "human", "ai": "ai", "tool": "tool", "system": "system"}.get(role, role)
    return "message"


def _ts(body: Mapping[str, Any], fallback: datetime) -> datetime:
    ts = body.get("ts")
    if isinstance(ts, str):
        try:
            found = datetime.fromisoformat(ts)
            return found if found.tzinfo else fallback
        except ValueError:
            pass
    return fallback


def _body(snap: Snapshot) -> dict[str, Any]:
    body = decode_value(snap.type, snap.data)
    return body if isinstance(body, dict) else {}


def render(snapshots: Sequence[Snapshot], epoch: datetime) -> ThreadView:
    """The view of a thread from its checkpoints (newest first, as ``read`` returns them); a message's
    time is that of the first checkpoint holding it, ``epoch`` before any checkpoint says."""
    blobs = _Blobs()
    oldest_first = list(reversed(snapshots))
    first_seen: dict[str, datetime] = {}
    values: list[ThreadValues] = []
    signals: list[ThreadSignal] = []
    head_messages: list[Any] = []
    head_keys: list[str] = []
    previous: dict[str, Any] | None = None
    at = epoch
    for i, snap in enumerate(oldest_first):
        body = _body(snap)
        at = max(_ts(body, at), at)
        inline = body.get("channel_values") if isinstance(body.get("channel_values"), dict) else {}
        channels: dict[str, Any] = dict(inline or {})
        for channel, blob in snap.blobs.items():
            if channel == MESSAGES and blob.type == LIST_TYPE:
                keys = list(blob.hashes) if len(blob.hashes) == len(blob.chunks) else []
                for key in keys:
                    first_seen.setdefault(key, at)
                if i == len(oldest_first) - 1:
                    head_messages, head_keys = blobs.value(blob), keys
                continue
            channels[channel] = blobs.value(blob)
        shown = {k: v for k, v in sorted(channels.items()) if not internal(k) and k != MESSAGES}
        if shown != previous and (shown or previous is not None):  # the first value, then each change
            step = (snap.metadata or {}).get("step")
            values.append(ThreadValues(snap.snapshot_id, at, step if isinstance(step, int) else None, shown))
            previous = shown
        head = i == len(oldest_first) - 1
        for w in snap.writes:
            kind = {"__interrupt__": "interrupt", "__resume__": "resume", "__error__": "error"}.get(w.channel)
            if kind is not None:
                signals.append(ThreadSignal(at, kind, decode_value(w.type, w.data), pending=head))
    names = call_names(head_messages)
    messages = [
        ThreadMessage(
            first_seen.get(head_keys[j], at) if j < len(head_keys) else at, message_role(m), message_text(m, names), m
        )
        for j, m in enumerate(head_messages)
    ]
    return ThreadView(len(snapshots), messages, values, signals)


def thread_view(ctx: Ctx, conversation_id: str, epoch: datetime) -> Op[ThreadView | None]:
    """The root namespace of a checkpointed conversation (None without checkpoints); subgraphs' own
    namespaces are summarised by the timeline, not rendered."""
    snaps = yield from read(
        ctx, conversation_id=conversation_id, namespace="", snapshot_id=None, before=None, filter=None,
        limit=MAX_CHECKPOINTS,
    )
    if not snaps:
        return None
    return render(snaps, epoch)
