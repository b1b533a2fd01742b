"""A LangGraph application can comply with an erasure request: the threads a user ran (``user_id`` in the run's
configurable values, which LangGraph copies into each checkpoint's metadata) and the PostgresStore items under
the user's namespace (``user_namespace``) belong to that user, and ``pgagentstate erase``/``export`` follow them.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from lg_graphs import three_nodes

from pgagentstate import StateStore
from pgagentstate.langgraph import PostgresCheckpointer, PostgresStore
from pgagentstate.ops import operations


def run_thread(saver: PostgresCheckpointer, thread: str, user: str | None) -> None:
    graph = three_nodes().compile(checkpointer=saver)
    configurable: dict[str, Any] = {"thread_id": thread}
    if user is not None:
        configurable["user_id"] = user
    graph.invoke({"messages": [HumanMessage(content="meu@email.com")], "visits": []}, {"configurable": configurable})
    graph.invoke({"messages": [HumanMessage(content="Produto chegou quebrado")]}, {"configurable": configurable})


def test_erase_takes_the_users_threads_and_leaves_the_others(dsn: str, schema: str) -> None:
    with PostgresCheckpointer.from_conn_string(dsn, schema=schema) as saver, StateStore(dsn, schema=schema) as core:
        run_thread(saver, "ana-1", "ana")
        run_thread(saver, "bob-1", "bob")
        run_thread(saver, "anon-1", None)

        exported = core.run(operations.export_user(core.context, "ana"))
        (conv,) = exported["conversations"]
        assert conv["id"] == "ana-1" and conv["framework"] == "langgraph" and len(conv["snapshots"]) >= 2

        erased = core.run(operations.erase_user(core.context, "ana"))
        assert erased["conversations"] == 1
        assert saver.get_tuple({"configurable": {"thread_id": "ana-1"}}) is None
        assert list(saver.list({"configurable": {"thread_id": "ana-1"}})) == []
        for other in ("bob-1", "anon-1"):
            kept = saver.get_tuple({"configurable": {"thread_id": other}})
            assert kept is not None and len(kept.checkpoint["channel_values"]["messages"]) == 4


def test_erase_takes_the_store_items_under_the_users_namespace(dsn: str, schema: str) -> None:
    with PostgresStore.from_conn_string(dsn, schema=schema, user_namespace=1) as store, \
            StateStore(dsn, schema=schema) as core:
        store.put(("memories", "ana"), "email", {"email": "meu@email.com"})
        # One batch mixing owners: each item keeps its own.
        store.batch([
            _put(("memories", "ana"), "reason", {"text": "Produto chegou quebrado"}),
            _put(("memories", "bob"), "email", {"email": "bob@email.com"}),
            _put(("memories", "ana"), "order", {"order": "12345"}),
        ])
        store.put(("shared",), "policy", {"days": 30})  # no user position: nobody's

        exported = core.run(operations.export_user(core.context, "ana"))
        assert sorted(m["key"] for m in exported["memories"]) == ["email", "order", "reason"]

        core.run(operations.erase_user(core.context, "ana"))
        assert store.search(("memories", "ana")) == []
        assert store.get(("memories", "bob"), "email") is not None
        assert store.get(("shared",), "policy") is not None


def test_user_namespace_must_be_a_position() -> None:
    with pytest.raises(TypeError, match="user_namespace"):
        PostgresStore("postgresql://unused", user_namespace="1")  # type: ignore[arg-type]


def _put(namespace: tuple[str, ...], key: str, value: dict[str, Any]) -> Any:
    from langgraph.store.base import PutOp

    return PutOp(namespace, key, value)
