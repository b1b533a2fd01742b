"""Many writers on one conversation: nothing lost, nothing doubled, seq contiguous."""

from __future__ import annotations

import threading

import pytest

from pgagentstate import NewEvent, StateRef, StateStore, VersionConflict


def _run_threads(n: int, target: object) -> None:
    errors: list[BaseException] = []

    def wrapped() -> None:
        try:
            target()  # type: ignore[operator]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=wrapped) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.slow
def test_8_threads_x_200_cas_increments(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema, max_size=8) as store:
        store.create_conversation("c1")
        ref = StateRef.conversation("c1")
        store.put_state(ref, {"count": 0}, expected_version=0)
        conflicts = [0]
        lock = threading.Lock()

        def increment_200() -> None:
            for _ in range(200):
                while True:
                    doc = store.get_state(ref)
                    assert doc is not None
                    try:
                        store.put_state(ref, {"count": doc.data["count"] + 1}, expected_version=doc.version)
                        break
                    except VersionConflict:
                        with lock:
                            conflicts[0] += 1

        _run_threads(8, increment_200)
        final = store.get_state(ref)
        assert final is not None and final.data["count"] == 1600
        history = store.state_history(ref)
        assert len(history) == 1601  # the initial put and 1600 increments
        assert [d.data["count"] for d in reversed(history)] == list(range(1601))
        assert conflicts[0] > 0  # the test did exercise contention


@pytest.mark.slow
def test_8_writers_appending_to_one_conversation(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema, max_size=8) as store:
        store.create_conversation("c1")
        counter = iter(range(10_000))
        lock = threading.Lock()

        def append_50_batches() -> None:
            for _ in range(50):
                with lock:
                    batch = [next(counter) for _ in range(3)]
                store.append_events("c1", [NewEvent({"n": n, "batch": batch}) for n in batch])

        _run_threads(8, append_50_batches)
        events = store.list_events("c1")
        assert [e.seq for e in events] == list(range(1, 1201))
        assert sorted(e.payload["n"] for e in events) == list(range(1200))
        # Batches are atomic and never interleave.
        for i in range(0, 1200, 3):
            batch = [e.payload for e in events[i:i + 3]]
            assert [p["n"] for p in batch] == batch[0]["batch"]


def test_concurrent_patches_never_lose_keys(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema, max_size=4) as store:
        ref = StateRef.user("shop", "u1")
        ids = iter(range(1000))
        lock = threading.Lock()

        def patch_25() -> None:
            for _ in range(25):
                with lock:
                    i = next(ids)
                store.patch_state(ref, {f"k{i}": i})

        _run_threads(4, patch_25)
        doc = store.get_state(ref)
        assert doc is not None and len(doc.data) == 100 and doc.version == 100
