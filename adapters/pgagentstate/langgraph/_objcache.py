"""Opt-in reuse of list elements (messages) between reads and writes of a saver.

Without it, every put that changes a message list serialises every message of the list again, and every
get_tuple deserialises every message again, although all but the newest are unchanged. With it, the saver
remembers, for up to ``size`` elements, the object and its stored chunk (bytes and hash) both ways:

- a put finds an element by identity and reuses its chunk, unless its fields were reassigned since;
- a read finds a chunk by hash and returns the object already built for it.

The price is aliasing: the same message object may reach several runs of a thread. That is only safe when
nodes never mutate a message in place (LangGraph's rule: return new or updated messages instead). A
reassigned field (``message.content = ...``) is noticed; a change inside a nested dict or list is not.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, NamedTuple


class Entry(NamedTuple):
    obj: Any
    fingerprint: tuple[Any, ...] | None
    chunk: bytes
    hash: str


#: Immutable types whose objects can be reused by identity alone.
_IMMUTABLE = (str, bytes, int, float, bool, type(None))


def fingerprint(obj: Any) -> tuple[Any, ...] | None:
    """Identity of each field value (and size of dicts and lists): changes when a field is reassigned.
    None: an immutable object. Raises TypeError for objects without fields (not reusable)."""
    if isinstance(obj, _IMMUTABLE):
        return None
    fields = vars(obj)  # TypeError for dicts, lists, slotted objects...
    return tuple((id(v), len(v)) if isinstance(v, dict | list) else id(v) for v in fields.values())


class ObjectCache:
    """A bounded LRU of :class:`Entry`, by object identity and by chunk hash. Thread-safe; the lock is
    held for dict operations only."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._by_id: OrderedDict[int, Entry] = OrderedDict()
        self._by_hash: dict[str, Entry] = {}
        self._lock = threading.Lock()

    def chunk_of(self, obj: Any) -> Entry | None:
        """The stored chunk of ``obj`` if it is cached and unchanged."""
        with self._lock:
            entry = self._by_id.get(id(obj))
        if entry is None or entry.obj is not obj:
            return None
        try:
            if fingerprint(obj) != entry.fingerprint:
                return None
        except TypeError:
            return None
        return entry

    def object_of(self, hash: str) -> Entry | None:
        with self._lock:
            return self._by_hash.get(hash)

    def add(self, obj: Any, chunk: bytes, hash: str) -> None:
        try:
            fp = fingerprint(obj)
        except TypeError:
            return
        entry = Entry(obj, fp, chunk, hash)
        with self._lock:
            old = self._by_id.pop(id(obj), None)
            if old is not None and self._by_hash.get(old.hash) is old:
                del self._by_hash[old.hash]
            self._by_id[id(obj)] = entry
            self._by_hash[hash] = entry
            while len(self._by_id) > self.size:
                _, gone = self._by_id.popitem(last=False)
                if self._by_hash.get(gone.hash) is gone:
                    del self._by_hash[gone.hash]
