from __future__ import annotations

import pytest

from pgagentstate import AsyncStateStore, InvalidInput, NotFound, StateStore


def test_steps_resume_at_the_failed_step(store: StateStore) -> None:
    store.create_conversation("c1")
    calls: list[str] = []

    def step(name: str, fail: bool = False) -> dict[str, str]:
        calls.append(name)
        if fail:
            raise TimeoutError("payment API timed out")
        return {"done": name}

    store.run_step("c1", "refund", "understand", lambda: step("understand"), position=1)
    store.run_step("c1", "refund", "verify_policy", lambda: step("verify_policy"), position=2)
    with pytest.raises(TimeoutError):
        store.run_step("c1", "refund", "process_refund", lambda: step("process_refund", fail=True), position=3)
    steps = {s.step: s for s in store.get_workflow("c1", "refund")}
    assert steps["process_refund"].status == "failed"
    assert steps["process_refund"].last_error == "TimeoutError: payment API timed out"
    # The retry (another request, maybe another server) re-runs only step 3.
    for name, pos in [("understand", 1), ("verify_policy", 2), ("process_refund", 3)]:
        store.run_step("c1", "refund", name, lambda n=name: step(n), position=pos)  # type: ignore[misc]
    assert calls == ["understand", "verify_policy", "process_refund", "process_refund"]
    steps_list = store.get_workflow("c1", "refund")
    assert [s.step for s in steps_list] == ["understand", "verify_policy", "process_refund"]
    assert [s.attempts for s in steps_list] == [1, 1, 2]
    assert all(s.status == "completed" for s in steps_list)
    assert steps_list[2].result == {"done": "process_refund"}


def test_start_complete_and_statuses(store: StateStore) -> None:
    store.create_conversation("c1")
    started = store.start_step("c1", "wf", "a", lease=30)
    assert started.status == "in_progress" and started.attempts == 1 and started.lease_expires_at is not None
    done = store.complete_step("c1", "wf", "a", {"ok": True})
    assert done.status == "completed" and done.result == {"ok": True} and done.completed_at is not None
    again = store.start_step("c1", "wf", "a")
    assert again.status == "completed" and again.attempts == 1
    waiting = store.set_step_status("c1", "wf", "approve", "awaiting_approval")
    assert waiting.status == "awaiting_approval"
    with pytest.raises(InvalidInput):
        store.set_step_status("c1", "wf", "x", "dancing")
    with pytest.raises(NotFound):
        store.start_step("ghost", "wf", "a")


async def test_async_run_step_accepts_coroutines(astore: AsyncStateStore) -> None:
    await astore.create_conversation("c1")

    async def work() -> int:
        return 42

    assert await astore.run_step("c1", "wf", "s", work) == 42
    assert await astore.run_step("c1", "wf", "s", work) == 42
    (s,) = await astore.get_workflow("c1")
    assert s.attempts == 1
