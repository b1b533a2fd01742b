"""Paused runs: paused by one process, approved and finished by another; claims are exclusive."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner
from agents.testing import ScriptedModel, assistant_message, function_call

from pgagentstate import AsyncStateStore, NotFound, StateRef, VersionConflict
from pgagentstate.openai_agents import PausedRuns, PostgresSession, idempotent_function_tool

WORKER = Path(__file__).with_name("paused_worker.py")


@pytest.fixture
async def store(dsn: str, schema: str) -> AsyncIterator[AsyncStateStore]:
    async with AsyncStateStore(dsn, schema=schema) as s:
        yield s


async def worker(phase: str, dsn: str, schema: str, cid: str, counter: Path) -> tuple[int, dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), phase, dsn, schema, cid, str(counter),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    if proc.returncode not in (0, 3):
        raise AssertionError(f"worker {phase} failed:\n{err.decode()}")
    return proc.returncode, (json.loads(out.decode().strip().splitlines()[-1]) if proc.returncode == 0 else {})


def payments(counter: Path) -> list[str]:
    return counter.read_text().splitlines() if counter.exists() else []


async def test_paused_in_one_process_finished_in_another(
    dsn: str, schema: str, store: AsyncStateStore, tmp_path: Path
) -> None:
    counter = tmp_path / "payments.log"
    cid = "whatsapp:+5511999990000"
    _, paused = await worker("pause", dsn, schema, cid, counter)
    assert paused["interruptions"] == 1
    assert paused["pending"] == [{"tool_name": "refund", "call_id": "call_refund",
                                  "arguments": '{"order_id":"12345","amount":19.9}', "agent": "support"}]
    assert payments(counter) == []  # nothing is paid before a human approves
    conv = await store.get_conversation(cid)
    assert conv is not None and conv.status == "awaiting_approval" and conv.user_id == "cust-42"
    doc = await store.get_state(StateRef.conversation(cid, name="paused_run"))
    assert doc is not None and doc.version == paused["version"] and doc.data["status"] == "paused"

    _, done = await worker("approve", dsn, schema, cid, counter)
    assert done["final_output"] == "Reembolso aprovado e feito."
    assert done["status"] == "active"
    assert done["context"] == {"user_id": "cust-42", "conversation_id": cid}
    assert len(payments(counter)) == 1
    items = await PostgresSession(cid, store=store).get_items()
    assert [i.get("type") for i in items] == [None, "function_call", "function_call_output", "message"]
    assert items[2]["output"] == "refunded 19.90 for 12345"  # type: ignore[typeddict-item]
    # Finished: nothing left to approve, a second approver finds nothing.
    assert await PausedRuns(store).pending(cid) == []
    with pytest.raises(NotFound):
        await PausedRuns(store).claim(cid, Agent(name="support"))


async def test_a_crash_after_paying_does_not_pay_twice(
    dsn: str, schema: str, store: AsyncStateStore, tmp_path: Path
) -> None:
    counter = tmp_path / "payments.log"
    cid = "conv-crash"
    await worker("pause", dsn, schema, cid, counter)
    rc, _ = await worker("approve-crash", dsn, schema, cid, counter)
    assert rc == 3 and len(payments(counter)) == 1
    # The claim of the dead process blocks a plain claim...
    with pytest.raises(VersionConflict):
        await PausedRuns(store).claim(cid, Agent(name="support"))
    # ...and a takeover re-runs the approved call: the ledger replays the refund instead of paying again.
    _, done = await worker("reclaim", dsn, schema, cid, counter)
    assert done["final_output"] == "Reembolso aprovado e feito."
    assert len(payments(counter)) == 1


async def test_two_approvers_cannot_both_resume(store: AsyncStateStore, tmp_path: Path, dsn: str,
                                                schema: str) -> None:
    counter = tmp_path / "payments.log"
    await worker("pause", dsn, schema, "conv-race", counter)
    async with AsyncStateStore(dsn, schema=schema) as other:
        agent: Agent[Any] = Agent(name="support")
        results = await asyncio.gather(
            *(PausedRuns(s).claim("conv-race", agent) for s in (store, other, store, other)),
            return_exceptions=True,
        )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1, results
    assert all(isinstance(e, VersionConflict) for e in losers), losers


async def test_save_is_versioned_and_rejects_unpaused_runs(store: AsyncStateStore) -> None:
    calls = 0

    @idempotent_function_tool(store, needs_approval=True)
    async def delete_account(reason: str) -> str:
        """Delete the user's account."""
        nonlocal calls
        calls += 1
        return "deleted"

    model = ScriptedModel([[function_call("delete_account", {"reason": "asked"}, call_id="c1")]])
    agent: Agent[Any] = Agent(name="support", tools=[delete_account], model=model)
    session = PostgresSession("conv-v", store=store)
    result = await Runner.run(agent, "delete me", session=session)
    runs = PausedRuns(store)
    v1 = await runs.save("conv-v", result, expected_version=0)
    with pytest.raises(VersionConflict):
        await runs.save("conv-v", result, expected_version=0)  # someone already paused a run here
    v2 = await runs.save("conv-v", result.to_state(), expected_version=v1)
    assert v2 == v1 + 1
    loaded = await runs.load("conv-v", agent)
    assert loaded is not None and loaded.version == v2 and loaded.status == "paused"
    assert [i.tool_name for i in loaded.interruptions] == ["delete_account"]

    # Rejected: the tool never runs, the run finishes, the document records it.
    claimed = await runs.claim("conv-v", agent)
    assert claimed.version == v2 + 1 and claimed.status == "resuming"
    assert await runs.load("conv-v", agent) is None  # claimed: no longer waiting
    for item in claimed.interruptions:
        claimed.state.reject(item)
    model.enqueue([assistant_message("Ok, I did not delete it.")])
    finished = await runs.finish("conv-v", await Runner.run(agent, claimed.state, session=session),
                                 version=claimed.version)
    assert calls == 0
    history = await store.state_history(runs.ref("conv-v"))
    assert [d.data["status"] for d in history][:2] == ["finished", "resuming"]
    assert history[0].version == finished
    model.enqueue([assistant_message("hi")])
    plain = await Runner.run(agent, "hello", session=session)
    with pytest.raises(ValueError, match="not paused"):
        await runs.save("conv-v", plain)
