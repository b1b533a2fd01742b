"""Compaction: the SDK's OpenAIResponsesCompactionSession over PostgresSession replaces history atomically.

The snapshot contract (`_get_compaction_snapshot`) runs against SQLiteSession too: the SDK's own sessions
show what the compaction session expects of the hook.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from agents.extensions.memory import EncryptedSession
from agents.memory import OpenAIResponsesCompactionSession
from cryptography.fernet import Fernet
from oa_samples import SessionFactory

from pgagentstate import AsyncStateStore
from pgagentstate.openai_agents import PostgresSession


def _msg(i: int | str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": f"message {i}", **extra}


SUMMARY = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "summary"}]}


async def test_snapshot_reads_the_newest_items_and_says_whether_that_is_all(session_factory: SessionFactory) -> None:
    s: Any = session_factory("snap")
    await s.add_items([_msg(i) for i in range(5)])
    part = await s._get_compaction_snapshot(3)
    assert part.items == [_msg(2), _msg(3), _msg(4)] and part.complete is False
    whole = await s._get_compaction_snapshot(5)
    assert whole.items == [_msg(i) for i in range(5)] and whole.complete is True


async def test_replace_suffix_keeps_the_older_history(session_factory: SessionFactory) -> None:
    s: Any = session_factory("suffix")
    await s.add_items([_msg(i) for i in range(5)])
    snap = await s._get_compaction_snapshot(3)
    assert await snap.replace_suffix(1, [SUMMARY]) is True
    assert await s.get_items() == [_msg(0), _msg(1), _msg(2), SUMMARY]
    await s.add_items([_msg("after")])
    assert await s.get_items() == [_msg(0), _msg(1), _msg(2), SUMMARY, _msg("after")]
    assert await s.pop_item() == _msg("after")


async def test_replace_suffix_is_refused_when_the_session_changed(session_factory: SessionFactory) -> None:
    s: Any = session_factory("stale")
    await s.add_items([_msg(i) for i in range(4)])
    snap = await s._get_compaction_snapshot(2)
    await s.add_items([_msg("meanwhile")])
    assert await snap.replace_suffix(0, [SUMMARY]) is False
    assert await s.get_items() == [*[_msg(i) for i in range(4)], _msg("meanwhile")]
    snap = await s._get_compaction_snapshot(2)
    await s.pop_item()
    assert await snap.replace_suffix(0, [SUMMARY]) is False
    assert await s.get_items() == [_msg(i) for i in range(4)]
    assert await snap.replace_suffix(2, [SUMMARY]) is False  # an empty suffix replaces nothing


async def test_prune_prefix_drops_the_oldest_items_it_accepts(session_factory: SessionFactory) -> None:
    s: Any = session_factory("prune")
    old = [_msg(i, expired=True) for i in range(7)]
    kept = [_msg("kept"), _msg("late", expired=True)]
    await s.add_items([*old, *kept, _msg("t1"), _msg("t2")])
    snap = await s._get_compaction_snapshot(2, prune_prefix=lambda item: bool(item.get("expired")))
    assert snap.items == [_msg("t1"), _msg("t2")]
    assert await snap.replace_suffix(0, [SUMMARY]) is True
    assert await s.get_items() == [*kept, SUMMARY]


class _FakeCompactClient:
    """Stands in for AsyncOpenAI: `responses.compact` returns a fixed summary and records its input."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.responses = SimpleNamespace(compact=self._compact)

    async def _compact(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return SimpleNamespace(output=[SUMMARY], usage=None)


@pytest.fixture
async def astore(dsn: str, schema: str) -> Any:
    store = AsyncStateStore(dsn, schema=schema)
    yield store
    await store.close()


async def test_compaction_session_replaces_history_without_clearing_it(astore: AsyncStateStore) -> None:
    session = PostgresSession("long", store=astore)
    await session.add_items([_msg(i) for i in range(12)])

    async def must_not_run(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the compaction went through clear_session()/add_items(): not atomic")

    session.clear_session = must_not_run  # type: ignore[method-assign]
    session.add_items = must_not_run  # type: ignore[method-assign]
    client = _FakeCompactClient()
    compacting = OpenAIResponsesCompactionSession("long", session, client=client)  # type: ignore[arg-type]
    await compacting.run_compaction({"force": True, "compaction_mode": "input"})
    assert [item["content"] for item in client.calls[0]["input"]] == [f"message {i}" for i in range(12)]
    assert await session.get_items() == [SUMMARY]
    conv = await session.get_conversation()
    assert conv is not None and conv.last_seq == 13  # one replacement: the old events gone, one new


async def test_replace_items_creates_the_session_and_replaces_all(astore: AsyncStateStore) -> None:
    session = PostgresSession("fresh", store=astore, user_id="u1")
    await session.replace_items([_msg("a"), _msg("b")])
    assert await session.get_items() == [_msg("a"), _msg("b")]
    conv = await session.get_conversation()
    assert conv is not None and conv.user_id == "u1"
    await session.replace_items([])
    assert await session.get_items() == []


async def test_a_subclass_gets_the_sdk_fallback(astore: AsyncStateStore) -> None:
    class Transforming(PostgresSession):
        pass

    s = Transforming("sub", store=astore)
    assert await s._get_compaction_snapshot(3) is None
    assert await s._atomic_replace_items([SUMMARY]) is False


async def test_encrypted_session_compacts_through_the_snapshot_hook(session_factory: SessionFactory) -> None:
    # EncryptedSession passes its own expiry test as prune_prefix and re-encrypts the summary.

    backend: Any = session_factory("enc")
    s: Any = EncryptedSession("enc", backend, encryption_key=Fernet.generate_key().decode("ascii"))
    await s.add_items([_msg(i) for i in range(4)])
    snap = await s._get_compaction_snapshot(2)
    assert snap is not None and snap.items == [_msg(2), _msg(3)]
    assert await snap.replace_suffix(0, [SUMMARY]) is True
    assert await s.get_items() == [_msg(0), _msg(1), SUMMARY]
    stored = await backend.get_items()
    assert len(stored) == 3 and SUMMARY not in stored  # the summary is stored encrypted
