"""How PostgresCheckpointer stores checkpoints: lists that extend a base, short versions, compressed
bodies, the opt-in message cache — and that every path that deletes or copies keeps them readable."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

import psycopg
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from lg_graphs import cfg, three_nodes
from psycopg import sql
from typing_extensions import TypedDict

from pgagentstate.langgraph import PostgresCheckpointer
from pgagentstate.ops.migrations import migrations
from pgagentstate.queries import with_schema


def blob_rows(dsn: str, schema: str, thread: str, channel: str) -> list[tuple[str, str | None, int]]:
    """(version, base, number of hashes stored) of each blob of a channel."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            sql.SQL("SELECT version, base, octet_length(chunks) / 12 FROM {}.snapshot_blobs "
                    "WHERE conversation_id = %s AND channel = %s").format(sql.Identifier(schema)),
            (thread, channel),
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def contents(saver: PostgresCheckpointer, thread: str) -> list[str]:
    state = three_nodes().compile(checkpointer=saver).get_state(cfg(thread))
    return [str(m.content) for m in state.values["messages"]]


def run_turns(saver: PostgresCheckpointer, thread: str, turns: range, run_ids: list[str] | None = None) -> None:
    graph = three_nodes().compile(checkpointer=saver)
    for turn in turns:
        config: RunnableConfig = cfg(thread)
        if run_ids is not None:
            run_ids.append(str(uuid.uuid4()))
            config = {**config, "metadata": {"run_id": run_ids[-1]}}  # as LangGraph's server records runs
        graph.invoke({"messages": [HumanMessage(f"turn {turn}")]}, config)


def expected(turns: range) -> list[str]:
    return [text for t in turns for text in (f"turn {t}", f"echo: turn {t}")]


def test_versions_sort_as_strings_in_numeric_order(saver: PostgresCheckpointer) -> None:
    versions: list[str] = []
    current: str | None = None
    for _ in range(1400):  # past 36 and 1296: the counter gets a second and a third base-36 digit
        current = saver.get_next_version(current, None)
        versions.append(current)
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert max(len(v) for v in versions) <= 11  # PostgresSaver: 49
    # Versions of threads written by earlier releases (zero-padded decimal) keep counting, and sort lower.
    old = "000000000012.1a2b3c4d"
    after = saver.get_next_version(old, None)
    assert after > old and after.startswith("ad.")  # 13 is "d" in base 36: one digit, so "a"
    # Counters from other savers (ints) continue too.
    assert saver.get_next_version(7, None).startswith("a8.")  # type: ignore[arg-type]


def test_a_growing_list_stores_each_hash_about_once(saver: PostgresCheckpointer, dsn: str, schema: str) -> None:
    run_turns(saver, "grow", range(40))
    assert contents(saver, "grow") == expected(range(40))
    rows = blob_rows(dsn, schema, "grow", "messages")
    based = [r for r in rows if r[1] is not None]
    assert based, "no list was stored as an extension of a base"
    whole = {r[0] for r in rows if r[1] is None}
    assert all(r[1] in whole for r in based)  # a base is always stored whole: reads follow one level
    stored = sum(r[2] for r in rows)
    as_lists = sum(range(1, 81))  # what storing each version's whole list of hashes would take
    assert stored < as_lists / 4


def test_a_turn_input_is_stored_deflated(saver: PostgresCheckpointer, dsn: str, schema: str) -> None:
    """A value stored as one chunk (a turn's input, {"messages": [...]}) is deflated with the preset
    dictionary, as checkpoint bodies are, and reads back the same."""
    text = "Where is my parcel? It was due on Monday and the tracking page has not changed since."
    three_nodes().compile(checkpointer=saver).invoke({"messages": [HumanMessage(text)]}, cfg("input"))
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            sql.SQL("SELECT b.type, octet_length(c.data) FROM {s}.snapshot_blobs b JOIN {s}.snapshot_chunks c "
                    "ON c.conversation_id = b.conversation_id AND c.hash = substring(b.chunks FROM 1 FOR 12) "
                    "WHERE b.conversation_id = 'input' AND b.channel = '__start__'").format(s=sql.Identifier(schema)),
        ).fetchall()
    serde = JsonPlusSerializer()
    raw = len(serde.dumps_typed({"messages": [HumanMessage(text)]})[1])
    assert rows and all(typ == "z1:msgpack" and size < raw * 0.7 for typ, size in rows), (rows, raw)
    first = list(saver.list(cfg("input")))[-1]  # the input checkpoint: its __start__ value is that blob
    (message,) = first.checkpoint["channel_values"]["__start__"]["messages"]
    assert message.content == text


def test_keep_latest_prune_keeps_the_base_of_the_latest_list(saver: PostgresCheckpointer) -> None:
    run_turns(saver, "pruned", range(21))
    saver.prune(["pruned"], strategy="keep_latest")
    assert len(list(saver.list(cfg("pruned")))) == 1
    assert contents(saver, "pruned") == expected(range(21))
    run_turns(saver, "pruned", range(21, 23))  # the next put extends what survived
    assert contents(saver, "pruned") == expected(range(23))


def test_delete_for_runs_and_copy_thread_keep_bases(saver: PostgresCheckpointer) -> None:
    runs: list[str] = []
    run_turns(saver, "src", range(20), runs)
    saver.delete_for_runs(runs[-7:])
    assert contents(saver, "src") == expected(range(13))
    saver.copy_thread("src", "dst")
    run_turns(saver, "dst", range(13, 15))
    assert contents(saver, "dst") == expected(range(15))
    run_turns(saver, "src", range(13, 14))
    assert contents(saver, "src") == expected(range(14))


def test_every_stored_checkpoint_reads_back(saver: PostgresCheckpointer) -> None:
    """list() rebuilds every checkpoint's lists from bases, chunks and compressed bodies exactly."""
    run_turns(saver, "all", range(12))
    history = list(saver.list(cfg("all")))
    assert len(history) == 12 * 5
    counts = [len(t.checkpoint["channel_values"].get("messages", [])) for t in history]
    assert counts == sorted(counts, reverse=True) and counts[0] == 24
    for t in history:
        same = saver.get_tuple(t.config)
        assert same is not None and same.checkpoint == t.checkpoint and same.metadata == t.metadata


def put_list(saver: PostgresCheckpointer, thread: str, messages: list[Any], version: str) -> None:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": messages}
    cp["channel_versions"] = {"messages": version}
    latest = saver.get_tuple(cfg(thread))
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if latest is not None:
        conf["checkpoint_id"] = latest.checkpoint["id"]
    saver.put({"configurable": conf}, cp, {"source": "loop", "step": 0 if latest else -1, "parents": {}},
              {"messages": version})


def test_message_cache_gives_the_same_checkpoints(dsn: str, schema: str) -> None:
    with PostgresCheckpointer.from_conn_string(dsn, schema=schema, message_cache=1000) as cached, \
            PostgresCheckpointer.from_conn_string(dsn, schema=schema) as plain:
        run_turns(cached, "cached", range(8))
        assert contents(plain, "cached") == contents(cached, "cached") == expected(range(8))
        run_turns(plain, "cached", range(8, 10))  # another process wrote meanwhile
        run_turns(cached, "cached", range(10, 12))
        assert contents(plain, "cached") == expected(range(12))


def test_message_cache_notices_a_reassigned_field(dsn: str, schema: str) -> None:
    m1, m2 = HumanMessage("first", id="m1"), HumanMessage("second", id="m2")
    with PostgresCheckpointer.from_conn_string(dsn, schema=schema, message_cache=1000) as cached, \
            PostgresCheckpointer.from_conn_string(dsn, schema=schema) as plain:
        put_list(cached, "edited", [m1], "a1.aaaaaa")
        m1.content = "first, edited"  # a node that edits a message instead of returning a new one
        put_list(cached, "edited", [m1, m2], "a2.aaaaaa")
        latest = plain.get_tuple(cfg("edited"))
        assert latest is not None
        assert [m.content for m in latest.checkpoint["channel_values"]["messages"]] == ["first, edited", "second"]


def concat(state: list[str], writes: Any) -> list[str]:
    return state + [x for batch in writes for x in batch]


class Log(TypedDict):
    log: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=3)]


def test_delta_channel_is_rebuilt_from_its_seed_and_writes(saver: PostgresCheckpointer) -> None:
    """A DeltaChannel stores a snapshot every few updates and writes in between: get_state rebuilds it
    through get_delta_channel_history (one query), also after keep_latest pruning."""
    def step(state: Log) -> dict[str, Any]:
        return {"log": [f"seen {len(state['log'])}"]}

    builder = StateGraph(Log)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    graph = builder.compile(checkpointer=saver)
    want: list[str] = []
    for turn in range(7):
        graph.invoke({"log": [f"in {turn}"]}, cfg("delta"))
        want += [f"in {turn}", f"seen {len(want) + 1}"]
    assert graph.get_state(cfg("delta")).values["log"] == want
    history = saver.get_delta_channel_history(config=cfg("delta"), channels=["log"])
    assert "log" in history and history["log"]["writes"] and "seed" in history["log"]
    saver.prune(["delta"], strategy="keep_latest")
    assert graph.get_state(cfg("delta")).values["log"] == want
    graph.invoke({"log": ["after"]}, cfg("delta"))
    assert graph.get_state(cfg("delta")).values["log"] == [*want, "after", f"seen {len(want) + 1}"]


def _schema_before_0015(dsn: str) -> str:
    """A schema at migration 0014 (text ids, text[] hash lists), partitioned like the test schemas."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(with_schema("CREATE TABLE {schema}.migrations (version integer PRIMARY KEY, name text NOT NULL,"
                                 " applied_at timestamptz NOT NULL DEFAULT now())", name))
        for m in migrations():
            if m.version < 15:
                conn.execute(with_schema(m.script, name))
                conn.execute(with_schema("INSERT INTO {schema}.migrations (version, name) VALUES (%s, %s)", name),
                             (m.version, m.name))
    if os.environ.get("PGAGENTSTATE_TEST_PARTITIONED", "") not in ("", "0"):  # as the schema fixture does
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
        import partition_schema

        with psycopg.connect(dsn, autocommit=True) as conn:
            partition_schema.partition(conn, name, partition_schema.BIG_TABLES, 4)
    return name


# Rows of a migrated schema written back in the layout before migration 0015, with its own functions.
_OLD_LAYOUT = """
INSERT INTO {old}.conversations SELECT * FROM {new}.conversations;
INSERT INTO {old}.snapshots (tenant_id, conversation_id, namespace, snapshot_id, parent_id, run_id, type, data,
                             metadata, channel_versions, created_at, forked)
SELECT tenant_id, conversation_id, namespace, {new}.id_text(snapshot_id), {new}.id_text(parent_id), run_id, type, data,
       metadata, channel_versions, created_at, forked FROM {new}.snapshots;
INSERT INTO {old}.snapshot_blobs (tenant_id, conversation_id, namespace, channel, version, type, chunks, base)
SELECT tenant_id, conversation_id, namespace, channel, version, type,
       ARRAY(SELECT {new}.hash_text(h) FROM {new}.hash_split(chunks) AS h), base FROM {new}.snapshot_blobs;
INSERT INTO {old}.snapshot_chunks (tenant_id, conversation_id, hash, data)
SELECT tenant_id, conversation_id, {new}.hash_text(hash), data FROM {new}.snapshot_chunks;
INSERT INTO {old}.snapshot_writes (tenant_id, conversation_id, namespace, snapshot_id, task_id, idx, channel, type,
                                   data, task_path)
SELECT tenant_id, conversation_id, namespace, {new}.id_text(snapshot_id), {new}.id_text(task_id), idx, channel, type,
       data, task_path FROM {new}.snapshot_writes;
"""


def test_migration_0015_converts_checkpoints_written_before_it(dsn: str, schema: str,
                                                               saver: PostgresCheckpointer) -> None:
    run_turns(saver, "long", range(20))  # past 16 appended messages: blobs with a base, and new bases
    head = saver.get_tuple(cfg("long"))
    assert head is not None
    # Ids that are not UUIDs: one of 16 bytes (stored with a NUL appended), shorter and longer ones.
    saver.put_writes(head.config, [("messages", ["w0"]), ("visits", ["w1"])], task_id="sixteen-chars-id")
    saver.put_writes(head.config, [("visits", ["w2"])], task_id="task-1")
    parent: RunnableConfig = cfg("odd-ids")
    for cid in ("checkpoint-16-ch", "checkpoint-16-ci", "checkpoint-17-chs", "c"):
        checkpoint = {**empty_checkpoint(), "id": cid}
        parent = saver.put(parent, checkpoint, {"source": "input", "step": -1, "parents": {}}, {})
    old = _schema_before_0015(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            script = _OLD_LAYOUT.replace("{old}", '"' + old + '"').replace("{new}", '"' + schema + '"')
            conn.execute(script)  # type: ignore[arg-type]  # test SQL, literal text
            kinds = conn.execute("SELECT data_type FROM information_schema.columns WHERE table_schema = %s"
                                 " AND table_name = 'snapshot_blobs' AND column_name = 'chunks'", (old,)).fetchone()
            assert kinds == ("ARRAY",)
        with PostgresCheckpointer.from_conn_string(dsn, schema=old) as migrated:
            migrated.setup()  # applies 0015 to the rows above
            for thread in ("long", "odd-ids"):
                before = [(t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
                          for t in saver.list(cfg(thread))]
                after = [(t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
                         for t in migrated.list(cfg(thread))]
                assert after == before and len(before) > 1
            assert [t.checkpoint["id"] for t in migrated.list(cfg("odd-ids"))] == [
                "checkpoint-17-chs", "checkpoint-16-ci", "checkpoint-16-ch", "c"]
            assert contents(migrated, "long") == expected(range(20))
            run_turns(migrated, "long", range(20, 22))  # and the thread goes on
            assert contents(migrated, "long") == expected(range(22))
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(old)))
