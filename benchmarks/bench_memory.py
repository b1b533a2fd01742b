"""Long-term memory by meaning: pgagentstate's PostgresStore vs langgraph-checkpoint-postgres's PostgresStore
with the same index (HNSW, cosine, 384 dimensions, m=16, ef_construction=64), side by side on one Postgres
with pgvector, each at its own search default: ours ef_search scaled to the rows stored (48 at 10k, 192 at
100k), the peer pgvector's 40.

    .venv/bin/python benchmarks/bench_memory.py [--sizes 10000,100000] [--queries 200] [--rounds 3] [--reuse]

Postgres: $PGAGENTSTATE_BENCH_DSN, else the embedded server (pgvector 0.6) in ./.pgagentstate/bench-pg, whose
shared_buffers this sets to 2 GB (restarting it) so that both stores' data fits, as on a server sized for it.
Each store gets a database of its own; both load the same items (the same texts, embedded by the same
deterministic HashEmbeddings), each store's HNSW index dropped before the load and rebuilt after it (the
same way for both, with maintenance_work_mem 1GB: an in-memory build takes ~1 minute at 100k, inserting
100k rows into a live index ~4). ``--reuse`` keeps databases that already hold the n items (the load is
minutes at 100k): use it while iterating on queries; take put figures from fresh databases (see main).

The data: real embeddings cluster (texts about one subject are near each other and far from the rest), and
an ANN index's recall depends on that. Texts of random words from one big vocabulary hash to nearly
orthogonal vectors, where no ANN index finds the true neighbours (HNSW's recall@10 at 100k was 0.31 with
pgvector's defaults); so each text here is about one of TOPICS subjects: most of its words come from that
subject's own vocabulary (Zipf-distributed, as words are), a few from a shared one. A query is drawn the
same way, so its true neighbours are texts on its subject sharing its words. Everything is seeded.

Reported per size: search p50/p99 (ms) and recall@10 against exact search (pgvector's operator over every
row, no index) for each store at its default settings, and again with both at the same ``hnsw.ef_search``
(ours at the peer's 40, the peer at our default), the ratio ours/peer; put with embedding of 1 and 100 items
per batch; distillation throughput (conversations/s, deterministic extractor). Medians over --rounds.
Record the load.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import bench_distill
import psycopg
from langgraph.store.base import PutOp
from langgraph.store.postgres import PostgresStore as PeerStore

from pgagentstate import HashEmbeddings, StateStore
from pgagentstate.langgraph import PostgresStore as OurStore
from pgagentstate.queries import query

DIMS = 384
SHARED_BUFFERS_MB = 2048  # the embedded benchmark server's (see server_dsn)
TOPICS = 300  # subjects; ~330 texts each at 100k
TOPIC_WORDS = 60  # a subject's own vocabulary
SHARED_WORDS = 3_000  # words any text may use
TEXT_WORDS = (9, 3)  # a text: 9 words of its subject, 3 shared ones
QUERY_WORDS = (4, 1)
PEER_EF_SEARCH = 40  # pgvector's default, which the peer leaves as it is


def _vocabulary(rng: random.Random, n: int, taken: set[str]) -> list[str]:
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    out: list[str] = []
    while len(out) < n:
        word = "".join(rng.choices(syllables, k=rng.randint(2, 4)))
        if word not in taken:
            taken.add(word)
            out.append(word)
    return out


def _vocabularies() -> tuple[list[list[str]], list[str]]:
    rng = random.Random(17)
    taken: set[str] = set()
    return [_vocabulary(rng, TOPIC_WORDS, taken) for _ in range(TOPICS)], _vocabulary(rng, SHARED_WORDS, taken)


TOPIC_VOCAB, SHARED_VOCAB = _vocabularies()
ZIPF = [1 / (r + 1) for r in range(TOPIC_WORDS)]


def texts(n: int, seed: int = 7, words: tuple[int, int] = TEXT_WORDS) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        topic = TOPIC_VOCAB[rng.randrange(TOPICS)]
        chosen = rng.choices(topic, weights=ZIPF, k=words[0]) + rng.choices(SHARED_VOCAB, k=words[1])
        rng.shuffle(chosen)
        out.append(" ".join(chosen))
    return out


def server_dsn() -> str:
    env = os.environ.get("PGAGENTSTATE_BENCH_DSN")
    if env:
        return env
    from pathlib import Path

    from pgagentstate.embedded import embedded_dsn, stop

    path = Path(".pgagentstate/bench-pg")
    dsn = embedded_dsn(path)
    # Both stores' pages fit in shared buffers, as on a server sized for its data (100k items: ~300 MB of
    # HNSW index a store; the embedded server's default is 128 MB). At 10k it changed no put ratio.
    with psycopg.connect(dsn, autocommit=True) as conn:
        buffers = conn.execute("SELECT setting::bigint * 8192 FROM pg_settings WHERE name = 'shared_buffers'")
        too_small = buffers.fetchone()[0] < SHARED_BUFFERS_MB << 20  # type: ignore[index]
        if too_small:
            conn.execute(f"ALTER SYSTEM SET shared_buffers = '{SHARED_BUFFERS_MB}MB'")
    if too_small:  # pgserver keeps the server it started for this process: start again in a new one
        stop(path)
        os.execv(sys.executable, [sys.executable, *sys.argv])
    return dsn


def dsn_of(admin: str, name: str) -> str:
    if "/postgres?" in admin:
        return admin.replace("/postgres?", f"/{name}?", 1)
    return admin.rsplit("/", 1)[0] + "/" + name


def with_option(dsn: str, option: str) -> str:
    """``dsn`` whose sessions start with ``-c option`` (how the peer is run at another ef_search)."""
    return f"{dsn}{'&' if '?' in dsn else '?'}options=-c%20{option.replace('=', '%3D')}"


def database(admin: str, name: str, *, reuse: bool, count_sql: str, n: int) -> tuple[str, bool]:
    """(DSN, whether it holds the n items already): with ``reuse``, a database that does is kept."""
    dsn = dsn_of(admin, name)
    if reuse:
        try:
            with psycopg.connect(dsn) as conn:
                row = conn.execute(count_sql).fetchone()
            if row is not None and row[0] == n:
                return dsn, True
        except psycopg.Error:
            pass
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return dsn, False


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def load(store: Any, items: list[str], batch: int = 500) -> None:
    for i in range(0, len(items), batch):
        store.batch([PutOp(("docs",), f"d{j}", {"text": items[j]}) for j in range(i, min(i + batch, len(items)))])


def ann_indexes(dsn: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT schemaname, indexname, indexdef FROM pg_indexes "
                            "WHERE indexdef LIKE '%USING hnsw%'").fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def loaded(store: Any, dsn: str, items: list[str]) -> float:
    """Load ``items`` with the store's HNSW index dropped, then rebuild it; returns the seconds taken."""
    t = time.perf_counter()
    indexes = ann_indexes(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for schema, name, _ in indexes:
            conn.execute(f'DROP INDEX "{schema}"."{name}"')
    load(store, items)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        for _, _, definition in indexes:
            conn.execute(definition)
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - t


def ef_search_of(dsn: str, ann_limit: int = 10) -> int:
    """The hnsw.ef_search our search of ``ann_limit`` rows sets on this database (scaled to its rows)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query("memory_ef_search", "pgagentstate"),
                           {"ef_search": None, "ann_limit": ann_limit, "schema_name": "pgagentstate"}).fetchone()
    assert row is not None
    return int(row[0])


def exact_top(dsn: str, qvec: list[float], k: int = 10) -> list[str]:
    """The true nearest keys: pgvector's distance over every row of our table (no index: + 0)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT key FROM pgagentstate.memory_vectors WHERE ns_path = 'docs' || chr(31) ORDER BY "
            f"((embedding::vector({DIMS})) <=> %s::float8[]::vector({DIMS})) + 0 LIMIT %s",
            (qvec, k),
        ).fetchall()
    return [r[0] for r in rows]


def search_rounds(
    stores: dict[str, Any], queries: list[str], truth: dict[str, list[str]], rounds: int
) -> dict[str, tuple[float, float, float]]:
    """name -> (p50 ms, p99 ms, recall@10), medians over ``rounds``; the stores take turns on each query."""
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in stores}
    names = list(stores)
    for r in range(rounds):
        times: dict[str, list[float]] = {name: [] for name in stores}
        hits = dict.fromkeys(stores, 0)
        for i, q in enumerate(queries):
            shift = (i + r) % len(names)
            for name in names[shift:] + names[:shift]:
                t = time.perf_counter()
                found = stores[name].search(("docs",), query=q, limit=10)
                times[name].append((time.perf_counter() - t) * 1000)
                hits[name] += len({f.key for f in found} & set(truth[q]))
        for name in stores:
            results[name].append((pct(times[name], 50), pct(times[name], 99), hits[name] / (10 * len(queries))))
    return {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v),
                statistics.median(x[2] for x in v)) for k, v in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reuse", action="store_true", help="keep databases that hold the items already")
    parser.add_argument("--ef-search", type=int, default=None, help="our ef_search (default: MemoryIndex's)")
    parser.add_argument("--no-put", action="store_true", help="searches only")
    args = parser.parse_args()
    admin = server_dsn()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    emb = HashEmbeddings(DIMS)
    index: dict[str, Any] = {"dims": DIMS, "embed": emb, "fields": ["text"]}
    pool = {"min_size": 1, "max_size": 2}
    for n in [int(s) for s in args.sizes.split(",")]:
        ours_dsn, ours_ready = database(admin, f"bench_mem_ours_{n}", reuse=args.reuse, n=n,
                                        count_sql="SELECT count(*) FROM pgagentstate.memories "
                                                  "WHERE ns_path = 'docs' || chr(31) AND indexed")
        peer_dsn, peer_ready = database(admin, f"bench_mem_peer_{n}", reuse=args.reuse, n=n,
                                        count_sql="SELECT count(*) FROM store_vectors WHERE prefix = 'docs'")
        items = texts(n)
        # Earlier runs' puts: the search runs over the n items only, with statistics that say so, and each
        # HNSW index is rebuilt (after the same deletes and VACUUM one insert of the same vector touched
        # the same ~2,360 pages in both indexes and took 6.5 ms in one, 3.8 ms in the other; 5.6 and 5.9
        # ms rebuilt). Puts on reused databases still varied 1.3-1.9x from run to run, against 1.13-1.18x
        # on fresh ones: record put figures from fresh databases.
        for dsn, sql in ((ours_dsn, "DELETE FROM pgagentstate.memories WHERE ns_path = 'new' || chr(31)"),
                         (peer_dsn, "DELETE FROM store WHERE prefix = 'new'")):
            with psycopg.connect(dsn, autocommit=True) as conn:
                if ours_ready and peer_ready and conn.execute(sql).rowcount:
                    conn.execute("SET maintenance_work_mem = '1GB'")
                    for schema, name, _ in ann_indexes(dsn):
                        conn.execute(f'REINDEX INDEX "{schema}"."{name}"')
                    conn.execute("VACUUM ANALYZE")
        with OurStore.from_conn_string(ours_dsn, index={**index, "ef_search": args.ef_search},
                                       pool_config=pool) as ours, \
                OurStore.from_conn_string(ours_dsn, index={**index, "ef_search": PEER_EF_SEARCH},
                                          pool_config=pool) as ours_40, \
                PeerStore.from_conn_string(peer_dsn, index=index) as peer:
            ours.setup()
            peer.setup()
            if not ours_ready:
                print(f"n={n}: load ours {loaded(ours, ours_dsn, items):.1f} s (index rebuilt after the load)")
            if not peer_ready:
                print(f"n={n}: load peer {loaded(peer, peer_dsn, items):.1f} s (index rebuilt after the load)")
            ours_ef = args.ef_search or ef_search_of(ours_dsn)
            print(f"n={n}: our ef_search {ours_ef}")
            peer_ef_dsn = with_option(peer_dsn, f"hnsw.ef_search={ours_ef}")
            with PeerStore.from_conn_string(peer_ef_dsn, index=index) as peer_ef:  # type: ignore[arg-type]
                queries = texts(args.queries, seed=n, words=QUERY_WORDS)
                truth = {q: exact_top(ours_dsn, emb.embed_query(q)) for q in queries}
                stores = {"ours": ours, "peer": peer, f"ours@ef{PEER_EF_SEARCH}": ours_40,
                          f"peer@ef{ours_ef}": peer_ef}
                med = search_rounds(stores, queries, truth, args.rounds)
                for name, (p50, p99, recall) in med.items():
                    print(f"n={n} search {name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, recall@10 {recall:.3f}")
                for a, b in (("ours", "peer"), (f"ours@ef{PEER_EF_SEARCH}", "peer"), ("ours", f"peer@ef{ours_ef}")):
                    print(f"n={n} search {a}/{b}: p50 {med[a][0] / med[b][0]:.2f}x, p99 {med[a][1] / med[b][1]:.2f}x")
                if args.no_put:
                    continue
                for batch in (1, 100):
                    put: dict[str, list[float]] = {"ours": [], "peer": []}
                    # A put's time varies with the HNSW pages it touches: 210 single puts a side, for a stable median.
                    for r in range(args.rounds * (70 if batch == 1 else 10)):
                        new = texts(batch, seed=1000 + r)
                        pair: list[tuple[str, Any]] = [("ours", ours), ("peer", peer)]
                        for name, store in pair if r % 2 == 0 else pair[::-1]:
                            ops = [PutOp(("new",), f"{name}{r}-{j}-{batch}", {"text": t})
                                   for j, t in enumerate(new)]
                            put[name].append(timed(lambda s=store, o=ops: s.batch(o)))
                    m = {k: statistics.median(v) for k, v in put.items()}
                    print(f"n={n} put {batch}/batch: ours {m['ours']:.2f} ms, peer {m['peer']:.2f} ms, "
                          f"ours/peer {m['ours'] / m['peer']:.2f}x")
    if args.no_put:
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
        return
    distill_dsn, _ = database(admin, "bench_mem_distill", reuse=False, count_sql="", n=0)
    with StateStore(distill_dsn) as store:
        store.setup()
        rate = bench_distill.throughput(store)
        print(f"distill: {rate:.0f} conversations/s (one worker, deterministic extractor)")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
