"""PostgresCheckpointer with the core's encryption at rest: checkpoint bodies, channel values (chunks),
pending writes and metadata are sealed and bound to their place; plaintext is refused when encryption is
required; key rotation covers them; the conformance suite passes on an encrypting saver too."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.conformance import checkpointer_test, validate
from lg_graphs import cfg, three_nodes
from psycopg import sql
from psycopg_pool import ConnectionPool
from test_lg_conformance import SyncShim, assert_full_conformance
from test_lg_storage import test_delta_channel_is_rebuilt_from_its_seed_and_writes as delta_channel_check

from pgagentstate import StateStore
from pgagentstate.crypto import Encryption, StaticKeyProvider
from pgagentstate.errors import IntegrityError
from pgagentstate.langgraph import PostgresCheckpointer
from pgagentstate.langgraph._stores import Opened

SECRET = "meu@email.com"
ORDER = "pedido-98765"
K1, K2 = os.urandom(32), os.urandom(32)
_names = itertools.count()


def encryption(keys: dict[str, bytes] | None = None, active: str = "k1", required: bool = True) -> Encryption:
    return Encryption(StaticKeyProvider(keys or {"k1": K1}, active=active), required=required)


def saver_for(dsn: str, schema: str, enc: Encryption | None) -> Opened[PostgresCheckpointer]:
    return PostgresCheckpointer.from_conn_string(dsn, schema=schema, encryption=enc)


@pytest.fixture
def esaver(dsn: str, schema: str) -> Iterator[PostgresCheckpointer]:
    with PostgresCheckpointer.from_conn_string(dsn, schema=schema, encryption=encryption()) as s:
        yield s


def run(saver: PostgresCheckpointer, thread: str, turns: int = 3) -> None:
    graph = three_nodes().compile(checkpointer=saver)
    for t in range(turns):
        config: RunnableConfig = {**cfg(thread), "metadata": {"customer": SECRET, "turn": t}}
        graph.invoke({"messages": [HumanMessage(f"turn {t}: my email is {SECRET}, order {ORDER}")]}, config)


def messages(saver: PostgresCheckpointer, thread: str) -> list[str]:
    state = three_nodes().compile(checkpointer=saver).get_state(cfg(thread))
    return [str(m.content) for m in state.values["messages"]]


def dump(dsn: str, schema: str) -> bytes:
    """Every value of every table of the schema as bytes (bytea raw, not hex): what a dump reveals."""
    out: list[bytes] = []
    with psycopg.connect(dsn) as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()
        for (table,) in tables:
            for row in conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table))):
                for v in row:
                    out.append(v if isinstance(v, bytes) else str(v).encode())
    return b"\n".join(out)


def execute(dsn: str, schema: str, statement: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql.SQL(statement).format(s=sql.Identifier(schema)))
        return cur.rowcount


def test_graph_round_trips_and_nothing_readable_in_the_database(dsn: str, schema: str) -> None:
    with saver_for(dsn, schema, encryption()) as saver:
        run(saver, "enc")
        assert messages(saver, "enc")[-2:] == [f"turn 2: my email is {SECRET}, order {ORDER}",
                                               f"echo: turn 2: my email is {SECRET}, order {ORDER}"]
        history = list(saver.list(cfg("enc")))
        assert len(history) == 15 and all(t.metadata.get("customer") == SECRET for t in history)
        # Filters match the decrypted metadata, and limit counts matches, not rows scanned.
        hits = list(saver.list(cfg("enc"), filter={"turn": 1, "source": "loop"}, limit=2))
        assert [t.metadata["turn"] for t in hits] == [1, 1]
        assert [t.metadata["source"] for t in hits] == ["loop", "loop"]
        assert hits[0].metadata["step"] > hits[1].metadata["step"]  # the newest two of the three
        assert list(saver.list(cfg("enc"), filter={"customer": "someone else"})) == []
        assert len(list(saver.list(cfg("enc"), filter={}, limit=4))) == 4
    text = dump(dsn, schema)
    assert SECRET.encode() not in text and ORDER.encode() not in text
    assert b"enc" in text  # thread ids, channel names and versions stay readable, as documented


def test_the_dump_check_finds_plaintext_without_encryption(dsn: str, schema: str) -> None:
    """The check above can fail: without encryption the messages and metadata are in the dump."""
    with saver_for(dsn, schema, None) as saver:
        run(saver, "plain", turns=1)
    text = dump(dsn, schema)
    assert SECRET.encode() in text and ORDER.encode() in text


async def test_async_graph_round_trips(dsn: str, schema: str) -> None:
    async with PostgresCheckpointer.from_conn_string(dsn, schema=schema, encryption=encryption()) as saver:
        graph = three_nodes().compile(checkpointer=saver)
        await graph.ainvoke({"messages": [HumanMessage(SECRET)]}, cfg("a"))
        await graph.ainvoke({"messages": [HumanMessage(ORDER)]}, cfg("a"))
        state = await graph.aget_state(cfg("a"))
        assert [m.content for m in state.values["messages"]] == [SECRET, f"echo: {SECRET}", ORDER, f"echo: {ORDER}"]
        await saver.acopy_thread("a", "b")
        copied = await graph.aget_state(cfg("b"))
        assert copied.values["messages"] == state.values["messages"]
    assert SECRET.encode() not in dump(dsn, schema)


def test_equal_messages_in_two_threads_get_different_chunk_ids(dsn: str, schema: str) -> None:
    def chunk_ids(thread: str) -> set[str]:
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(sql.SQL("SELECT hash FROM {} WHERE conversation_id = %s").format(
                sql.Identifier(schema, "snapshot_chunks")), (thread,)).fetchall()
        return {r[0] for r in rows}

    with saver_for(dsn, schema, None) as plain:  # control: content hashes are shared across threads
        run(plain, "p1", turns=1)
        run(plain, "p2", turns=1)
    assert chunk_ids("p1") & chunk_ids("p2")
    with saver_for(dsn, schema, encryption()) as saver:
        run(saver, "e1", turns=2)
        run(saver, "e2", turns=2)
        assert messages(saver, "e1") == messages(saver, "e2")
        saver.copy_thread("e1", "e3")
        assert messages(saver, "e3") == messages(saver, "e1")
    ids = [chunk_ids(t) for t in ("e1", "e2", "e3")]
    assert all(ids) and not (ids[0] & ids[1]) and not (ids[0] & ids[2])


def tampered(dsn: str, schema: str, statement: str) -> None:
    assert execute(dsn, schema, statement) >= 1


def test_a_ciphertext_moved_to_another_place_fails(esaver: PostgresCheckpointer, dsn: str, schema: str) -> None:
    # Read back by another saver (another process): the writer answers get_tuple of a thread it stored
    # last from what it stored (head_cache), which no tampering in the database can change.
    with PostgresCheckpointer.from_conn_string(dsn, schema=schema, encryption=encryption()) as reader:
        _tamper_and_read(esaver, reader, dsn, schema)


def _tamper_and_read(esaver: PostgresCheckpointer, reader: PostgresCheckpointer, dsn: str, schema: str) -> None:
    run(esaver, "t1", turns=2)
    esaver.copy_thread("t1", "t2")
    for thread in ("t1", "t2"):
        assert reader.get_tuple(cfg(thread)) is not None
    # The body of the newest checkpoint of t2 replaced by t1's (same namespace and checkpoint id: only
    # the conversation differs).
    tampered(dsn, schema, "UPDATE {s}.snapshots d SET data = o.data FROM {s}.snapshots o "
                          "WHERE o.conversation_id = 't1' AND d.conversation_id = 't2' "
                          "AND o.snapshot_id = d.snapshot_id")
    with pytest.raises(IntegrityError):
        reader.get_tuple(cfg("t2"))
    run(esaver, "t3", turns=2)
    # Chunks (messages) replaced by another chunk of the same thread: every chunk but one gets that one's
    # ciphertext, so whichever chunks the newest checkpoint reads, one of them is out of place.
    tampered(dsn, schema, "UPDATE {s}.snapshot_chunks d SET data = (SELECT data FROM {s}.snapshot_chunks "
                          "WHERE conversation_id = 't3' ORDER BY hash DESC LIMIT 1) "
                          "WHERE d.conversation_id = 't3' AND d.hash <> (SELECT hash FROM {s}.snapshot_chunks "
                          "WHERE conversation_id = 't3' ORDER BY hash DESC LIMIT 1)")
    with pytest.raises(IntegrityError):
        reader.get_tuple(cfg("t3"))
    with pytest.raises(IntegrityError):
        list(reader.list(cfg("t3")))
    run(esaver, "t4", turns=1)
    # Metadata of one checkpoint replaced by another checkpoint's.
    tampered(dsn, schema, "UPDATE {s}.snapshots d SET metadata = (SELECT metadata FROM {s}.snapshots "
                          "WHERE conversation_id = 't4' AND snapshot_id < d.snapshot_id LIMIT 1) "
                          "WHERE d.conversation_id = 't4' AND d.snapshot_id = (SELECT snapshot_id FROM {s}.snapshots "
                          "WHERE conversation_id = 't4' ORDER BY snapshot_id DESC LIMIT 1)")
    with pytest.raises(IntegrityError):
        reader.get_tuple(cfg("t4"))
    with pytest.raises(IntegrityError):
        list(reader.list(cfg("t4"), filter={"source": "loop"}))


def test_a_pending_write_moved_to_another_row_fails(esaver: PostgresCheckpointer, dsn: str, schema: str) -> None:
    latest = None
    run(esaver, "w", turns=1)
    latest = esaver.get_tuple(cfg("w"))
    assert latest is not None
    config = latest.config
    esaver.put_writes(config, [("messages", [SECRET]), ("visits", ["x"])], task_id="task-1")
    got = esaver.get_tuple(config)
    assert got is not None and [w[2] for w in got.pending_writes] == [[SECRET], ["x"]]
    tampered(dsn, schema, "UPDATE {s}.snapshot_writes d SET data = (SELECT data FROM {s}.snapshot_writes "
                          "WHERE task_id = {s}.id_bytes('task-1') AND idx = 0) "
                          "WHERE d.task_id = {s}.id_bytes('task-1') AND d.idx = 1")
    with pytest.raises(IntegrityError):
        esaver.get_tuple(config)


def test_plaintext_is_refused_when_encryption_is_required(dsn: str, schema: str) -> None:
    with saver_for(dsn, schema, None) as plain:
        run(plain, "old", turns=2)
    with saver_for(dsn, schema, encryption()) as strict, pytest.raises(IntegrityError, match="not encrypted"):
        strict.get_tuple(cfg("old"))
    with saver_for(dsn, schema, encryption(required=False)) as lenient:
        assert len(messages(lenient, "old")) == 4  # readable while migrating
        run(lenient, "old", turns=1)  # new checkpoints are encrypted, next to the old plaintext ones
        lenient._stores.run(lambda s: s.rotate_keys(include_plaintext=True))
    assert SECRET.encode() not in dump(dsn, schema)
    with saver_for(dsn, schema, encryption()) as strict:
        assert len(messages(strict, "old")) == 6
        assert len(list(strict.list(cfg("old")))) == 10 + 5
    with saver_for(dsn, schema, None) as no_keys, pytest.raises(IntegrityError, match="configure"):
        no_keys.get_tuple(cfg("old"))


def test_key_rotation_re_encrypts_checkpoints(dsn: str, schema: str) -> None:
    with saver_for(dsn, schema, encryption()) as saver:
        run(saver, "r", turns=2)
        before = messages(saver, "r")
    both = encryption({"k1": K1, "k2": K2}, active="k2")
    with saver_for(dsn, schema, both) as saver:
        counts = saver._stores.run(lambda s: s.rotate_keys(batch_size=7))
        assert counts["snapshot_data"] == 10 and counts["snapshot_metadata"] == 10
        assert counts["snapshot_chunks"] > 0 and counts["snapshot_writes"] > 0
        assert set(saver._stores.run(lambda s: s.rotate_keys()).values()) == {0}  # nothing left to do
        run(saver, "r", turns=1)  # new chunk ids (keyed by k2) next to the old ones
    with saver_for(dsn, schema, encryption({"k2": K2}, active="k2")) as only_new:
        assert messages(only_new, "r")[: len(before)] == before and len(messages(only_new, "r")) == 6
        only_new.prune(["r"])
        assert len(messages(only_new, "r")) == 6


async def test_conformance_with_an_encrypting_saver(dsn: str, schema: str) -> None:
    async def factory() -> AsyncIterator[PostgresCheckpointer]:
        async with PostgresCheckpointer.from_conn_string(dsn, schema=schema, encryption=encryption()) as saver:
            yield saver

    registered = checkpointer_test(name=f"pgagentstate-encrypted-{next(_names)}")(factory)
    assert_full_conformance(await validate(registered))


def test_sync_conformance_with_an_encrypting_saver(dsn: str, schema: str) -> None:
    import asyncio

    with ConnectionPool(dsn, min_size=1, max_size=2, kwargs={"autocommit": True}) as pool:

        async def factory() -> AsyncIterator[SyncShim]:
            yield SyncShim(PostgresCheckpointer(store=StateStore(pool, schema=schema, encryption=encryption())))

        registered = checkpointer_test(name=f"pgagentstate-encrypted-sync-{next(_names)}")(factory)
        assert_full_conformance(asyncio.run(validate(registered)))


def test_delta_channels_survive_keep_latest_with_encrypted_metadata(esaver: PostgresCheckpointer) -> None:
    """keep_latest reads which delta channels to keep from the (here encrypted) metadata."""
    delta_channel_check(esaver)
