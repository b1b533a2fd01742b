"""The WhatsApp-shaped webhook service: two worker processes behind round robin, one killed mid-conversation."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from ex_support import BASE, SEED, effects_for, new_customer, start_cluster

from pgagentstate import StateStore

from refund.agents import channel_conversation_id
from refund.cluster import Cluster
from refund.dialogue import ASK_EMAIL


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, dsn: str, module_schema: str) -> Iterator[Cluster]:
    c = start_cluster("core", tmp_path_factory.mktemp("webhook"), dsn, module_schema)
    yield c
    c.__exit__(None, None, None)


def _post_raw(cluster: Cluster, body: bytes, signature: str) -> int:
    req = urllib.request.Request(f"{cluster.proxy.url}/webhook", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "X-Hub-Signature-256": signature})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_verification_handshake(cluster: Cluster) -> None:
    url = f"{cluster.proxy.url}/webhook?hub.mode=subscribe&hub.verify_token=pgagentstate-demo&hub.challenge=42"
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.read() == b"42"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url.replace("pgagentstate-demo", "wrong"), timeout=10)
    assert info.value.code == 403


def test_unsigned_or_malformed_webhooks_are_refused(cluster: Cluster) -> None:
    body = cluster.webhook_body(new_customer(), "oi", 1_780_000_000, "wamid.X")
    assert _post_raw(cluster, body, "sha256=" + "0" * 64) == 401
    assert effects_for(cluster, "whatsapp", "wamid.X") == []


def test_a_redelivered_message_is_handled_once(cluster: Cluster, dsn: str, module_schema: str) -> None:
    customer = new_customer()
    first = cluster.deliver(customer, SEED[0], wamid="wamid.DUP1")
    again = cluster.deliver(customer, SEED[0], wamid="wamid.DUP1")
    assert first.replies == again.replies == [ASK_EMAIL]
    assert {first.worker, again.worker} == {"w1", "w2"}  # the other worker recognised the repeat
    assert len(effects_for(cluster, "whatsapp", customer)) == 1  # the customer got one answer
    with StateStore(dsn, schema=module_schema, tenant="t-core", max_size=1) as store:
        assert len(store.list_events(channel_conversation_id(customer))) == 2


def test_worker_killed_mid_conversation(cluster: Cluster) -> None:
    customer = new_customer()
    assert cluster.deliver(customer, SEED[0]).replies == [ASK_EMAIL]
    got_email = cluster.deliver(customer, SEED[1])
    victim = next(w for w in cluster.workers if w.name == got_email.worker)
    cluster.kill(victim)  # kill -9 the worker that heard the email; the other has never seen this customer
    rest = [cluster.deliver(customer, text) for text in SEED[2:]]
    assert {d.worker for d in rest} == {w.name for w in cluster.workers if w is not victim}
    assert "meu@email.com" in rest[-1].replies[0]
    assert len(effects_for(cluster, "payment", customer)) == 1
    cluster.spawn(victim)
    cluster.wait_ready()


def test_double_texting_is_serialised(cluster: Cluster, dsn: str, module_schema: str) -> None:
    """Two messages of one conversation at once land on both workers; the turn lock orders them."""
    customer = new_customer()
    for text in SEED[:3]:
        cluster.deliver(customer, text)
    results: list[list[str]] = []
    threads = [threading.Thread(target=lambda: results.append(cluster.deliver(customer, "Obrigado!").replies))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and all(r == ["Por nada! Qualquer coisa é só chamar."] for r in results)
    with StateStore(dsn, schema=module_schema, tenant="t-core", max_size=1) as store:
        events = store.list_events(channel_conversation_id(customer))
    assert [e.seq for e in events] == list(range(1, 11))
    roles = [json.dumps(e.payload["role"]) for e in events[-4:]]
    assert roles == ['"customer"', '"agent"', '"customer"', '"agent"']  # never interleaved


def test_a_message_after_the_24_hour_window_starts_a_new_conversation(cluster: Cluster, dsn: str,
                                                                        module_schema: str) -> None:
    customer = new_customer()
    assert cluster.deliver(customer, SEED[0], BASE).replies == [ASK_EMAIL]
    assert cluster.deliver(customer, SEED[0], BASE + 24 * 3600).replies == [ASK_EMAIL]  # 24 h: still open
    assert cluster.deliver(customer, SEED[0], BASE + 48 * 3600 + 1).replies == [ASK_EMAIL]  # 24 h of silence
    with StateStore(dsn, schema=module_schema, tenant="t-core", max_size=1) as store:
        assert len(store.list_events(channel_conversation_id(customer))) == 4
        assert len(store.list_events(channel_conversation_id(customer, 2))) == 2
