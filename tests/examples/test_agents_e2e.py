"""Each framework's refund agent end to end, in separate processes: two webhook workers behind the
round-robin proxy, the payment/email/WhatsApp services, and kill -9 at each boundary of the refund step.

One cluster per framework serves every test of that framework (starting workers is the slow part).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ex_support import BASE, RECAP, SEED, effects_for, new_customer, play_seed, start_cluster, wait_distilled

from pgagentstate import StateStore

from refund.agents import channel_conversation_id
from refund.cluster import Cluster
from refund.dialogue import ASK_EMAIL, ASK_REASON, NEXT_CONVERSATION
from refund.report import memory_namespace
from refund.webhook import channel_ref

FRAMEWORKS = ["langgraph", "adk", "openai_agents", "core"]


@pytest.fixture(scope="module", params=FRAMEWORKS)
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, dsn: str,
            module_schema: str) -> Iterator[Cluster]:
    framework = str(request.param)
    c = start_cluster(framework, tmp_path_factory.mktemp(framework), dsn, module_schema)
    yield c
    c.__exit__(None, None, None)


def assert_completed_once(cluster: Cluster, dsn: str, schema: str, customer: str, replies: list[list[str]]) -> None:
    """Exactly one refund and one email for this customer, the dialogue as in the seed, all steps done."""
    flat = [r for turn in replies for r in turn]
    assert flat.count(ASK_EMAIL) == 1 and flat.count(ASK_REASON) == 1
    assert "processado" in replies[2][0] and "meu@email.com" in replies[2][0]
    assert "meu@email.com" in replies[-1][0] and "comprovante" in replies[-1][0], replies[-1]
    assert len(effects_for(cluster, "payment", customer)) == 1
    assert len(effects_for(cluster, "email", customer)) == 1
    assert len(effects_for(cluster, "whatsapp", customer)) == len(flat)  # no reply texted twice
    with StateStore(dsn, schema=schema, tenant=f"t-{cluster.framework}", max_size=1) as store:
        cid = channel_conversation_id(customer)
        steps = store.get_workflow(cid)
        assert [(s.step, s.status) for s in steps] == [
            ("understand", "completed"), ("verify_policy", "completed"),
            ("process_refund", "completed"), ("send_confirmation", "completed")]
        assert len(store.list_events(cid)) == 2 * len(SEED)  # each message recorded once, however delivered
        marks = store.get_state(channel_ref(cid))
        assert marks is not None and all(v["status"] == "answered" for v in marks.data.values())


def test_full_dialogue(cluster: Cluster, dsn: str, module_schema: str) -> None:
    customer = new_customer()
    deliveries = play_seed(cluster, customer)
    assert all(d.status == 200 and not d.attempts for d in deliveries)
    assert {d.worker for d in deliveries} == {"w1", "w2"}  # round robin: both workers took turns
    assert_completed_once(cluster, dsn, module_schema, customer, [d.replies for d in deliveries])


@pytest.mark.parametrize("point", ["before_payment", "after_payment", "after_record"])
def test_kill_9_at_each_boundary_of_the_refund_step(cluster: Cluster, dsn: str, module_schema: str,
                                                     point: str) -> None:
    customer = new_customer()
    kills = len(cluster.kills)
    cluster.arm(point)
    deliveries = play_seed(cluster, customer)
    assert len(cluster.kills) == kills + 1 and cluster.kills[-1].endswith(f"at {point}")
    refund_turn = deliveries[2]
    assert refund_turn.attempts and "HTTP 502" in refund_turn.attempts[0]  # WhatsApp had to deliver again
    assert_completed_once(cluster, dsn, module_schema, customer, [d.replies for d in deliveries])


def test_after_a_restart_the_agent_still_knows(cluster: Cluster) -> None:
    customer = new_customer()
    play_seed(cluster, customer)
    cluster.restart()  # every worker process replaced: nothing of the conversation is left in RAM
    # (on the seed's clock: a message after 24 hours of silence would open a new conversation)
    reply = cluster.deliver(customer, RECAP, BASE + 600).replies[0]
    assert "#12345" in reply and "meu@email.com" in reply and "Produto chegou quebrado" in reply, reply
    reply = cluster.deliver(customer, "Você vai enviar email com comprovante do reembolso?", BASE + 660).replies[0]
    assert "meu@email.com" in reply and "reenvie" in reply
    assert len(effects_for(cluster, "email", customer)) == 1


def test_a_new_conversation_knows_the_email_from_long_term_memory(cluster: Cluster, dsn: str,
                                                                   module_schema: str) -> None:
    """Two days later (the 24-hour window closed) the customer writes again: a new conversation with an
    empty history, and the agent does not ask the email. It knows it from the customer's long-term memory,
    where the distillation worker (its own process) put it, read through the framework's own memory: the
    LangGraph store, ADK's PreloadMemoryTool on PostgresMemoryService, the Agents SDK's memory instructions."""
    customer = new_customer()
    play_seed(cluster, customer)
    with StateStore(dsn, schema=module_schema, tenant=f"t-{cluster.framework}", max_size=1) as store:
        wait_distilled(store, channel_conversation_id(customer))
        offset, text = NEXT_CONVERSATION
        replies = cluster.deliver(customer, text, BASE + offset).replies
        assert "meu@email.com" in replies[0] and ASK_REASON in replies[0] and ASK_EMAIL not in replies, replies
        assert len(store.list_events(channel_conversation_id(customer, 2))) == 2  # a conversation of its own
        assert len(store.list_events(channel_conversation_id(customer))) == 2 * len(SEED)
        email = store.get_memory(memory_namespace(cluster.framework, customer), "email")
        assert email is not None and email.value["text"] == "email: meu@email.com" and email.version == 1
