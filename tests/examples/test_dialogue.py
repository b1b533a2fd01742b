"""The dialogue's rules: the scripted "model" shared by the three frameworks' agents."""

from __future__ import annotations

from typing import Any

from refund.dialogue import (
    ASK_EMAIL,
    ASK_REASON,
    CHECK_POLICY,
    PROCESS_REFUND,
    SEND_CONFIRMATION,
    Msg,
    Reply,
    ToolCall,
    decide,
    facts_from,
)

RESULTS: dict[str, dict[str, Any]] = {
    CHECK_POLICY: {"eligible": True, "amount": 500.0, "currency": "BRL"},
    PROCESS_REFUND: {"transaction_id": "txn_1", "amount": 500.0, "currency": "BRL", "status": "refunded"},
    SEND_CONFIRMATION: {"message_id": "msg_1", "to": "meu@email.com"},
}


def turn(history: list[Msg], text: str) -> tuple[list[str], list[str]]:
    """Run one customer turn with canned tool results: (agent replies, tools called)."""
    history.append(Msg("customer", text))
    tools: list[str] = []
    while True:
        decision = decide(history)
        if isinstance(decision, Reply):
            history.append(Msg("agent", decision.text))
            return [decision.text], tools
        assert isinstance(decision, ToolCall)
        tools.append(decision.name)
        history += [Msg("tool_call", tool=decision.name, args=decision.args),
                    Msg("tool_result", tool=decision.name, result=RESULTS[decision.name])]


def test_seed_conversation_with_full_history() -> None:
    history: list[Msg] = []
    assert turn(history, "Oi, quero reembolso no pedido #12345") == ([ASK_EMAIL], [])
    assert turn(history, "meu@email.com") == ([ASK_REASON], [])
    replies, tools = turn(history, "Produto chegou quebrado")
    assert tools == [CHECK_POLICY, PROCESS_REFUND, SEND_CONFIRMATION]
    assert "txn_1" in replies[0] and "meu@email.com" in replies[0]
    replies, tools = turn(history, "Obrigado!")
    assert tools == []
    replies, tools = turn(history, "Você vai enviar email com comprovante do reembolso?")
    assert tools == []  # the receipt is not sent twice
    assert "meu@email.com" in replies[0] and "reenvie" in replies[0]
    assert facts_from(history).reason == "Produto chegou quebrado"


def test_without_the_history_the_agent_asks_the_email_again() -> None:
    """The seed's failure: a stateless agent only sees the new message."""
    only_the_new_message = [Msg("customer", "Você vai enviar email com comprovante do reembolso?")]
    assert decide(only_the_new_message) == Reply(ASK_EMAIL)
    history: list[Msg] = []
    for text in ["Oi, quero reembolso no pedido #12345", "meu@email.com", "Produto chegou quebrado"]:
        turn(history, text)
    history.append(only_the_new_message[0])
    decision = decide(history)
    assert isinstance(decision, Reply) and decision != Reply(ASK_EMAIL) and "meu@email.com" in decision.text


def test_policy_arguments_come_from_the_customer() -> None:
    history = [Msg("customer", "reembolso do pedido 777 por favor"), Msg("agent", ASK_EMAIL),
               Msg("customer", "eu@x.com.br"), Msg("agent", ASK_REASON), Msg("customer", "Veio a cor errada")]
    assert decide(history) == ToolCall(CHECK_POLICY, {"order_id": "777", "email": "eu@x.com.br",
                                                      "reason": "Veio a cor errada"})


def test_a_failed_tool_is_reported_not_retried_silently() -> None:
    history = [Msg("customer", "pedido #1234"), Msg("tool_call", tool=PROCESS_REFUND, args={"order_id": "1234"}),
               Msg("tool_result", tool=PROCESS_REFUND, result={"error": "ApiError: HTTP 500"})]
    decision = decide(history)
    assert isinstance(decision, Reply) and "HTTP 500" in decision.text


def test_ineligible_refund_is_refused() -> None:
    history = [Msg("customer", "pedido #1234"), Msg("tool_result", tool=CHECK_POLICY,
                                                    result={"eligible": False, "why": "fora do prazo"})]
    decision = decide(history)
    assert isinstance(decision, Reply) and "fora do prazo" in decision.text
