"""The scratchpad in Redis (a per-store choice; Postgres stays the default): Redis TTLs, sealed values,
and the Postgres scratchpad whenever Redis cannot be reached."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from pgagentstate import StateStore
from pgagentstate.redis_tier import RedisTier

from .conftest import RedisServer

SECRET = "a test secret of this module, 32+"


@pytest.fixture
def scratch_store(dsn: str, schema: str, redis_clean: RedisServer) -> Iterator[StateStore]:
    tier = RedisTier(redis_clean.url, secret=SECRET, scratchpad=True, timeout=0.2, retry_after=0.3)
    with StateStore(dsn, schema=schema, cache=tier) as s:
        yield s


def rows(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute(f'SELECT count(*) FROM "{schema}".scratchpad').fetchone()[0])  # type: ignore[index]


def test_entries_live_in_redis_with_their_ttl(scratch_store: StateStore, dsn: str, schema: str) -> None:
    s = scratch_store
    cid = uuid.uuid4().hex
    s.create_conversation(cid)
    s.put_scratch(cid, "plan", {"step": 1, "text": "\ue000 not an envelope"})
    s.put_scratch(cid, "tmp", [1, 2], ttl=0.3)
    assert s.get_scratch(cid, "plan") == {"step": 1, "text": "\ue000 not an envelope"}
    assert s.list_scratch(cid) == {"plan": {"step": 1, "text": "\ue000 not an envelope"}, "tmp": [1, 2]}
    assert rows(dsn, schema) == 0  # nothing went to Postgres
    time.sleep(0.45)
    assert s.list_scratch(cid) == {"plan": {"step": 1, "text": "\ue000 not an envelope"}}
    assert s.get_scratch(cid, "tmp") is None
    assert s.delete_scratch(cid, "plan") is True and s.delete_scratch(cid, "plan") is False
    assert s.list_scratch(cid) == {}
    # Another conversation and another tenant see nothing of it.
    s.put_scratch(cid, "plan", 1)
    assert s.list_scratch("other") == {} and s.with_tenant("t2").list_scratch(cid) == {}


def test_a_value_moved_or_edited_in_redis_is_not_served(scratch_store: StateStore, redis_clean: RedisServer) -> None:
    s = scratch_store
    s.put_scratch("c1", "a", "value of a")
    s.put_scratch("c1", "b", "value of b")
    keys = s.context.cache
    assert keys is not None
    r = redis_clean.client()
    r.set(keys.name(s.tenant, "scratch", "c1", "a"), r.get(keys.name(s.tenant, "scratch", "c1", "b")))  # type: ignore[arg-type]
    assert s.get_scratch("c1", "a") is None
    assert s.list_scratch("c1") == {"b": "value of b"}
    assert s.stats()["cache"]["counters"]["rejected"] == 2


def test_redis_down_means_the_postgres_scratchpad(
    scratch_store: StateStore, redis_clean: RedisServer, dsn: str, schema: str
) -> None:
    s = scratch_store
    s.create_conversation("c1")  # the Postgres scratchpad belongs to a stored conversation
    s.put_scratch("c1", "a", 1)
    redis_clean.kill9()
    s.put_scratch("c1", "b", 2)  # Redis unreachable: written to Postgres
    assert s.get_scratch("c1", "b") == 2
    assert rows(dsn, schema) == 1
    redis_clean.start()  # a new, empty Redis
    time.sleep(0.35)
    s.put_scratch("c1", "a", 3)
    assert s.get_scratch("c1", "a") == 3
    assert s.stats()["cache"]["state"] == "up"
