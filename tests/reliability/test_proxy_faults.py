"""Network faults between the store and Postgres through a fault-injecting TCP proxy of the tests' own
(``tools/fault_proxy.py``: reset, blackhole, latency, slow trickle), switched in the middle of turns.

- reset: the call in flight fails at once with a retryable ``ConnectionLost``; while every new connection is
  reset, each call fails the same way within the pool wait (``connect.POOL_WAIT``); once it passes again the
  next call reconnects by itself;
- blackhole (a hung middlebox: the proxy's kernel acknowledges every byte, so TCP keepalives cannot tell):
  the caller's own deadline (``asyncio.timeout``) bounds the call, psycopg closes the connection after its
  cancel attempt (at most 5 + 5 s), and the store works again once the path is back;
- latency and a trickle of 2 kB/s: turns are slower and nothing breaks.

Every case ends with the conversation checked: contiguous seqs, the state's version equal to the turns that
committed, no event written without its state or the other way round. About 40 s in all.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import migrated_schema
from fault_proxy import FaultProxy
from pg_cluster import PgCluster

from pgagentstate import AsyncStateStore, ConnectionLost
from pgagentstate.connect import POOL_WAIT


@pytest.fixture
async def proxied(cluster: PgCluster) -> AsyncIterator[tuple[FaultProxy, AsyncStateStore]]:
    schema = migrated_schema(cluster.dsn())
    proxy = FaultProxy("127.0.0.1", cluster.port)
    store = AsyncStateStore(
        f"host=127.0.0.1 port={proxy.port} user=postgres dbname=postgres", schema=schema, min_size=1, max_size=2
    )
    try:
        yield proxy, store
    finally:
        proxy.set("pass")
        await store.close()
        proxy.close()


async def one_turn(store: AsyncStateStore, n: int) -> None:
    async with store.turn("c", create=True) as t:
        t.state["n"] = n
        t.state["seen"] = [*t.state.get("seen", []), n]
        t.append({"n": n}, event_id=f"e{n}")


async def check_consistent(store: AsyncStateStore, must_have: set[int]) -> list[int]:
    """The conversation's log and state agree: every committed turn wrote one event and one state version."""
    loaded = await store.load_conversation("c")
    stored = [int(e.event_id[1:]) for e in loaded.events]
    assert [e.seq for e in loaded.events] == list(range(1, len(stored) + 1))
    assert must_have <= set(stored), sorted(must_have - set(stored))
    state = await store.get_state(_ref())
    assert state is not None and state.data["seen"] == stored, (state, stored)
    return stored


def _ref() -> Any:
    from pgagentstate import StateRef

    return StateRef.conversation("c")


async def test_a_reset_fails_the_call_in_flight_at_once_and_the_store_reconnects(
    proxied: tuple[FaultProxy, AsyncStateStore],
) -> None:
    proxy, store = proxied
    await one_turn(store, 0)
    proxy.set("latency", delay=0.5)  # so that the reset lands while a statement is on the wire
    call = asyncio.create_task(one_turn(store, 1))
    await asyncio.sleep(0.3)
    reset_at = time.monotonic()
    proxy.set("reset")
    with pytest.raises(ConnectionLost) as caught:
        await call
    in_flight_s = time.monotonic() - reset_at
    assert caught.value.retryable

    # A reset "partition" of 3 s: every call is refused fast and typed, none waits longer than the pool wait.
    outcomes: list[tuple[str, float]] = []
    until = time.monotonic() + 3.0
    n = 1
    while time.monotonic() < until:
        n += 1
        began = time.monotonic()
        try:
            await one_turn(store, n)
            outcomes.append(("ok", time.monotonic() - began))
        except ConnectionLost:
            outcomes.append(("ConnectionLost", time.monotonic() - began))
    proxy.set("pass")
    healed_at = time.monotonic()
    await one_turn(store, 100)
    reconnect_s = time.monotonic() - healed_at
    stored = await check_consistent(store, {0, 100} | {i + 2 for i, (r, _) in enumerate(outcomes) if r == "ok"})
    print(
        "\nreset: "
        + json.dumps(
            {
                "call_in_flight_failed_after_s": round(in_flight_s, 2),
                "calls_during_reset": [(r, round(s, 2)) for r, s in outcomes],
                "first_call_after_heal_s": round(reconnect_s, 2),
                "stored": stored,
            }
        )
    )
    assert in_flight_s < 2.0, "the reset call in flight was not failed at once"
    assert all(r in ("ok", "ConnectionLost") and s < POOL_WAIT + 2 for r, s in outcomes), outcomes


async def test_a_blackholed_connection_is_bounded_by_the_callers_deadline(
    proxied: tuple[FaultProxy, AsyncStateStore],
) -> None:
    proxy, store = proxied
    await one_turn(store, 0)
    proxy.set("blackhole")
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(2.0):
            await one_turn(store, 1)
    bounded_s = time.monotonic() - began
    proxy.set("pass")
    healed_at = time.monotonic()
    await one_turn(store, 2)
    reconnect_s = time.monotonic() - healed_at
    stored = await check_consistent(store, {0, 2})
    print(
        "\nblackhole: "
        + json.dumps(
            {"deadline_s": 2.0, "call_ended_after_s": round(bounded_s, 2), "next_call_s": round(reconnect_s, 2)}
        )
        + f" stored {stored}"
    )
    # psycopg's cancellation: a cancel request (5 s at most, itself blackholed) then 5 s for the query to end.
    assert bounded_s < 2.0 + 10.0 + 3.0


async def test_latency_and_a_slow_trickle_slow_turns_but_break_nothing(
    proxied: tuple[FaultProxy, AsyncStateStore],
) -> None:
    proxy, store = proxied
    await one_turn(store, 0)
    timings: dict[str, float] = {}
    for n, (mode, kwargs) in enumerate(
        (("latency", {"delay": 0.1}), ("trickle", {"rate": 2000}), ("pass", {})), start=1
    ):
        proxy.set(mode, **kwargs)
        began = time.monotonic()
        await one_turn(store, n)
        timings[mode] = round(time.monotonic() - began, 2)
    stored = await check_consistent(store, {0, 1, 2, 3})
    print(f"\nslow paths: turn seconds {json.dumps(timings)}")
    assert stored == [0, 1, 2, 3]
