"""A small msgpack reader that turns what LangGraph's default serde wrote into plain JSON-able data.

The operator tools (``show``, ``state``, the viewer) render LangGraph threads from their checkpoints, and
the core must not import langgraph (nor add a msgpack dependency for a read-only view). LangGraph's
``JsonPlusSerializer`` writes msgpack whose extension types carry ``(module, class, arguments[, method])``
to rebuild Python objects; here nothing is rebuilt: a message becomes the dict of its fields
(``{"type": "ai", "content": ..., "tool_calls": [...]}``), a UUID its hex, a datetime its ISO text. No
code is imported or run, whatever the bytes say.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from typing import Any

from .errors import InvalidPayload

#: JsonPlusSerializer's extension codes (langgraph.checkpoint.serde.jsonplus, 4.x).
_EXT_SINGLE_ARG, _EXT_POS_ARGS, _EXT_KW_ARGS, _EXT_METHOD_ARG, _EXT_PYDANTIC_V1, _EXT_PYDANTIC_V2 = range(6)
_EXT_NUMPY, _EXT_DELTA = 6, 7
_MAX_DEPTH = 256  # LangGraph state is rarely 10 deep; a deeper value is damaged or hostile


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise InvalidPayload("truncated msgpack value")
        piece = self.data[self.pos : end]
        self.pos = end
        return piece

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def value(self, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise InvalidPayload("msgpack value nested too deeply")
        b = self.take(1)[0]
        if b <= 0x7F:
            return b
        if b >= 0xE0:
            return b - 0x100
        if 0x80 <= b <= 0x8F:
            return self.map(b & 0x0F, depth)
        if 0x90 <= b <= 0x9F:
            return [self.value(depth + 1) for _ in range(b & 0x0F)]
        if 0xA0 <= b <= 0xBF:
            return self.take(b & 0x1F).decode("utf-8", "replace")
        simple = {0xC0: None, 0xC2: False, 0xC3: True}
        if b in simple:
            return simple[b]
        if b in (0xC4, 0xC5, 0xC6):
            n = self.unpack({0xC4: ">B", 0xC5: ">H", 0xC6: ">I"}[b])
            return f"<{len(self.take(n))} bytes>"
        if b in (0xC7, 0xC8, 0xC9):
            n = self.unpack({0xC7: ">B", 0xC8: ">H", 0xC9: ">I"}[b])
            code = self.unpack(">b")
            return _ext(code, self.take(n), depth)
        if 0xD4 <= b <= 0xD8:
            code = self.unpack(">b")
            return _ext(code, self.take(1 << (b - 0xD4)), depth)
        if b == 0xCA:
            return self.unpack(">f")
        if b == 0xCB:
            return self.unpack(">d")
        ints = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
        if b in ints:
            return self.unpack(ints[b])
        if b in (0xD9, 0xDA, 0xDB):
            n = self.unpack({0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}[b])
            return self.take(n).decode("utf-8", "replace")
        if b in (0xDC, 0xDD):
            n = self.unpack(">H" if b == 0xDC else ">I")
            return [self.value(depth + 1) for _ in range(n)]
        if b in (0xDE, 0xDF):
            return self.map(self.unpack(">H" if b == 0xDE else ">I"), depth)
        raise InvalidPayload(f"not msgpack (byte 0x{b:02x})")

    def map(self, n: int, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for _ in range(n):
            key = self.value(depth + 1)
            out[key if isinstance(key, str) else str(key)] = self.value(depth + 1)
        return out


def _ext(code: int, payload: bytes, depth: int) -> Any:
    if code == -1:  # msgpack's timestamp extension
        if len(payload) == 4:
            seconds, nanos = struct.unpack(">I", payload)[0], 0
        elif len(payload) == 8:
            both = struct.unpack(">Q", payload)[0]
            seconds, nanos = both & 0x3_FFFF_FFFF, both >> 34
        else:
            nanos, seconds = struct.unpack(">Iq", payload)
        return datetime.fromtimestamp(seconds + nanos / 1e9, UTC).isoformat()
    if code == _EXT_NUMPY:
        return "<numpy array>"
    inner = _Reader(payload).value(depth + 1)
    if code == _EXT_DELTA:
        return inner
    if not isinstance(inner, list) or len(inner) < 3:
        return inner
    module, name, arg = inner[0], inner[1], inner[2]
    if code in (_EXT_KW_ARGS, _EXT_PYDANTIC_V1, _EXT_PYDANTIC_V2) and isinstance(arg, dict):
        return arg
    if code == _EXT_POS_ARGS and module == "datetime" and isinstance(arg, list) and name in ("date", "time"):
        return "-".join(f"{p:02d}" for p in arg) if name == "date" else arg
    if code in (_EXT_SINGLE_ARG, _EXT_METHOD_ARG, _EXT_POS_ARGS):
        return arg
    return f"<{module}.{name}>"


def unpack(data: bytes) -> Any:
    """One msgpack value as plain data (dicts with string keys, lists, str, numbers, bools, None);
    :class:`~pgagentstate.errors.InvalidPayload` if the bytes are not msgpack."""
    reader = _Reader(bytes(data))
    value = reader.value()
    if reader.pos != len(reader.data):
        raise InvalidPayload("trailing bytes after a msgpack value")
    return value
