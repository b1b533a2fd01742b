"""A message list is packed in one serializer call and cut into one chunk per element: the chunks (and so
the content hashes every stored list is addressed by) must be exactly those of packing each element alone."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from pgagentstate.langgraph import _codec, _msgpack_lists
from pgagentstate.ops import snapshots
from pgagentstate.ops.snapshots import SnapshotBlob, chunk_hash, chunk_hashes


class Tag(str):
    """Not a type the cut skips at once, but packed as a plain string: the cut must notice while cutting."""


def one_by_one(serde: Any, values: list[Any]) -> tuple[bytes, ...]:
    return tuple(_msgpack_lists.piece_of(serde, v) for v in values)


def messages(n: int, size: int = 40) -> list[Any]:
    out: list[Any] = [SystemMessage("You are a refund agent.", id="s")]
    for i in range(n):
        out.append(HumanMessage(f"turn {i}: " + "x" * size, id=f"h{i}"))
        out.append(AIMessage(f"answer {i}", id=f"a{i}", tool_calls=[
            {"name": "refund", "args": {"order": i, "reason": "broken"}, "id": f"c{i}", "type": "tool_call"}]))
        out.append(ToolMessage(f"refunded {i}", tool_call_id=f"c{i}", id=f"t{i}"))
    return out


@pytest.mark.parametrize("size", [10, 300, 70_000])  # ext8, ext16 and ext32 headers
def test_list_cut_at_once_gives_the_pieces_of_each_element(size: int) -> None:
    serde = JsonPlusSerializer()
    values = messages(6, size)
    cut = _msgpack_lists._cut(serde, values)
    assert cut is not None
    pieces, packed = cut
    assert pieces == one_by_one(serde, values)
    blob = _codec.dump_blob(serde, "messages", "v1", values)
    assert blob.chunks == one_by_one(serde, values)
    assert blob.hashes == tuple(chunk_hash(p) for p in blob.chunks)
    # The whole array decodes to the list in one call, as the chunks do one by one.
    assert isinstance(blob, _codec.PackedList) and blob.packed == packed
    assert _codec.Decoder(serde).blob(blob) == values == _codec.Decoder(serde).blob(
        SnapshotBlob("messages", "v1", blob.type, blob.chunks, hashes=blob.hashes))


@pytest.mark.parametrize(
    "values",
    [
        [HumanMessage("hi", id="h"), {"role": "user", "content": "a dict message"}],
        ["plain", "strings"],
        [HumanMessage("hi", id="h"), 3],
        [HumanMessage("hi", id="h"), Tag("a str subclass")],
    ],
)
def test_a_list_with_other_elements_is_packed_one_by_one(values: list[Any]) -> None:
    serde = JsonPlusSerializer()
    assert _msgpack_lists._cut(serde, values) is None
    blob = _codec.dump_blob(serde, "messages", "v1", values)
    assert blob.chunks == one_by_one(serde, values)
    assert blob.hashes == tuple(chunk_hash(p) for p in blob.chunks)


def test_a_serializer_of_its_own_packs_one_by_one() -> None:
    class Custom(JsonPlusSerializer):
        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            typ, data = super().dumps_typed(obj)
            return typ, data[::-1]  # not msgpack any more: cutting it would be wrong

    serde = Custom()
    values = messages(2)
    assert _msgpack_lists._cut(serde, values) is None
    assert _codec.dump_blob(serde, "messages", "v1", values).chunks == one_by_one(serde, values)


def test_chunk_hashes_match_chunk_hash_with_and_without_the_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshots, "_memo", {})
    monkeypatch.setattr(snapshots, "_MEMO_SIZE", 5)
    big = b"y" * (snapshots._MEMO_CHUNK + 1)
    chunks = [b"a", b"bb", big, b"a", b"ccc"]
    expected = tuple(chunk_hash(c) for c in chunks)
    assert chunk_hashes(chunks) == expected  # all new
    assert big not in snapshots._memo  # too large to keep
    assert chunk_hashes(chunks) == expected  # all but the large one remembered
    more = [bytes([i]) * 3 for i in range(6)]  # overflows the memo: it is emptied, hashes stay right
    assert chunk_hashes(more + chunks) == tuple(chunk_hash(c) for c in more + chunks)
    assert set(snapshots._memo) == set(more)  # emptied first, then the new small chunks
    assert chunk_hashes([]) == ()
