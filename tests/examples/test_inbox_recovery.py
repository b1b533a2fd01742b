"""The refund demo on a channel that never redelivers: the webhook stores each message in the durable inbox
and answers 200; the worker running the refund is killed -9 after the payment API took the money; the other
worker takes the turn over when the lease (3 s) runs out, and the refund completes exactly once — with each
framework's agent run through the inbox, in real worker processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from ex_support import SEED, effects_for, new_customer, play_seed

from pgagentstate import StateStore

from refund.agents import channel_conversation_id
from refund.cluster import Cluster
from refund.dialogue import ASK_EMAIL

FRAMEWORKS = ["core", "langgraph", "adk", "openai_agents"]
REFUND = 2  # the seed's third message starts the refund


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_worker_killed_mid_refund_without_redelivery_pays_once(
    framework: str, tmp_path: Path, dsn: str, module_schema: str
) -> None:
    tenant = f"t-inbox-{framework}"
    customer = new_customer()
    with Cluster(framework, tmp_path, dsn=dsn, schema=module_schema, tenant=tenant, crash_at="after_payment",
                 no_redelivery=True) as cluster:
        cluster.wait_ready()
        deliveries = play_seed(cluster, customer)  # each message posted once: a non-200 fails the test
        kills = list(cluster.kills)
        effects = {s: effects_for(cluster, s, customer) for s in ("payment", "email", "whatsapp")}
    assert len(kills) == 1 and kills[0].endswith("at after_payment")
    replies = [d.replies for d in deliveries]
    assert replies[0] == [ASK_EMAIL]
    assert "processado" in replies[REFUND][0] and "meu@email.com" in replies[REFUND][0], replies[REFUND]
    assert "meu@email.com" in replies[-1][0] and "comprovante" in replies[-1][0], replies[-1]
    assert len(effects["payment"]) == 1 and len(effects["email"]) == 1  # exactly once
    assert len(effects["whatsapp"]) == sum(len(r) for r in replies)  # no reply texted twice
    with StateStore(dsn, schema=module_schema, tenant=tenant, max_size=1) as store:
        cid = channel_conversation_id(customer)
        messages = store.list_messages(cid)
        assert [m.status for m in messages] == ["done"] * len(SEED)
        # The refund's turn was taken over (a worker that stalls past its 3 s lease on a loaded machine is
        # taken over too: the count of recoveries may be higher, the side effects may not).
        assert messages[REFUND].attempts >= 2
        metrics = store.inbox_metrics()
        assert metrics.recoveries >= 1 and (metrics.depth, metrics.failed) == (0, 0)
        assert [s.status for s in store.get_workflow(cid)] == ["completed"] * 4
        assert len(store.list_events(cid)) == 2 * len(SEED)  # each message recorded once
