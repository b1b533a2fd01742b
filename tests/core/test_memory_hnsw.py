"""A search by meaning under a namespace prefix, without filters (LangGraph's search by default), is one
prepared statement through the HNSW index (memory_search_hnsw): one plan for every call, the index's
candidates set in the statement itself. Plan shapes and row counts only, never timings (docs/benchmarks.md).
Needs pgvector: the embedded server has it; PG15 here has not (every search there is exact)."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgagentstate import HashEmbeddings, MemoryIndex, StateStore
from pgagentstate.codec import DEFAULT_LIMITS
from pgagentstate.embedding import Embedder
from pgagentstate.ops import memory as memory_ops
from pgagentstate.ops.base import Ctx, Tx
from pgagentstate.ops.memory import pattern_params
from pgagentstate.ops.memory_index import VectorMode, VectorSettings, _subs
from pgagentstate.queries import query

DIMS = 32


def index(ef_search: int = 128) -> MemoryIndex:
    return MemoryIndex(dims=DIMS, embed=HashEmbeddings(DIMS), fields=["text"], ef_search=ef_search)


def first_tx(mode: VectorMode, **search: Any) -> Tx:
    vs = VectorSettings(index(), Embedder(index(), asynchronous=False), "s")
    vs.mode = mode
    ctx = Ctx(tenant="default", limits=DEFAULT_LIMITS, memory_index=vs)
    args: dict[str, Any] = {"filter": None, "user_id": None, "limit": 10, "offset": 0, "refresh_ttl": True}
    op = memory_ops.search(ctx, ("docs",), query="refund parcel", mode="vector", **{**args, **search})
    tx = next(op)
    while not isinstance(tx, Tx):  # the query's embedding first
        tx = op.send([0.1] * DIMS)
    return tx


ANN = VectorMode(pgvector="0.6.0", available=True, halfvec=False, ann_index=True)


def test_a_search_under_a_prefix_is_one_statement_that_may_be_prepared() -> None:
    tx = first_tx(ANN)
    assert [(s.name, s.custom_plan) for s in tx.stmts] == [("memory_search_hnsw", False)]
    assert tx.stmts[0].params["ef_search"] == 128 and tx.stmts[0].params["ann_limit"] == 10


@pytest.mark.parametrize("search", [{"filter": {"kind": "fact"}}, {"user_id": "u1"}], ids=["filter", "user_id"])
def test_a_filtered_search_is_planned_with_its_values(search: dict[str, Any]) -> None:
    tx = first_tx(ANN, **search)
    assert [(s.name, s.custom_plan) for s in tx.stmts] == [
        ("memory_ann_settings", False),
        ("memory_search_vector", True),
    ]


def test_without_an_ann_index_the_search_is_exact() -> None:
    tx = first_tx(VectorMode(pgvector=None, available=False, halfvec=False, ann_index=False))
    assert [s.name for s in tx.stmts] == ["memory_search_vector"]


def pgvector(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    return bool(row and row[0])


@pytest.fixture
def store(dsn: str, schema: str) -> Any:
    if not pgvector(dsn):
        pytest.skip("no pgvector on this server: every search is exact")
    with StateStore(dsn, schema=schema, memory_index=index(ef_search=100)) as s:
        s.setup()
        s.put_memories([(("docs",), f"d{i}", {"text": f"refund parcel {i} note {i % 13}"}) for i in range(150)])
        s.put_memories([(("other",), f"o{i}", {"text": f"refund parcel {i}"}) for i in range(50)])
        with psycopg.connect(dsn, autocommit=True) as conn:  # the statistics a server has after autovacuum
            for table in ("memories", "memory_vectors"):
                conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, table)))
        yield s


def statement(schema: str, ef_search: int) -> tuple[bytes, dict[str, Any]]:
    """memory_search_hnsw as the store sends it, and its parameters for a page of 60 under ("docs",)."""
    vs = VectorSettings(index(ef_search), Embedder(index(ef_search), asynchronous=False), schema)
    mode = VectorMode(pgvector="0.6.0", available=True, halfvec=False, ann_index=True)
    text = query("memory_search_hnsw", schema, _subs(vs, mode))
    qvec = HashEmbeddings(DIMS).embed_query("refund parcel 7")
    params = {
        **pattern_params(("docs",), None),
        "tenant": "default",
        "qvec": qvec,
        "qnorm": 1.0,
        "ann_limit": 60,
        "depth": 60,
        "user_id": None,
        "filter": None,
        "limit": 60,
        "offset": 0,
        "refresh": False,
        "ef_search": ef_search,
        "schema_name": schema,
    }
    return text, params


def index_rows(plan: Any) -> list[int]:
    """Rows each HNSW index scan of a JSON plan returned."""
    out = []
    if "hnsw" in plan.get("Index Name", ""):
        out.append(plan["Actual Rows"])
    for child in plan.get("Plans", []):
        out += index_rows(child)
    return out


def test_the_statement_sets_the_candidates_of_its_own_scan(store: StateStore, dsn: str, schema: str) -> None:
    """A page of 60 needs more than pgvector's default 40 candidates: the statement sets hnsw.ef_search
    (100 here) for its own transaction before the scan reads it, and the session keeps its own value."""
    text, params = statement(schema, 100)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET hnsw.ef_search = 40")
        # 200 rows: sorting them all would be cheaper than the index
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET enable_bitmapscan = off")
        (plan,) = conn.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " + text, params).fetchone()  # type: ignore[misc]
        plan = plan if isinstance(plan, list) else json.loads(plan)
        rows = index_rows(plan[0]["Plan"])
        assert rows and rows[0] > 40, rows  # 40: the session's value reached the scan
        assert conn.execute("SHOW hnsw.ef_search").fetchone() == ("40",)
        # ... and the page comes from the index, not from the exact ranking.
        found = conn.execute(text, params).fetchall()
        assert len(found) == 60


def test_its_generic_plan_walks_the_index_and_looks_up_each_candidate(dsn: str, schema: str, store: Any) -> None:
    """Planned once for any values, the statement still walks the HNSW index and checks each candidate by
    its primary key (a generic plan of a filtered scan guessed the namespace holds 0.5% of the rows and
    ranked every row instead)."""
    text, params = statement(schema, 100)
    names: list[str] = []

    def dollar(m: re.Match[bytes]) -> bytes:
        if m.group(1).decode() not in names:
            names.append(m.group(1).decode())
        return f"${names.index(m.group(1).decode()) + 1}".encode()

    sql_text = re.sub(rb"%\((\w+)\)[sb]", dollar, text)
    with psycopg.connect(dsn) as conn:
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.execute("SET LOCAL enable_seqscan = off")  # a few hundred rows: sorting them all would be cheaper
        conn.execute("SET LOCAL enable_bitmapscan = off")
        conn.execute(b"PREPARE hnsw_probe AS " + sql_text)
        row = conn.execute(
            "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = 'hnsw_probe'"
        ).fetchone()
        assert row is not None
        cur = psycopg.ClientCursor(conn)
        cur.execute(
            "EXPLAIN EXECUTE hnsw_probe(" + ", ".join(f"%s::{t}" for t in row[0]) + ")", [params[n] for n in names]
        )
        plan = "\n".join(r[0] for r in cur.fetchall())
        conn.rollback()
    assert "$1" in plan or "$2" in plan, plan  # a generic plan indeed
    assert re.search(r"Index Scan using memory_vectors_hnsw\w* on memory_vectors v\b", plan), plan
    assert re.search(r"Index Cond: .*\(ns_path = v\.ns_path\).*\(key = v\.key\)", plan), plan


def test_a_small_namespace_and_another_tenant_under_the_same_prefix(store: StateStore, dsn: str, schema: str) -> None:
    """The index's candidates are mostly items outside the namespace searched, or another tenant's: the
    search ranks the namespace's items exactly instead, and never returns another tenant's."""
    with StateStore(dsn, schema=schema, tenant="t2", memory_index=index(ef_search=100)) as t2:
        t2.put_memories([(("docs",), f"t2-{i}", {"text": f"refund parcel {i}"}) for i in range(30)])
        t2.put_memories([(("tiny",), "only", {"text": "a lonely note about the weather"})])
        assert [m.key for m in t2.search_memory(("tiny",), query="refund parcel 7", mode="vector")] == ["only"]
        found = t2.search_memory(("docs",), query="refund parcel 7", mode="vector", limit=50)
        assert sorted(m.key for m in found) == sorted(f"t2-{i}" for i in range(30))
    mine = store.search_memory(("docs",), query="refund parcel 7", mode="vector", limit=200)
    assert len(mine) == 150 and all(m.key.startswith("d") for m in mine)


def ef_search(dsn: str, schema: str, ef_search: int | None, ann_limit: int) -> str:
    with psycopg.connect(dsn) as conn:
        params = {"ef_search": ef_search, "ann_limit": ann_limit, "schema_name": schema}
        row = conn.execute(query("memory_ef_search", "unused"), params).fetchone()
    assert row is not None
    return str(row[0])


def test_ef_search_is_the_index_s_or_scales_with_the_rows_stored(dsn: str, schema: str) -> None:
    """By default a search examines 48 x (rows / 10,000)^0.6 candidates, at least pgvector's 40 and at
    least the rows its page needs, at most pgvector's 1000; an index that names ef_search gets it."""
    own = f"{schema}_ef"  # a table of plain rows named as ours
    table = sql.Identifier(own, "memory_vectors")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(own)))
        conn.execute(sql.SQL("CREATE TABLE {} (n int)").format(table))
        conn.execute(sql.SQL("ANALYZE {}").format(table))
        assert ef_search(dsn, own, None, 10) == "40"  # an empty table
        assert ef_search(dsn, own, None, 60) == "60"
        assert ef_search(dsn, own, 100, 10) == "100"
        assert ef_search(dsn, own, 100, 5000) == "1000"
        conn.execute(sql.SQL("INSERT INTO {} SELECT generate_series(1, 40000)").format(table))
        conn.execute(sql.SQL("ANALYZE {}").format(table))
        assert ef_search(dsn, own, None, 10) == "111"  # 48 x 4^0.6 = 110.3
        assert ef_search(dsn, own, 64, 10) == "64"
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(own)))
