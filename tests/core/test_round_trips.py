"""Round trips counted from the wire: libpq's trace of the messages the client sent.

A round trip is a point where the client stops and waits for the server's ReadyForQuery: one per Sync
message (extended protocol, what psycopg sends, pipelined or not) and one per simple-protocol Query. The
trace also holds the server's ReadyForQuery messages; the two counts must agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgagentstate import AsyncStateStore, NewEvent, StateRef, StateStore, VersionConflict
from pgagentstate.errors import DatabaseError
from pgagentstate.ops.base import Stmt, Tx

HISTORY = [NewEvent({"role": "customer", "text": f"message {k}"}, author="customer") for k in range(20)]


class Wire:
    """What one traced stretch of a connection's life sent and received."""

    def __init__(self, text: str) -> None:
        self.text = text
        sent = re.findall(r"^F\t\d+\t(\w+)", text, re.MULTILINE)
        self.sent = sent
        self.waits = sum(1 for m in sent if m in ("Sync", "Query"))
        self.ready = len(re.findall(r"^B\t\d+\tReadyForQuery", text, re.MULTILINE))
        self.statements = [
            s for s in re.findall(r'^F\t\d+\t(?:Parse\t "[^"]*"|Query\t) "(\w+)', text, re.MULTILINE) if s
        ]

    @property
    def round_trips(self) -> int:
        assert self.waits == self.ready, self.text  # every wait was answered, nothing else was
        return self.waits


def assert_steady(trips: list[tuple[int, int]]) -> None:
    """One round trip to load and one to save, except once: psycopg prepares a statement on its 5th
    execution on a connection, with a round trip of its own (once per connection and statement)."""
    assert trips.count((1, 1)) >= len(trips) - 1 and set(trips) <= {(1, 1), (2, 2)}, trips
    assert trips[-3:] == [(1, 1)] * 3, trips


@contextmanager
def traced(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], tmp_path: Path) -> Iterator[list[Wire]]:
    path = tmp_path / f"trace-{len(list(tmp_path.iterdir()))}.txt"
    out: list[Wire] = []
    with path.open("w") as f:
        conn.pgconn.trace(f.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        try:
            yield out
        finally:
            conn.pgconn.untrace()
    out.append(Wire(path.read_text()))


def one_turn(store: StateStore, cid: str, i: int, tmp_path: Path, conn: psycopg.Connection[Any]) -> tuple[Wire, Wire]:
    turn = store.turn(cid)
    with traced(conn, tmp_path) as load:
        turn.load()
    turn.append({"role": "customer", "text": f"message {i}"}, author="customer")
    turn.append({"role": "agent", "text": f"answer {i}"}, author="agent")
    turn.state["turns"] = i
    with traced(conn, tmp_path) as save:
        turn.commit()
    return load[0], save[0]


@pytest.mark.parametrize("autocommit", [True, False])
def test_a_turn_is_one_round_trip_to_load_and_one_to_save(
    dsn: str, schema: str, tmp_path: Path, autocommit: bool
) -> None:
    with psycopg.connect(dsn, autocommit=autocommit) as conn:
        store = StateStore(conn, schema=schema)
        store.create_conversation("c1")
        store.append_events("c1", HISTORY)
        trips = []
        for i in range(10):
            load, save = one_turn(store, "c1", i, tmp_path, conn)
            trips.append((load.round_trips, save.round_trips))
            assert save.sent[-4:] == ["Bind", "Describe", "Execute", "Sync"]  # one statement
        assert_steady(trips)
        assert conn.autocommit is autocommit  # a connection passed in is left as it was
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert store.get_conversation("c1").last_seq == 20 + 2 * 10  # type: ignore[union-attr]


async def test_an_async_turn_is_two_round_trips(dsn: str, schema: str, tmp_path: Path) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        store = AsyncStateStore(conn, schema=schema)
        await store.create_conversation("c1")
        await store.append_events("c1", HISTORY)
        trips = []
        for i in range(10):
            turn = store.turn("c1")
            with traced(conn, tmp_path) as load:
                await turn.load()
            turn.append({"text": f"message {i}"})
            turn.state["turns"] = i
            with traced(conn, tmp_path) as save:
                await turn.commit()
            trips.append((load[0].round_trips, save[0].round_trips))
        assert_steady(trips)
        assert len(turn.events) == 20


def test_a_conversations_first_turn_creates_it_in_one_more_round_trip(dsn: str, schema: str, tmp_path: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        store = StateStore(conn, schema=schema)
        for cid, expected in (("new", 2), ("new", 1)):
            turn = store.turn(cid, create=True, channel="whatsapp")
            with traced(conn, tmp_path) as load:
                turn.load()
            turn.append({"text": "oi"})
            with traced(conn, tmp_path) as save:
                turn.commit()
            assert (load[0].round_trips, save[0].round_trips) == (expected, 1)
        assert [e.seq for e in store.list_events("new")] == [1, 2]


def test_a_refused_turn_costs_one_round_trip_and_writes_nothing(dsn: str, schema: str, tmp_path: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        store = StateStore(conn, schema=schema)
        store.create_conversation("c1")
        turn = store.turn("c1").load()
        store.append_events("c1", [NewEvent({"text": "someone else"})])
        turn.append({"text": "mine"})
        turn.state["x"] = 1
        with traced(conn, tmp_path) as save, pytest.raises(VersionConflict) as info:
            turn.commit()
        assert save[0].round_trips == 1
        assert (info.value.expected, info.value.actual) == (1, 2)
        assert [e.payload["text"] for e in store.list_events("c1")] == ["someone else"]
        assert store.get_state(StateRef.conversation("c1")) is None


def test_a_transaction_of_several_statements_is_one_round_trip(dsn: str, schema: str, tmp_path: Path) -> None:
    """BEGIN, the statements and COMMIT go in one batch (psycopg's conn.transaction() in a pipeline
    syncs after each: four round trips)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        store = StateStore(conn, schema=schema)
        store.create_conversation("c1")
        store.append_events("c1", [NewEvent(1), NewEvent(2)])
        with traced(conn, tmp_path) as wire:
            popped = store.pop_event("c1")  # lock the row, then delete: two statements, one transaction
        assert popped is not None and popped.payload == 2
        assert wire[0].round_trips == 1
        assert wire[0].statements[0] == "BEGIN" and wire[0].statements[-1] == "COMMIT"


def test_tenant_isolation_adds_no_round_trip(dsn: str, schema: str, tmp_path: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        store = StateStore(conn, schema=schema, tenant_isolation=True)
        store.create_conversation("c1")
        trips = [tuple(w.round_trips for w in one_turn(store, "c1", i, tmp_path, conn)) for i in range(10)]
        assert_steady(trips)  # type: ignore[arg-type]


def test_python_failing_between_two_statements_commits_neither(dsn: str, schema: str, tmp_path: Path) -> None:
    """The first statement is on its way when the second cannot even be sent (a parameter psycopg
    refuses to encode): the batch's Sync must not commit the first one."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        store = StateStore(conn, schema=schema)

        def create_then_fail() -> Any:
            fields = {"app": "", "framework": "", "user_id": "", "channel": "", "status": "active", "metadata": "{}"}
            yield Tx(
                (
                    Stmt("conversation_create", {"id": "half", **fields}, "one"),
                    Stmt("conversation_get", {"id": "nul\x00"}, "one"),
                )
            )

        with pytest.raises(DatabaseError, match="NUL"):
            store.run(create_then_fail())
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert store.get_conversation("half") is None


def test_a_connection_passed_in_with_another_row_factory_still_works(dsn: str, schema: str) -> None:
    from psycopg.rows import dict_row

    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        store = StateStore(conn, schema=schema)
        with store.turn("c1", create=True) as turn:
            turn.append({"text": "oi"})
            turn.state["n"] = 1
        assert [e.payload for e in store.list_events("c1")] == [{"text": "oi"}]
        assert store.pop_event("c1") is not None  # a pipelined transaction
        assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}  # the caller's factory untouched
