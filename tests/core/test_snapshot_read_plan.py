"""The snapshot read's work grows with the chunks it returns, not with their square.

A LangGraph thread's message list is stored as one chunk per message; reading the latest checkpoint
selects the conversation's chunks that its blobs name. Written as a plain ``IN (subquery)``, Postgres
turned that into a nested loop that compared every chunk of the conversation with every hash named
(150 chunks x 67 hashes: 10,050 comparisons, 1.4 of the read's 1.8 ms for a 50-turn thread; 16x that
for a thread four times as long). Counted in rows the plan's nodes produce, which does not depend on
the machine's speed.
"""

from __future__ import annotations

import psycopg
import pytest

from pgagentstate import StateStore, queries
from pgagentstate.ops.snapshots import SnapshotBlob, SnapshotWrite, chunk_hash

from ..conftest import PARTITIONED
from .statement_plans import Sent, captured, generic_plan, plan, rows_read, scans


def _thread(store: StateStore, cid: str, messages: int) -> None:
    """A chain whose ``messages`` channel grows by one chunk per snapshot, as LangGraph's does."""
    chunks = [f"message {i}: {'x' * 40}".encode() for i in range(messages)]
    parent = None
    for n in range(1, messages + 1):
        pieces: list[bytes | str] = [chunk_hash(c) for c in chunks[: n - 1]] + [chunks[n - 1]]
        blobs = [SnapshotBlob("messages", str(n), "list", tuple(pieces))]
        store.put_snapshot(cid, f"s{n:04d}", parent_id=parent, type="bytes", data=b"{}",
                           channel_versions={"messages": str(n)}, blobs=blobs)
        parent = f"s{n:04d}"


@pytest.mark.parametrize("analyze", [False, True], ids=["fresh-statistics", "analyzed"])
def test_reading_the_latest_checkpoint_does_linear_work(
    store: StateStore, dsn: str, schema: str, analyze: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = 120
    _thread(store, "long", messages)
    _thread(store, "other", 10)  # chunks of another conversation, which the read must not touch
    with captured(monkeypatch) as sent:
        snap = store.get_snapshot("long")
    assert snap is not None and len(snap.blobs["messages"].chunks) == messages
    (read,) = [s for s in sent if s.name == "snapshot_read"]

    with psycopg.connect(dsn, autocommit=True) as conn:
        if analyze:
            for table in ("snapshots", "snapshot_blobs", "snapshot_chunks"):
                conn.execute(f'ANALYZE "{schema}".{table}')
        tree = plan(conn, schema, read, analyze=True)
    # Linear: each chunk is read, hashed or probed and aggregated a few times (~6 x 120 here); the
    # nested loop produced 120 x 120.
    assert rows_read(tree) < 20 * messages


@pytest.mark.parametrize("analyze", [False, True], ids=["fresh-statistics", "analyzed"])
def test_a_put_checks_its_bases_and_known_chunks_without_reading_the_rest_of_the_thread(
    store: StateStore, dsn: str, schema: str, analyze: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put checks that the chunks it names by hash are stored and that the base its list extends is stored
    whole: one probe each, not a scan of every chunk or blob of the thread (which grew with the thread: 0.88
    against 0.57-0.63 ms per put at 4,590 blobs, 0.95-1.18 against 0.65-0.68 at 1,090 chunks), also in the
    generic plan a prepared statement runs after its first calls."""
    versions = 120
    first = SnapshotBlob("messages", "1", "list", (b"message 1",))
    store.put_snapshot("long", "s0001", type="bytes", data=b"{}", channel_versions={"messages": "1"}, blobs=[first])
    parent = "s0001"
    for n in range(2, versions + 1):
        # The previous version's message by hash (stored by the previous put), this one's as bytes.
        pieces = (chunk_hash(f"message {n - 1}".encode()), f"message {n}".encode())
        blob = SnapshotBlob("messages", str(n), "list", pieces, base="1")
        with captured(monkeypatch) as sent:
            store.put_snapshot("long", f"s{n:04d}", parent_id=parent, type="bytes", data=b"{}",
                               channel_versions={"messages": str(n)}, blobs=[blob])  # fmt: skip
        parent = f"s{n:04d}"
    assert store.get_snapshot("long") is not None
    # Other threads' rows, as in any table in service (on a table of this thread alone a scan is cheapest).
    others = [SnapshotBlob(f"channel {i}", "1", "json", (f"[{i}]".encode(),)) for i in range(2000)]
    store.put_snapshot("other", "o1", type="bytes", data=b"{}", channel_versions={}, blobs=others)
    (put,) = [s for s in sent if s.name == "snapshot_put"]
    assert (put.params["n_bases"], put.params["n_known"]) == (1, 1)
    again = Sent(put.name, {**put.params, "snapshot_id": "s9999", "forked": True}, put.subs)
    with psycopg.connect(dsn) as conn:  # not autocommit: what the plans write is rolled back
        if analyze:
            conn.execute(f'ANALYZE "{schema}".snapshot_blobs')
            conn.execute(f'ANALYZE "{schema}".snapshot_chunks')
        for tree in (plan(conn, schema, again, analyze=True), generic_plan(conn, schema, again)):
            assert tree["Actual Rows"] == 1  # the snapshot was written: the checks passed
            # One probe each (a few index entries); the scans read every blob, or chunk, of the thread.
            assert rows_read(tree, "snapshot_blobs") < 5
            assert rows_read(tree, "snapshot_chunks") < 5
        conn.rollback()


@pytest.mark.skipif(PARTITIONED, reason="on hash partitions a custom plan prunes at plan time and always wins")
def test_each_kind_of_put_runs_on_a_generic_plan_once_prepared(dsn: str, schema: str) -> None:
    """Puts of every shape (a list extending a base, a whole new list, no blob) run on the generic plans of
    their prepared statements: a statement whose checks the calls without a base planned away was planned
    afresh on every call (0 generic plans in 60 puts, 7% of an invoke)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        store = StateStore(conn, schema=schema)
        store.put_snapshot("g", "s000", type="bytes", data=b"{}", channel_versions={"messages": "0"},
                           blobs=[SnapshotBlob("messages", "0", "list", (b"m0",))])  # fmt: skip
        parent = "s000"
        for n in range(1, 61):
            kind = n % 3
            blobs = [SnapshotBlob("messages", str(n), "list", (f"m{n}".encode(),), base=None if kind else "0")]
            store.put_snapshot("g", f"s{n:03d}", parent_id=parent, type="bytes", data=b"{}",
                               channel_versions={"messages": str(n)}, blobs=blobs if kind < 2 else [])  # fmt: skip
            parent = f"s{n:03d}"
        rows = conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements").fetchall()
    plans = {}
    for text, generic, custom in rows:
        if "INSERT INTO" in text and ".snapshots AS s" in text:
            plans["lean" if "SELECT true AS ok" in text else "put"] = (generic, custom)
    assert set(plans) == {"lean", "put"}
    # 20 lean calls, 40 others: psycopg prepares on the 6th, Postgres plans the first 5 for their values.
    assert all(generic >= 5 for generic, _ in plans.values()), plans


def test_every_statement_fits_psycopgs_parse_cache() -> None:
    """psycopg caches the parsing of a statement's placeholders only up to 4,096 bytes: a longer one is
    parsed again on every execution (snapshot_read at 4,225 bytes cost each get_tuple 0.15 ms). Checked
    for a schema name of 24 characters (the default, ``pgagentstate``, has 12)."""
    from psycopg import _queries

    limit = _queries.MAX_CACHED_STATEMENT_LENGTH
    schema = "s" * 24
    too_long = {name: len(queries.query(name, schema)) for name in queries._raw()}
    assert {name: n for name, n in too_long.items() if n > limit} == {}


def test_collecting_unused_blobs_and_chunks_does_linear_work(store: StateStore, dsn: str, schema: str) -> None:
    """The statements prune / delete_for_runs end with, run as they are sent (one transaction)."""
    from pgagentstate.ops.snapshot_threads import _gc

    threads, messages = 10, 60
    ids = [f"c{i}" for i in range(threads)]
    for cid in ids:
        _thread(store, cid, messages)
    produced = {}
    with psycopg.connect(dsn) as conn:  # a transaction, rolled back: the counts are what is measured
        for stmt in _gc(ids):
            sent = Sent(stmt.name, {"tenant": store.tenant, **stmt.params}, stmt.subs)
            if not stmt.name.endswith("_gc"):
                conn.execute(queries.query(sent.name, schema), sent.params)
                continue
            produced[stmt.name] = rows_read(plan(conn, schema, sent, analyze=True))
        conn.rollback()
    # What the statements must read: every chunk, and every hash the blobs list (snapshot n's blob lists
    # n hashes: 1,830 a thread). A nested loop anti-join produced ~550,000 rows (each of the 600 chunks
    # and blobs against the ~300 still used); one pass, a few times what is read.
    listed = threads * messages * (messages + 1) // 2 + threads * messages
    assert produced == {name: n for name, n in produced.items() if n < 4 * listed}
    assert set(produced) == {"snapshot_blobs_gc", "snapshot_chunks_gc"}


@pytest.mark.parametrize("analyze", [False, True], ids=["fresh-statistics", "analyzed"])
def test_checking_a_kept_head_reads_only_its_threads_pending_writes(
    store: StateStore, dsn: str, schema: str, analyze: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LangGraph saver's ``get_tuple`` of a thread whose head it kept is one statement: the head's id and
    stamp and its pending writes. Joined to the head on its columns, the generic plan a connection made while
    the table was small read every pending write of the tenant once it had grown, and filtered them (2,100
    rows, 0.45 of the statement's 0.5 ms: ``get_tuple`` 1.17x PostgresSaver's in bench_langgraph.py against
    0.87x on connections that planned it later); one probe is enough, whatever the statistics said."""
    _thread(store, "head", 3)
    others = [f"other {i}" for i in range(200)]
    for cid in others:
        store.put_snapshot(cid, "o1", type="bytes", data=b"{}", channel_versions={})
    store.put_snapshot_writes("head", "s0003", [SnapshotWrite("t", 0, "messages", "json", b"[1]")])
    with captured(monkeypatch) as sent:
        head = store.get_snapshot_head("head")
    assert head is not None and len(head.writes) == 1
    (check,) = [s for s in sent if s.name == "snapshot_head_writes"]

    def grow() -> None:  # other threads' pending writes, committed after the plan was made
        for cid in others:
            store.put_snapshot_writes(cid, "o1", [SnapshotWrite(f"task {i}", 0, "c", "json", b"[]") for i in range(10)])

    with psycopg.connect(dsn) as conn:
        if analyze:  # statistics of the grown table (a table analyzed while tiny is scanned until analyzed again)
            grow()
            conn.execute(f'ANALYZE "{schema}".snapshot_writes')
            conn.execute(f'ANALYZE "{schema}".snapshots')
        trees = [generic_plan(conn, schema, check, then=None if analyze else grow),
                 plan(conn, schema, check, analyze=True)]  # fmt: skip
        conn.rollback()
    for tree in trees:
        assert rows_read(tree, "snapshot_writes") < 5, [(s.node, s.relation, s.conditions) for s in scans(tree)]


@pytest.mark.parametrize("named", [False, True], ids=["latest", "named"])
def test_reading_a_threads_checkpoint_on_a_generic_plan_reads_only_that_thread(
    store: StateStore, dsn: str, schema: str, named: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of one thread's latest (or named) checkpoint selects it through the primary key, also in the
    generic plan a prepared statement runs after its first calls. With the thread and namespace as
    ``(%(x)s IS NULL OR column = %(x)s)`` conditions, which a generic plan cannot use as index conditions,
    it read every snapshot of the tenant (1,650 rows, 0.3 of the statement's 0.73 ms at 9 threads: the
    full read 1.55x PostgresSaver's; O(tenant) for every ``get_tuple`` of a process that did not store the
    thread's head)."""
    _thread(store, "mine", 5)
    for i in range(100):
        store.put_snapshot(f"other {i}", "o1", type="bytes", data=b"{}", channel_versions={})
        store.put_snapshot(f"other {i}", "o2", parent_id="o1", type="bytes", data=b"{}", channel_versions={})
    with captured(monkeypatch) as sent:
        snap = store.get_snapshot("mine", snapshot_id="s0003" if named else None)
    assert snap is not None and snap.snapshot_id == ("s0003" if named else "s0005")
    (read,) = [s for s in sent if s.name == "snapshot_read"]
    with psycopg.connect(dsn) as conn:
        trees = [generic_plan(conn, schema, read), plan(conn, schema, read, analyze=True)]
        conn.rollback()
    for tree in trees:
        assert rows_read(tree, "snapshots") < 10, [(s.node, s.relation, s.conditions) for s in scans(tree)]
