"""The refund as a durable workflow: steps resume where they stopped, side effects happen once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pgagentstate import AsyncStateStore, StateRef

from refund.services import Faults, Service
from refund.workflow import RefundTools, ServiceUrls


@pytest.fixture
def services(tmp_path: Path) -> Iterator[tuple[Service, Service]]:
    payment = Service("payment", tmp_path / "p.sqlite", faults=Faults(slow_seconds=1.0)).start()
    email = Service("email", tmp_path / "e.sqlite").start()
    yield payment, email
    payment.stop()
    email.stop()


@pytest.fixture
def tools(astore: AsyncStateStore, services: tuple[Service, Service]) -> RefundTools:
    payment, email = services
    return RefundTools(astore, "whatsapp:5511999990000", ServiceUrls(payment.url, email.url), http_timeout=0.4,
                       lease=1.0)


async def _steps(tools: RefundTools) -> dict[str, tuple[str, int]]:
    wf = await tools.store.get_workflow(tools.conversation_id, tools.workflow("12345"))
    return {s.step: (s.status, s.attempts) for s in wf}


async def test_payment_timeout_is_retried_at_step_3_only(tools: RefundTools, services: tuple[Service, Service]) -> None:
    payment, _ = services
    payment.faults.next.append("timeout")
    policy = await tools.check_refund_policy("12345", "meu@email.com", "Produto chegou quebrado")
    assert policy["eligible"] is True
    refund = await tools.process_refund("12345")
    assert refund["status"] == "refunded"
    steps = await _steps(tools)
    assert steps["understand"] == ("completed", 1)
    assert steps["verify_policy"] == ("completed", 1)
    assert steps["process_refund"] == ("completed", 2)  # one timeout, one retry with the same key
    assert payment.ledger.stats()["effects"] == 1
    assert payment.ledger.effects()[0]["response"]["transaction_id"] == refund["transaction_id"]
    # Steps 1-2 again (the model calls the tool twice): recorded results, nothing redone.
    await tools.check_refund_policy("12345", "meu@email.com", "Produto chegou quebrado")
    assert (await _steps(tools))["understand"] == ("completed", 1)


async def test_refund_and_email_happen_once_however_often_called(
    tools: RefundTools, services: tuple[Service, Service]
) -> None:
    payment, email = services
    await tools.check_refund_policy("12345", "meu@email.com", "quebrado")
    first = await tools.process_refund("12345")
    assert await tools.process_refund("12345") == first
    receipt = await tools.send_confirmation("12345", "meu@email.com")
    assert (await tools.send_confirmation("12345", "meu@email.com"))["message_id"] == receipt["message_id"]
    assert payment.ledger.stats()["requests"] == 1 and email.ledger.stats()["requests"] == 1
    facts = await tools.store.get_state(StateRef.conversation(tools.conversation_id, "refund"))
    assert facts is not None and facts.data["status"] == "receipt_sent" and facts.version == 4


async def test_steps_out_of_order_are_refused(tools: RefundTools, services: tuple[Service, Service]) -> None:
    assert "error" in await tools.process_refund("12345")
    assert "error" in await tools.send_confirmation("12345", "meu@email.com")
    assert services[0].ledger.stats()["requests"] == 0


async def test_payment_down_then_up(tools: RefundTools, services: tuple[Service, Service]) -> None:
    payment, _ = services
    payment.faults.next.extend(["error"] * tools.payment_attempts)
    await tools.check_refund_policy("12345", "meu@email.com", "quebrado")
    failed = await tools.process_refund("12345")
    assert "HTTP 500" in failed["error"]
    assert (await _steps(tools))["process_refund"][0] == "failed"
    assert payment.ledger.stats()["effects"] == 0
    ok = await tools.process_refund("12345")  # the next turn: step 3 again, steps 1-2 untouched
    assert ok["status"] == "refunded" and payment.ledger.stats()["effects"] == 1
    assert (await _steps(tools))["verify_policy"] == ("completed", 1)
