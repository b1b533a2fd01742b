"""LangMem's manage/search memory tools and its memory manager on our PostgresStore with an index."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langmem")
from langmem import create_manage_memory_tool, create_search_memory_tool

from pgagentstate import HashEmbeddings
from pgagentstate.langgraph import PostgresStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langmem_memory.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("langmem_memory", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["langmem_memory"] = module
    spec.loader.exec_module(module)
    return module


def test_the_example_remembers_across_threads(dsn: str, schema: str) -> None:
    replies = load_example().run(dsn, schema)
    assert replies == ["Anotado: meu@email.com.", "Vou enviar o comprovante para meu@email.com."]
    with PostgresStore.from_conn_string(dsn, schema=schema) as store:
        (item,) = [i for i in store.search(("memories",)) if "meu@email.com" in str(i.value)]
        assert item.value["content"] == "customer email is meu@email.com"


def test_tools_create_update_search_delete(dsn: str, schema: str) -> None:
    index = {"dims": 128, "embed": HashEmbeddings(128), "fields": ["content"]}
    with PostgresStore.from_conn_string(dsn, schema=schema, index=index) as store:
        store.setup()
        ns = ("memories", "u1")
        manage = create_manage_memory_tool(ns, store=store)
        search = create_search_memory_tool(ns, store=store)
        created = manage.invoke({"content": "prefers pix refunds", "action": "create"})
        manage.invoke({"content": "ships to Rua Augusta 10", "action": "create"})
        memory_id = str(created).split()[-1]
        hits = search.invoke({"query": "refund payment method"})
        assert "prefers pix refunds" in str(hits).split("ships")[0]  # nearest first, by meaning
        manage.invoke({"content": "prefers boleto refunds", "action": "update", "id": memory_id})
        assert "prefers boleto refunds" in str(search.invoke({"query": "refunds"}))
        manage.invoke({"action": "delete", "id": memory_id})
        assert "boleto" not in str(search.invoke({"query": "refunds"}))
