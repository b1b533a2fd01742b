"""Double texting: a second message to a session while the agent is still answering the first.

Two Runners on two services with their own connection pools stand for two processes or two servers; the
model is scripted and slow enough that the turns overlap unless something serialises them.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from adk_samples import ScriptedLlm
from google.adk.agents import LlmAgent
from google.adk.errors import StaleSessionError
from google.adk.events import Event
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from pgagentstate import ConflictError, PgAgentStateError
from pgagentstate.adk import PostgresSessionService, conversation_id_for, run_serialized, serialized_turn

APP = "whatsapp_support"
USER = "cliente"


def msg(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def make_runner(dsn: str, schema: str, model: ScriptedLlm) -> Runner:
    agent = LlmAgent(name="support", model=model, instruction="help")
    return Runner(app_name=APP, agent=agent, session_service=PostgresSessionService(dsn, schema=schema))


@pytest.fixture
async def two_servers(dsn: str, schema: str) -> AsyncIterator[tuple[Runner, Runner, ScriptedLlm, ScriptedLlm]]:
    m1, m2 = ScriptedLlm(delay=0.3), ScriptedLlm(delay=0.3)
    r1, r2 = make_runner(dsn, schema, m1), make_runner(dsn, schema, m2)
    yield r1, r2, m1, m2
    for r in (r1, r2):
        await r.session_service.close()  # type: ignore[attr-defined]


async def wait_until(cond: Any) -> None:
    for _ in range(1000):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never became true")


def texts(events: list[Event]) -> list[str]:
    return [e.content.parts[0].text or "" for e in events if e.content and e.content.parts]


async def drain(agen: AsyncIterator[Event]) -> list[Event]:
    return [e async for e in agen]


async def test_unserialised_double_text_fails_loudly_never_interleaves(
    two_servers: tuple[Runner, Runner, ScriptedLlm, ScriptedLlm],
) -> None:
    r1, r2, m1, _ = two_servers
    s = await r1.session_service.create_session(app_name=APP, user_id=USER)
    first = asyncio.create_task(drain(r1.run_async(user_id=USER, session_id=s.id, new_message=msg("first"))))
    await wait_until(lambda: len(m1.seen) == 1)  # turn 1 is inside the model call
    second = asyncio.create_task(drain(r2.run_async(user_id=USER, session_id=s.id, new_message=msg("second"))))
    results = await asyncio.gather(first, second, return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    assert len(failures) == 1 and isinstance(failures[0], StaleSessionError)
    stored = await r1.session_service.get_session(app_name=APP, user_id=USER, session_id=s.id)
    assert stored is not None
    # turn 1's reply was refused, not written over turn 2's history
    assert texts(stored.events) == ["first", "second", "echo: second"]


async def test_run_serialized_processes_both_messages_in_order(
    two_servers: tuple[Runner, Runner, ScriptedLlm, ScriptedLlm],
) -> None:
    r1, r2, m1, m2 = two_servers
    s = await r1.session_service.create_session(app_name=APP, user_id=USER)
    first = asyncio.create_task(drain(run_serialized(r1, user_id=USER, session_id=s.id, new_message=msg("first"))))
    await wait_until(lambda: len(m1.seen) == 1)
    second = asyncio.create_task(
        drain(run_serialized(r2, user_id=USER, session_id=s.id, new_message=msg("second")))
    )
    out1, out2 = await asyncio.gather(first, second)
    assert texts(out1) == ["echo: first"]
    assert texts(out2) == ["echo: second"]
    # the second turn started from the history the first one wrote
    assert m2.seen == [["first", "second"]]
    stored = await r2.session_service.get_session(app_name=APP, user_id=USER, session_id=s.id)
    assert stored is not None
    assert texts(stored.events) == ["first", "echo: first", "second", "echo: second"]


async def test_many_concurrent_messages_all_processed(dsn: str, schema: str) -> None:
    model = ScriptedLlm(delay=0.02)
    runners = [make_runner(dsn, schema, model) for _ in range(3)]
    try:
        s = await runners[0].session_service.create_session(app_name=APP, user_id=USER)
        turns = [
            drain(run_serialized(runners[i % 3], user_id=USER, session_id=s.id, new_message=msg(f"m{i}")))
            for i in range(6)
        ]
        await asyncio.gather(*turns)
        stored = await runners[0].session_service.get_session(app_name=APP, user_id=USER, session_id=s.id)
        assert stored is not None
        got = texts(stored.events)
        assert len(got) == 12
        # every turn is a message immediately followed by its own reply
        for user_text, reply in zip(got[::2], got[1::2], strict=True):
            assert reply == f"echo: {user_text}"
        assert sorted(got[::2]) == [f"m{i}" for i in range(6)]
    finally:
        for r in runners:
            await r.session_service.close()  # type: ignore[attr-defined]


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {samples!r})
    from adk_samples import ScriptedLlm
    from google.adk.agents import LlmAgent
    from google.adk.runners import Runner
    from google.genai import types
    from pgagentstate.adk import PostgresSessionService, run_serialized

    async def main():
        service = PostgresSessionService({dsn!r}, schema={schema!r})
        runner = Runner(app_name={app!r}, agent=LlmAgent(name="support", model=ScriptedLlm()),
                        session_service=service)
        message = types.Content(role="user", parts=[types.Part(text="second")])
        async for _ in run_serialized(runner, user_id={user!r}, session_id={sid!r}, new_message=message):
            pass
        await service.close()

    asyncio.run(main())
    """
)


def advisory_waiters(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return int(row[0]) if row else 0


async def test_serialised_across_processes(dsn: str, schema: str, tmp_path: Path) -> None:
    model = ScriptedLlm()
    runner = make_runner(dsn, schema, model)
    service = runner.session_service
    assert isinstance(service, PostgresSessionService)
    try:
        s = await service.create_session(app_name=APP, user_id=USER)
        script = tmp_path / "child.py"
        script.write_text(
            _CHILD.format(
                samples=str(Path(__file__).parent), dsn=dsn, schema=schema, app=APP, user=USER, sid=s.id
            )
        )
        async with serialized_turn(service, app_name=APP, user_id=USER, session_id=s.id):
            child = subprocess.Popen([sys.executable, str(script)])
            # the other process is now blocked on this session's lock ...
            await wait_until(lambda: advisory_waiters(dsn) >= 1 or child.poll() is not None)
            assert child.poll() is None, "the child finished without waiting for the lock"
            # ... while this process runs its turn (its own operations are not blocked by the lock)
            async for _ in runner.run_async(user_id=USER, session_id=s.id, new_message=msg("first")):
                pass
        assert await asyncio.to_thread(child.wait, 120) == 0
        stored = await service.get_session(app_name=APP, user_id=USER, session_id=s.id)
        assert stored is not None
        assert texts(stored.events) == ["first", "echo: first", "second", "echo: second"]
    finally:
        await service.close()  # type: ignore[attr-defined]


async def test_lock_timeout_raises_a_conflict(dsn: str, schema: str) -> None:
    a = PostgresSessionService(dsn, schema=schema)
    b = PostgresSessionService(dsn, schema=schema)
    try:
        async with serialized_turn(a, app_name=APP, user_id=USER, session_id="s1"):
            with pytest.raises(PgAgentStateError) as err:
                async with serialized_turn(b, app_name=APP, user_id=USER, session_id="s1", timeout=0.2):
                    pass
            assert isinstance(err.value, ConflictError), type(err.value)
            # another session is not blocked
            async with serialized_turn(b, app_name=APP, user_id=USER, session_id="s2", timeout=5):
                pass
    finally:
        await a.close()
        await b.close()


async def test_run_serialized_needs_our_session_service() -> None:
    runner = Runner(app_name=APP, agent=LlmAgent(name="x", model=ScriptedLlm()),
                    session_service=InMemorySessionService())
    with pytest.raises(TypeError, match="PostgresSessionService"):
        async for _ in run_serialized(runner, user_id=USER, session_id="s", new_message=msg("hi")):
            pass


def test_lock_key_is_the_session_conversation() -> None:
    assert conversation_id_for(APP, USER, "s/1") != conversation_id_for(APP, "other", "s/1")
