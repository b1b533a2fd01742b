"""The dialogue's rules: the scripted "model" shared by the three frameworks' agents."""

from __future__ import annotations

from typing import Any

from refund.dialogue import (
    ASK_EMAIL,
    ASK_REASON,
    CHECK_POLICY,
    MEMORY_HEADER,
    NEXT_CONVERSATION,
    PROCESS_REFUND,
    SEND_CONFIRMATION,
    Msg,
    Reply,
    ToolCall,
    decide,
    facts_from,
    remembered,
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


def test_a_new_conversation_takes_the_email_from_long_term_memory() -> None:
    """The next conversation has no history; what the framework puts into the model's context from
    long-term memory gives the email (not the order or the reason: they belong to the earlier refund)."""
    text = NEXT_CONVERSATION[1]
    assert decide([Msg("customer", text)]) == Reply(ASK_EMAIL)  # without memory: the seed's failure again
    instructions = f"Você é o agente.\n{MEMORY_HEADER}\n- email: email: meu@email.com\n- order: order: 12345"
    preloaded = ("...\n<PAST_CONVERSATIONS>\nemail: meu@email.com\nreason: Produto chegou quebrado\n"
                 "</PAST_CONVERSATIONS>\n")
    for context in (instructions, preloaded):
        history = [*remembered(context), Msg("customer", text)]
        f = facts_from(history)
        assert (f.email, f.email_remembered, f.order_id, f.reason) == ("meu@email.com", True, "67890", None)
        decision = decide(history)
        assert isinstance(decision, Reply) and "meu@email.com" in decision.text
        assert decision.text.endswith(ASK_REASON)
        history.append(Msg("agent", decision.text))
        assert turn(history, "Veio faltando uma peça")[1] == [CHECK_POLICY, PROCESS_REFUND, SEND_CONFIRMATION]
        assert facts_from(history).reason == "Veio faltando uma peça"  # the question above asked for it
    assert remembered("Você é o agente.") == []


def test_what_the_customer_says_wins_over_memory_and_memory_never_ends_a_turn() -> None:
    history = [*remembered(f"{MEMORY_HEADER}\nemail: velho@email.com"), Msg("customer", "pedido #555, novo@email.com")]
    assert facts_from(history).email == "novo@email.com" and not facts_from(history).email_remembered
    # ADK puts its preloaded memories after a tool's result when the model continues a tool-call turn.
    history = [Msg("customer", "pedido #555 eu@x.com"), Msg("agent", ASK_REASON), Msg("customer", "quebrou"),
               Msg("tool_call", tool=CHECK_POLICY, args={}), Msg("tool_result", tool=CHECK_POLICY,
                                                             result=RESULTS[CHECK_POLICY]),
               *remembered("<PAST_CONVERSATIONS>\nemail: eu@x.com\n</PAST_CONVERSATIONS>")]
    assert decide(history) == ToolCall(PROCESS_REFUND, {"order_id": "555"})
