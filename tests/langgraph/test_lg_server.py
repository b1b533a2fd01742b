"""The ``langgraph.json`` factories (``pgagentstate.langgraph.server``): set-up objects from the sections the
LangGraph server passes in ``$LANGGRAPH_CHECKPOINTER`` / ``$LANGGRAPH_STORE``, thread TTL as retention."""

from __future__ import annotations

import asyncio
import json

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from pgagentstate.langgraph import PostgresCheckpointer, PostgresStore
from pgagentstate.langgraph.server import checkpointer, store, thread_ttl


async def _thread_count(saver: PostgresCheckpointer) -> int:
    return len({c.config["configurable"]["thread_id"] async for c in saver.alist(None)})


@pytest.mark.parametrize("strategy", ["delete", "keep_latest"])
async def test_checkpointer_factory_applies_thread_ttl(
    dsn: str, schema: str, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Threads idle for 0.0001 minutes (6 ms) are retired; a sweep every 0.001 minutes (60 ms).
    ttl = {"strategy": strategy, "default_ttl": 0.0001, "sweep_interval_minutes": 0.001}
    monkeypatch.setenv("LANGGRAPH_CHECKPOINTER", json.dumps({"path": "x:y", "ttl": ttl}))
    monkeypatch.setenv("PGAGENTSTATE_DSN", dsn)
    async with checkpointer(schema=schema) as saver:
        assert isinstance(saver, PostgresCheckpointer)
        config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        first = await saver.aput(config, empty_checkpoint(), {}, {})
        await saver.aput(first, empty_checkpoint(), {}, {})
        expected = 0 if strategy == "delete" else 1
        for _ in range(600):  # bounded wait for the sweeper
            if len([c async for c in saver.alist(config)]) == expected:
                break
            await asyncio.sleep(0.05)
        assert len([c async for c in saver.alist(config)]) == expected


async def test_checkpointer_factory_without_ttl(dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANGGRAPH_CHECKPOINTER", raising=False)
    monkeypatch.delenv("LANGGRAPH_THREAD_TTL", raising=False)
    monkeypatch.setenv("PGAGENTSTATE_DSN", dsn)
    async with checkpointer(schema=schema) as saver:
        await saver.aput({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {})
        assert await _thread_count(saver) == 1


def test_thread_ttl_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANGGRAPH_THREAD_TTL", raising=False)
    assert thread_ttl({}) is None
    assert thread_ttl({"ttl": {"strategy": "delete"}}) is None  # no default_ttl: nothing expires
    assert thread_ttl({"ttl": {"default_ttl": 60}}) == {"default_ttl": 60, "strategy": "delete"}
    with pytest.raises(ValueError, match="strategy"):
        thread_ttl({"ttl": {"default_ttl": 60, "strategy": "archive"}})
    monkeypatch.setenv("LANGGRAPH_THREAD_TTL", json.dumps({"strategy": "keep_latest", "default_ttl": 5}))
    assert thread_ttl({"ttl": {"default_ttl": 60}}) == {"strategy": "keep_latest", "default_ttl": 5}


async def test_store_factory(dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    section = {"path": "x:y", "ttl": {"default_ttl": 60, "refresh_on_read": True, "sweep_interval_minutes": 1}}
    monkeypatch.setenv("LANGGRAPH_STORE", json.dumps(section))
    monkeypatch.setenv("PGAGENTSTATE_DSN", dsn)
    async with store(schema=schema) as memory:
        assert isinstance(memory, PostgresStore)
        assert memory.ttl_config == section["ttl"]
        await memory.aput(("users", "u1"), "k", {"v": 1})
        assert (await memory.aget(("users", "u1"), "k")).value == {"v": 1}  # type: ignore[union-attr]
        assert memory._sweeper is not None  # the store's TTL sweeper runs while it is open
    assert memory._sweeper is None
