"""How the LangGraph adapter packs checkpoint bodies and task writes before the store seals them: raw
deflate with a preset dictionary, marked by a ``z1:`` prefix on the type.

It lives in the core, not in the adapter, because the operator tools read what is stored (``show`` renders
a thread from its checkpoints, :mod:`pgagentstate.ops.operations.checkpoints`) and the core never imports an
adapter; the adapter imports these two functions.
"""

from __future__ import annotations

import zlib

#: Checkpoint bodies and task writes are compressed (raw deflate) with this preset dictionary of what
#: LangGraph repeats in them (checkpoint keys, message classes and fields, as JsonPlusSerializer writes
#: them); the type gets the prefix ``z1:``. Never change it: stored rows depend on it (a new dictionary
#: gets a new prefix).
ZDICT = (
    b"\xb2invalid_tool_calls\x90\xaeusage_metadata\xc0\xb3model_validate_json\xaatool_calls\x90"
    b"\xbdlangchain_core.messages.tool\xabToolMessage\xaetool_call_id\xa6status\xa7success\xa8artifact"
    b"\xbdlangchain_core.messages.human\xacHumanMessage\xa7content\xb1additional_kwargs\x80"
    b"\xb1response_metadata\x80\xa4type\xa5human\xa4name\xc0\xa2id"
    b"\xbalangchain_core.messages.ai\xa9AIMessage\x89\xa7content\xb1additional_kwargs\x80"
    b"\xb1response_metadata\x80\xa4type\xa2ai\xa4name\xc0\xa2id"
    b"pending_sends\x90updated_channels\x91messages\xa9__input__\x80\xa9__start__\x81\xa9__start__"
    b"\xadversions_seen\xaechannel_values\xb0channel_versions\xafbranch:to:\xa2ts\xd9 \xa1v\x04"
)
Z1 = "z1:"


def compress(typ: str, data: bytes) -> tuple[str, bytes]:
    """Deflate with the preset dictionary when that saves bytes (it cannot with an encrypting serde)."""
    # A 4 KiB window and small hash tables: what is compressed is a few hundred bytes, and the default
    # state (384 KiB, allocated and freed per call) cost more than the compression itself. Any window up
    # to 32 KiB decompresses with the same dictionary, so rows written either way read alike.
    co = zlib.compressobj(6, zlib.DEFLATED, -12, 2, zlib.Z_DEFAULT_STRATEGY, ZDICT)
    packed = co.compress(data) + co.flush()
    return (Z1 + typ, packed) if len(packed) < len(data) else (typ, data)


def decompress(typ: str, data: bytes) -> tuple[str, bytes]:
    if not typ.startswith(Z1):
        return typ, data
    do = zlib.decompressobj(-15, ZDICT)
    return typ[len(Z1):], do.decompress(data) + do.flush()
