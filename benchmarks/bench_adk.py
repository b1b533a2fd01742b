"""PostgresSessionService vs ADK's DatabaseSessionService, side by side on the same Postgres.

    python benchmarks/bench_adk.py [--rounds 300] [--events 100]

DSN: $PGAGENTSTATE_BENCH_DSN, else postgresql://postgres@127.0.0.1:5432/postgres. Each service gets a fresh
schema of its own (dropped at the end). The peer runs on SQLAlchemy's async psycopg driver
(``postgresql+psycopg://``: asyncpg is not installed here, and psycopg is what pgagentstate uses too).
Calls are interleaved (peer, ours, ours, peer, ...) so that drift of the machine affects both alike;
medians are printed with the ratio ours / peer (lower is better).

Targets: append_event <= 0.3x, create_session <= 0.4x, get_session of a 100- or 1,000-event session
(--events) <= 0.2x with the event cache (warm) and <= 0.35x without it (cold: a worker that has not seen the
session before).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import psycopg
from google.adk.events import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions import BaseSessionService, DatabaseSessionService, Session
from google.genai import types

from pgagentstate.adk import PostgresSessionService
from pgagentstate.adk._trusted import events_from_json

APP = "bench"


def event(i: int, delta: dict[str, Any] | None = None) -> Event:
    return Event(
        invocation_id=f"inv-{i // 2}",
        author="user" if i % 2 == 0 else "assistant",
        content=types.Content(
            role="user" if i % 2 == 0 else "model",
            parts=[types.Part(text=f"message {i}: " + "lorem ipsum dolor sit amet " * 4)],
        ),
        actions=EventActions(state_delta=delta or {}),
    )


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await fn()
    return time.perf_counter() - t0


async def interleave(
    rounds: int, peer: Callable[[int], Awaitable[Any]], ours: Callable[[int], Awaitable[Any]]
) -> tuple[list[float], list[float]]:
    tp: list[float] = []
    to: list[float] = []
    for i in range(rounds):
        if i % 2 == 0:
            tp.append(await timed(lambda i=i: peer(i)))
            to.append(await timed(lambda i=i: ours(i)))
        else:
            to.append(await timed(lambda i=i: ours(i)))
            tp.append(await timed(lambda i=i: peer(i)))
    return tp, to


def report(name: str, tp: list[float], to: list[float], target: float | None) -> dict[str, float]:
    mp, mo = statistics.median(tp) * 1e3, statistics.median(to) * 1e3
    ratio = mo / mp
    verdict = "" if target is None else ("  OK" if ratio <= target else f"  MISSED (target <= {target}x)")
    print(f"{name:<34} peer {mp:7.3f} ms   ours {mo:7.3f} ms   ratio {ratio:5.2f}x{verdict}")
    return {"peer_ms": mp, "ours_ms": mo, "ratio": ratio}


async def main(rounds: int, n_events: int) -> None:
    dsn = os.environ.get("PGAGENTSTATE_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    tag = uuid.uuid4().hex[:8]
    peer_schema, our_schema = f"bench_adk_peer_{tag}", f"bench_adk_ours_{tag}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{peer_schema}"')
    base = dsn.split("://", 1)[1]
    sep = "&" if "?" in base else "?"
    peer_url = f"postgresql+psycopg://{base}{sep}options={quote(f'-csearch_path={peer_schema}')}"
    peer: BaseSessionService = DatabaseSessionService(peer_url)
    ours = PostgresSessionService(dsn, schema=our_schema)
    # A worker that has not seen the session before (request 2 on server B): no validated events in memory.
    cold = PostgresSessionService(dsn, schema=our_schema, event_cache_size=0)
    try:
        await peer.prepare_tables()  # type: ignore[attr-defined]
        await ours.store()  # opens the pool and applies the migrations
        for svc in (peer, ours):  # warm up: connections, prepared statements, imports
            s = await svc.create_session(app_name=APP, user_id="warm")
            for i in range(20):
                await svc.append_event(s, event(i, {"k": i}))
            await svc.get_session(app_name=APP, user_id="warm", session_id=s.id)

        print(f"rounds={rounds}, {n_events}-event session for get_session; medians, ours/peer\n")
        results: dict[str, dict[str, float]] = {}

        tp, to = await interleave(
            rounds,
            lambda i: peer.create_session(app_name=APP, user_id=f"u{i % 10}"),
            lambda i: ours.create_session(app_name=APP, user_id=f"u{i % 10}"),
        )
        results["create_session"] = report("create_session", tp, to, 0.4)

        sp = await peer.create_session(app_name=APP, user_id="appender")
        so = await ours.create_session(app_name=APP, user_id="appender")
        tp, to = await interleave(
            rounds, lambda i: peer.append_event(sp, event(i)), lambda i: ours.append_event(so, event(i))
        )
        results["append_event"] = report("append_event", tp, to, 0.3)

        sp = await peer.create_session(app_name=APP, user_id="appender")
        so = await ours.create_session(app_name=APP, user_id="appender")
        tp, to = await interleave(
            rounds,
            lambda i: peer.append_event(sp, event(i, {"step": i})),
            lambda i: ours.append_event(so, event(i, {"step": i})),
        )
        results["append_event+session_state"] = report("append_event (+ session state delta)", tp, to, None)

        sp = await peer.create_session(app_name=APP, user_id="appender")
        so = await ours.create_session(app_name=APP, user_id="appender")
        tp, to = await interleave(
            rounds,
            lambda i: peer.append_event(sp, event(i, {"step": i, "user:seen": i, "app:hits": i})),
            lambda i: ours.append_event(so, event(i, {"step": i, "user:seen": i, "app:hits": i})),
        )
        results["append_event+3_scopes"] = report("append_event (+ session/user/app)", tp, to, None)

        sessions: dict[str, Session] = {}
        for name, svc in (("peer", peer), ("ours", ours)):
            s = await svc.create_session(app_name=APP, user_id="reader", state={"email": "a@b.c"})
            for i in range(n_events):
                await svc.append_event(s, event(i, {"n": i} if i % 10 == 0 else None))
            sessions[name] = s

        def getter(svc: BaseSessionService, s: Session) -> Callable[[int], Awaitable[Any]]:
            return lambda i: svc.get_session(app_name=APP, user_id="reader", session_id=s.id)

        tp, to = await interleave(rounds, getter(peer, sessions["peer"]), getter(ours, sessions["ours"]))
        results[f"get_session({n_events})"] = report(f"get_session ({n_events} events)", tp, to, 0.2)
        tp, to = await interleave(rounds, getter(peer, sessions["peer"]), getter(cold, sessions["ours"]))
        results[f"get_session({n_events}) cold"] = report(f"get_session ({n_events} events), cache off", tp, to, 0.35)
        got = await ours.get_session(app_name=APP, user_id="reader", session_id=sessions["ours"].id)
        assert got is not None and len(got.events) == n_events

        # The peer validates every stored event with pydantic on every load (about 16 us an event); ours
        # keeps validated events (stored events never change) and hands out copies, and validates those it
        # has not seen without pydantic's Python hooks (pgagentstate.adk._trusted).
        dumps = [e.model_dump_json(exclude_none=True) for e in got.events]

        async def validate(_: int) -> None:
            [Event.model_validate_json(d) for d in dumps]  # kept alive together, as a session keeps them

        async def ours_validate(_: int) -> None:
            events_from_json(dumps)

        tv, tt = await interleave(rounds, validate, ours_validate)
        adk_ms, ours_ms = statistics.median(tv) * 1e3, statistics.median(tt) * 1e3
        print(f"{'  ADK Event validation of them':<34} {adk_ms:7.3f} ms (the peer pays it per load)")
        print(f"{'  ours (cache off pays it)':<34} {ours_ms:7.3f} ms")
    finally:
        await peer.close()  # type: ignore[attr-defined]
        await ours.close()
        await cold.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{peer_schema}" CASCADE')
            conn.execute(f'DROP SCHEMA IF EXISTS "{our_schema}" CASCADE')


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--events", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.events))
