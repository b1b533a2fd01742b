"""The Redis tier's context cache: a turn's load served from Redis, every write version-checked in
Postgres, and whatever Redis does (flushed, killed, partitioned, stale, tampered) never a wrong or lost turn."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from pgagentstate import AsyncStateStore, Encryption, StateRef, StateStore, StaticKeyProvider, VersionConflict
from pgagentstate.redis_tier import RedisTier

from .conftest import Proxy, RedisServer

SECRET = "a test secret of this module, 32+"


def tier(url: str, **kw: object) -> RedisTier:
    kw.setdefault("secret", SECRET)
    kw.setdefault("timeout", 0.2)
    kw.setdefault("retry_after", 0.3)
    return RedisTier(url, **kw)  # type: ignore[arg-type]


@pytest.fixture
def cached(dsn: str, schema: str, redis_clean: RedisServer) -> Iterator[StateStore]:
    with StateStore(dsn, schema=schema, cache=tier(redis_clean.url)) as s:
        yield s


def new_id() -> str:
    return "conv-" + uuid.uuid4().hex[:12]


def seed(store: StateStore, cid: str, n: int = 3) -> None:
    with store.turn(cid, create=True, app="shop", user_id="u1") as t:
        t.state["email"] = "meu@email.com"
        for i in range(n):
            t.append({"role": "user", "text": f"m{i}"})


def load(store: StateStore, cid: str, recent: int = 20) -> tuple[object, ...]:
    with store.turn(cid, recent=recent) as t:
        return t._loaded.cached if t._loaded else None, t.conversation, t.events, dict(t.state), t.state_version


def counters(store: StateStore) -> dict[str, int]:
    return dict(store.stats()["cache"]["counters"])


def test_a_turn_loads_from_redis_and_sees_exactly_what_postgres_holds(cached: StateStore, store: StateStore) -> None:
    cid = new_id()
    seed(cached, cid)
    for i in range(3):
        with cached.turn(cid, recent=2) as t:
            assert t._loaded is not None and t._loaded.cached  # refreshed by the previous commit, no read
            t.append({"role": "assistant", "text": f"r{i}"})
            t.state["step"] = i
            t.set_status("waiting_customer")
        # What a store without the tier reads from Postgres, field for field.
        with cached.turn(cid, recent=2) as hit, store.turn(cid, recent=2) as truth:
            assert hit._loaded is not None and hit._loaded.cached
            assert hit.conversation == truth.conversation
            assert hit.events == truth.events
            assert hit.state == truth.state and hit.state_version == truth.state_version
    assert counters(cached)["hits"] >= 6
    # A turn asking for more events than the entry holds reads Postgres (and puts the larger window back).
    with cached.turn(cid, recent=50) as t:
        assert t._loaded is not None and not t._loaded.cached
        assert len(t.events) == 6
    with cached.turn(cid, recent=None) as t:  # type: ignore[arg-type]
        assert t._loaded is not None and t._loaded.cached  # 6 < 50: the entry holds the whole history


def test_a_stale_entry_ends_in_version_conflict_then_postgres_never_a_lost_update(
    cached: StateStore, store: StateStore
) -> None:
    cid = new_id()
    seed(cached, cid)
    load(cached, cid)
    # Another process without the tier commits: Redis still holds the older version.
    with store.turn(cid) as other:
        other.append({"role": "user", "text": "from elsewhere"})
        other.state["email"] = "new@email.com"
    with pytest.raises(VersionConflict), cached.turn(cid) as t:
        assert t._loaded is not None and t._loaded.cached and t.state["email"] == "meu@email.com"
        t.append({"role": "assistant", "text": "based on the stale context"})
    # The retry reads Postgres and commits on top of the other writer's turn.
    with cached.turn(cid) as t:
        assert t._loaded is not None and not t._loaded.cached
        assert t.state["email"] == "new@email.com"
        t.append({"role": "assistant", "text": "retried"})
    texts = [e.payload["text"] for e in store.list_events(cid)]
    assert texts == ["m0", "m1", "m2", "from elsewhere", "retried"]
    assert counters(cached)["stale"] == 1


def test_writes_outside_a_turn_drop_the_entry(cached: StateStore) -> None:
    cid = new_id()
    seed(cached, cid)
    from pgagentstate import NewEvent

    writes = [
        lambda: cached.append_events(cid, [NewEvent({"text": "appended"})]),
        lambda: cached.patch_state(StateRef.conversation(cid), {"k": 1}),
        lambda: cached.update_conversation(cid, status="completed"),
        lambda: cached.pop_event(cid),
    ]
    for write in writes:
        load(cached, cid)
        write()
        hit, *_ = load(cached, cid)
        assert hit is False  # dropped: the turn read Postgres, no conflict
    cached.delete_conversation(cid)
    with pytest.raises(Exception, match="does not exist"), cached.turn(cid):
        pass


def test_an_older_entry_never_replaces_a_newer_one(cached: StateStore, dsn: str, schema: str) -> None:
    from pgagentstate.ops import context_cache
    from pgagentstate.ops import turn as turn_ops

    cid = new_id()
    seed(cached, cid)
    old = cached.run(turn_ops.load(cached.context, cid, recent=20, state_name="state", create=None))
    with cached.turn(cid) as t:  # commits version + 1 and writes its entry
        t.append({"text": "newer"})
    # A slow process that read before that commit puts its entry afterwards: refused.
    cached.run(
        context_cache.remember(cached.context, (old.conversation, old.events, old.state), state_name="state", recent=20)
    )
    assert counters(cached)["not_stored"] == 1
    with cached.turn(cid) as t:
        assert t._loaded is not None and t._loaded.cached and t.events[-1].payload == {"text": "newer"}


def test_flushall_and_kill9_and_restart_cost_nothing_but_speed(
    cached: StateStore, store: StateStore, redis_clean: RedisServer
) -> None:
    cid = new_id()
    seed(cached, cid)
    load(cached, cid)
    redis_clean.client().flushall()
    hit, *_ = load(cached, cid)
    assert hit is False
    assert load(cached, cid)[0] is True
    # kill -9 while turns run in another thread: every turn commits, none is lost.
    done: list[int] = []
    errors: list[BaseException] = []

    def turns() -> None:
        try:
            for i in range(60):
                with cached.turn(cid) as t:
                    t.append({"text": f"t{i}"})
                    t.state["n"] = i
                done.append(i)
        except BaseException as exc:  # pragma: no cover - the test's failure
            errors.append(exc)

    worker = threading.Thread(target=turns)
    worker.start()
    time.sleep(0.05)
    redis_clean.kill9()
    time.sleep(0.3)
    assert cached.stats()["cache"]["state"] == "down"
    redis_clean.start()
    worker.join(60)
    assert errors == [] and len(done) == 60
    texts = [e.payload["text"] for e in store.list_events(cid)]
    assert texts[3:] == [f"t{i}" for i in range(60)]
    assert store.get_state(StateRef.conversation(cid)).data["n"] == 59  # type: ignore[union-attr]
    time.sleep(0.35)
    load(cached, cid)
    status = cached.stats()["cache"]
    assert status["state"] == "up" and status["counters"]["recoveries"] >= 1 and status["counters"]["errors"] >= 1
    assert load(cached, cid)[0] is True  # and it serves again


def test_a_value_edited_behind_our_back_is_detected_and_postgres_serves(
    cached: StateStore, store: StateStore, redis_clean: RedisServer
) -> None:
    cid, other = new_id(), new_id()
    seed(cached, cid)
    seed(cached, other, n=1)
    load(cached, cid)
    load(cached, other)
    r = redis_clean.client()
    assert cached.context.cache is not None
    key = cached.context.cache.name(cached.tenant, "context", cid)
    value = bytearray(r.get(key))  # type: ignore[arg-type]
    value[-20] ^= 1  # one bit of the ciphertext
    r.set(key, bytes(value))
    hit, conv, events, state, _ = load(cached, cid)
    assert hit is False and state["email"] == "meu@email.com" and len(events) == 3  # type: ignore[arg-type, index]
    assert counters(cached)["rejected"] == 1
    # Another conversation's valid entry copied over this one's key: refused too.
    other_key = cached.context.cache.name(cached.tenant, "context", other)  # type: ignore[union-attr]
    r.set(key, r.get(other_key))  # type: ignore[arg-type]
    hit, conv, *_ = load(cached, cid)
    assert hit is False and conv.id == cid  # type: ignore[attr-defined]
    # The stamp (version) in the clear edited to look newer: authentication covers it.
    good = r.get(key)
    assert good is not None
    r.set(key, b"9" * 40 + good[40:])
    assert load(cached, cid)[0] is False
    assert counters(cached)["rejected"] == 3


def test_encrypted_store_puts_nothing_in_clear_and_keys_say_nothing(
    dsn: str, schema: str, redis_clean: RedisServer
) -> None:
    enc = Encryption(StaticKeyProvider({"k1": b"k" * 32}, active="k1"))
    with StateStore(
        dsn, schema=schema, encryption=enc, tenant="acme", cache=tier(redis_clean.url, secret=None, scratchpad=True)
    ) as s:
        cid = "whatsapp-5511999999999"
        seed(s, cid)
        s.put_scratch(cid, "plan", {"next": "refund pedido 12345"}, ttl=60)
        load(s, cid)
        r = redis_clean.client()
        keys = r.keys("*")
        assert len(keys) >= 3
        dump = b"".join(k + (r.get(k) if r.type(k) == b"string" else b"".join(r.smembers(k))) for k in keys)  # type: ignore[operator]
        # Short values are looked for as JSON strings: 2 bytes such as b"u1" turn up in a few KB of
        # ciphertext about once in 20 runs (it failed CI so).
        for secret in (b"meu@email.com", b'"m0"', b"5511999999999", b"acme", b"12345", b'"plan"', b'"shop"', b'"u1"'):
            assert secret not in dump
        # The tier's keys derive from the encryption key: another key, nothing readable.
        other = Encryption(StaticKeyProvider({"k2": b"z" * 32}, active="k2"))
        with StateStore(
            dsn, schema=schema, encryption=other, tenant="acme", cache=tier(redis_clean.url, secret=None)
        ) as s2:
            assert s2.context.cache.name("acme", "context", cid) != s.context.cache.name("acme", "context", cid)  # type: ignore[union-attr]


def test_tenants_never_share_an_entry(dsn: str, schema: str, redis_clean: RedisServer) -> None:
    t = tier(redis_clean.url)
    with StateStore(dsn, schema=schema, tenant="a", cache=t) as a:
        b = a.with_tenant("b")
        seed(a, "same-id")
        seed(b, "same-id", n=1)
        load(a, "same-id")
        load(b, "same-id")
        assert a.context.cache.name("a", "context", "same-id") != b.context.cache.name("b", "context", "same-id")  # type: ignore[union-attr]
        assert len(load(a, "same-id")[2]) == 3 and len(load(b, "same-id")[2]) == 1  # type: ignore[arg-type]
        # b's entry placed under a's key is refused (the tenant is in the authenticated data).
        r = redis_clean.client()
        r.set(a.context.cache.name("a", "context", "same-id"), r.get(b.context.cache.name("b", "context", "same-id")))  # type: ignore[union-attr, arg-type]
        hit, conv, events, *_ = load(a, "same-id")
        assert hit is False and conv.tenant_id == "a" and len(events) == 3  # type: ignore[attr-defined, arg-type]


def test_reads_without_a_later_check_never_read_redis(cached: StateStore, store: StateStore) -> None:
    cid = new_id()
    seed(cached, cid)
    load(cached, cid)
    with store.turn(cid) as other:  # behind the cache's back
        other.state["email"] = "new@email.com"
        other.append({"text": "newer"})
    before = counters(cached)
    assert cached.get_state(StateRef.conversation(cid)).data["email"] == "new@email.com"  # type: ignore[union-attr]
    assert cached.list_events(cid)[-1].payload == {"text": "newer"}
    loaded = cached.load_conversation(cid, limit=5, states=[StateRef.conversation(cid)])
    assert loaded.conversation is not None and loaded.conversation.version == store.get_conversation(cid).version  # type: ignore[union-attr]
    assert counters(cached) == before  # Redis was not asked


def test_a_partition_falls_back_within_the_deadline_and_heals_without_serving_the_past(
    dsn: str, schema: str, proxy: Proxy, store: StateStore
) -> None:
    with StateStore(dsn, schema=schema, cache=tier(proxy.url, timeout=0.2, retry_after=0.5)) as s:
        cid = new_id()
        seed(s, cid)
        assert load(s, cid)[0] is True
        proxy.cut()
        started = time.monotonic()
        for i in range(5):  # the first call waits for its timeout, the next ones skip Redis
            with s.turn(cid) as t:
                t.append({"text": f"during {i}"})
        elapsed = time.monotonic() - started
        # Bounded by the tier's timeouts (a Redis GET and the failed refresh), not by the network.
        assert elapsed < 5 * 0.5 + 2 * 0.2 * 2 + 3.0
        status = s.stats()["cache"]
        assert status["state"] == "down" and status["counters"]["fallbacks"] >= 5
        assert status["last_error"]
        proxy.heal()
        time.sleep(0.6)
        # Redis still holds the entry from before the partition; the key was marked and is deleted first.
        with s.turn(cid) as t:
            assert t._loaded is not None and not t._loaded.cached
            assert t.events[-1].payload == {"text": "during 4"}
            t.append({"text": "after"})
        assert [e.payload["text"] for e in store.list_events(cid)][-6:] == [*(f"during {i}" for i in range(5)), "after"]


async def test_the_async_store_runs_the_same_cache(dsn: str, schema: str, redis_clean: RedisServer) -> None:
    async with AsyncStateStore(dsn, schema=schema, cache=tier(redis_clean.url)) as s:
        cid = new_id()
        async with s.turn(cid, create=True) as t:
            t.state["email"] = "meu@email.com"
            t.append({"text": "hi"})
        async with s.turn(cid) as t:
            assert t._loaded is not None and t._loaded.cached and t.state == {"email": "meu@email.com"}
            t.append({"text": "again"})
        redis_clean.kill9()
        async with s.turn(cid) as t:
            assert t._loaded is not None and not t._loaded.cached and len(t.events) == 2
        assert s.stats()["cache"]["state"] == "down"
