"""The refund dialogue's rules: what the agent says or does next, decided from the conversation alone.

This is the deterministic "model" behind the three scripted models (LangGraph, ADK, Agents SDK). It keeps
no memory of its own: every fact (order, email, reason, what the tools returned) is read back from the
history it is given. So when a framework's persisted history is complete, the agent remembers; when it
is not (state kept in RAM, a new process), the agent asks for the email again — the seed's failure.

Each framework turns its request (messages, events, items) into a list of :class:`Msg` and its answer
back from a :class:`Reply` or a :class:`ToolCall`. :data:`SCRIPT` is what the customer writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

# (seconds after the first message on the simulated clock, what the customer writes): the seed's conversation.
SCRIPT: list[tuple[int, str]] = [
    (0, "Oi, quero reembolso no pedido #12345"),
    (40, "meu@email.com"),
    (80, "Produto chegou quebrado"),
    (110, "Obrigado!"),
    (410, "Você vai enviar email com comprovante do reembolso?"),
]
REFUND_TURN = 2  # the message that sets the refund going
# Two days later the customer writes again: WhatsApp's 24-hour window has closed, so this is a new
# conversation (a new thread or session, an empty history). The email is not in it; the agent knows it from
# the customer's long-term memory, where the distillation worker put it after the first conversation.
NEXT_CONVERSATION: tuple[int, str] = (
    2 * 86400,
    "Oi! Quero devolver mais um pedido, o #67890. Pode mandar o comprovante pro mesmo email.",
)

# Tool names: the same in every framework.
CHECK_POLICY = "check_refund_policy"
PROCESS_REFUND = "process_refund"
SEND_CONFIRMATION = "send_confirmation"
TOOL_NAMES = (CHECK_POLICY, PROCESS_REFUND, SEND_CONFIRMATION)

ASK_ORDER = "Claro! Qual é o número do pedido?"
ASK_EMAIL = "Qual é seu email?"
ASK_REASON = "Qual foi a razão da devolução?"
# Where the agents put what long-term memory holds about the customer into the model's context (ADK's
# PreloadMemoryTool uses its own <PAST_CONVERSATIONS> block).
MEMORY_HEADER = "O que você já sabe deste cliente (de conversas anteriores):"

INSTRUCTIONS = f"""Você é o agente de atendimento (WhatsApp) de uma loja e cuida de reembolsos.
Fale português do Brasil, em mensagens curtas.
1. Descubra o número do pedido, o email do cliente e a razão da devolução. Pergunte só o que falta,
   uma coisa por vez ("{ASK_EMAIL}", "{ASK_REASON}"). Nunca pergunte de novo algo que o cliente já disse.
2. Com os três, chame {CHECK_POLICY}(order_id, email, reason). Se elegível, chame {PROCESS_REFUND}(order_id)
   e depois {SEND_CONFIRMATION}(order_id, email). Essas ferramentas são idempotentes: não as chame de novo
   quando já retornaram com sucesso nesta conversa.
3. Depois, confirme o reembolso citando pedido, valor, transação e o email do comprovante.
4. Se o cliente perguntar pelo comprovante e ele já foi enviado, diga que já foi enviado para o email
   conhecido (sem pedir o email de novo), que pode ter caído no spam, e ofereça reenviar.
"""

# "memory": a line of the model's context that came from long-term memory, not from this conversation.
Role = Literal["customer", "agent", "tool_call", "tool_result", "memory"]


@dataclass(frozen=True)
class Msg:
    """One entry of the conversation, framework-neutral."""

    role: Role
    text: str = ""
    tool: str = ""
    args: Mapping[str, Any] = field(default_factory=dict)
    result: Any = None


@dataclass(frozen=True)
class Reply:
    """Say ``text`` to the customer (the turn ends)."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """Call tool ``name`` with ``args``; the result comes back as a ``tool_result`` :class:`Msg`."""

    name: str
    args: dict[str, Any]


Decision = Reply | ToolCall

_ORDER = re.compile(r"(?:#|pedido\s*(?:n[º°o.]*\s*)?)(\d{3,})", re.IGNORECASE)
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_RECEIPT_WORDS = ("comprovante", "recibo", "receipt")
_THANKS_WORDS = ("obrigad", "valeu", "thanks")
_RECAP_WORDS = ("o que você sabe", "meus dados", "resumo", "lembra")


@dataclass(frozen=True)
class Facts:
    """What the history says so far."""

    order_id: str | None = None
    email: str | None = None
    reason: str | None = None
    policy: Mapping[str, Any] | None = None
    refund: Mapping[str, Any] | None = None
    receipt: Mapping[str, Any] | None = None
    email_remembered: bool = False  # the email comes from long-term memory: not said in this conversation


_MEMORY_BLOCK = re.compile(
    rf"{re.escape(MEMORY_HEADER)}\n(.*)|<PAST_CONVERSATIONS>\n(.*?)</PAST_CONVERSATIONS>", re.DOTALL
)


def remembered(context: str) -> list[Msg]:
    """The long-term memories a framework put into the model's context (instructions, or a preloaded
    block), one ``memory`` entry per line."""
    found = _MEMORY_BLOCK.search(context)
    body = (found.group(1) or found.group(2) or "") if found else ""
    return [Msg("memory", line.strip()) for line in body.splitlines() if line.strip()]


def _ok(result: Any) -> Mapping[str, Any] | None:
    return result if isinstance(result, Mapping) and not result.get("error") else None


def facts_from(history: Sequence[Msg]) -> Facts:
    """Order, email and reason from what the customer said; outcomes from what the tools returned. The
    email may come from long-term memory when the customer did not say it in this conversation (the order
    and the reason may not: they belong to an earlier refund)."""
    order = email = reason = memory_email = None
    policy = refund = receipt = None
    asked_reason = False
    for msg in history:
        if msg.role == "memory":
            if memory_email is None and (m := _EMAIL.search(msg.text)):
                memory_email = m.group(0)
        elif msg.role == "customer":
            if asked_reason and reason is None and not _EMAIL.search(msg.text):
                reason = msg.text.strip()
            asked_reason = False
            if order is None and (m := _ORDER.search(msg.text)):
                order = m.group(1)
            if m := _EMAIL.search(msg.text):
                email = m.group(0)
        elif msg.role == "agent":
            asked_reason = msg.text.strip().endswith(ASK_REASON)
        elif msg.role == "tool_call" and msg.tool == CHECK_POLICY:
            reason = reason or str(msg.args.get("reason") or "") or None
        elif msg.role == "tool_result":
            ok = _ok(msg.result)
            if msg.tool == CHECK_POLICY and ok is not None:
                policy = ok
            elif msg.tool == PROCESS_REFUND and ok is not None:
                refund = ok
            elif msg.tool == SEND_CONFIRMATION and ok is not None:
                receipt = ok
    if email is None and memory_email is not None:
        return Facts(order, memory_email, reason, policy, refund, receipt, email_remembered=True)
    return Facts(order, email, reason, policy, refund, receipt)


def money(amount: Any, currency: str = "BRL") -> str:
    value = f"{float(amount):,.2f}".replace(",", "X").replace(".", ",").replace("X", ".")
    return f"R$ {value}" if currency == "BRL" else f"{value} {currency}"


def refund_done_text(f: Facts) -> str:
    assert f.refund is not None and f.receipt is not None
    return (
        f"Entendi. Reembolso do pedido #{f.order_id} processado: {money(f.refund.get('amount', 0))} "
        f"(transação {f.refund.get('transaction_id')}). Enviei o comprovante para {f.email}."
    )


def receipt_sent_text(f: Facts) -> str:
    assert f.receipt is not None
    return (
        f"Sim! Já enviei o comprovante do reembolso do pedido #{f.order_id} para {f.email} "
        f"(mensagem {f.receipt.get('message_id')}). Pode ter caído no spam; quer que eu reenvie?"
    )


def ask_reason_text(f: Facts) -> str:
    if f.email_remembered:  # a new conversation: say which email, so the customer knows it is not asked
        return f"Claro! O comprovante vai para {f.email}, como da outra vez. {ASK_REASON}"
    return ASK_REASON


def recap_text(f: Facts) -> str:
    status = "reembolsado" if f.refund else "em andamento"
    return f"Pedido #{f.order_id or '?'}, email {f.email or '?'}, razão: {f.reason or '?'} — reembolso {status}."


def decide(history: Sequence[Msg]) -> Decision:
    """The agent's next move, from the history alone (memories included: they may give the email)."""
    f = facts_from(history)
    said = [m for m in history if m.role != "memory"]  # a framework may put memories after a tool's result
    if not said:
        return Reply("Olá! Como posso ajudar?")
    last = said[-1]
    if last.role == "tool_result":
        return _after_tool(last, f)
    customer = next((m.text for m in reversed(said) if m.role == "customer"), "").lower()
    if any(w in customer for w in _RECAP_WORDS):
        return Reply(recap_text(f))
    if any(w in customer for w in _RECEIPT_WORDS) and f.receipt is not None:
        return Reply(receipt_sent_text(f))
    if any(w in customer for w in _THANKS_WORDS) and f.refund is not None:
        return Reply("Por nada! Qualquer coisa é só chamar.")
    if f.email is None:
        return Reply(ASK_EMAIL)
    if f.order_id is None:
        return Reply(ASK_ORDER)
    if f.reason is None:
        return Reply(ask_reason_text(f))
    if f.policy is None:
        return ToolCall(CHECK_POLICY, {"order_id": f.order_id, "email": f.email, "reason": f.reason})
    if f.refund is None:
        return ToolCall(PROCESS_REFUND, {"order_id": f.order_id})
    if f.receipt is None:
        return ToolCall(SEND_CONFIRMATION, {"order_id": f.order_id, "email": f.email})
    return Reply(refund_done_text(f))


def _after_tool(last: Msg, f: Facts) -> Decision:
    ok = _ok(last.result)
    if ok is None:
        error = last.result.get("error") if isinstance(last.result, Mapping) else last.result
        return Reply(f"Tive um problema ao processar ({error}). Vou tentar de novo assim que possível.")
    if last.tool == CHECK_POLICY:
        if not ok.get("eligible"):
            return Reply(f"Sinto muito: o pedido #{f.order_id} não é elegível para reembolso ({ok.get('why')}).")
        return ToolCall(PROCESS_REFUND, {"order_id": f.order_id})
    if last.tool == PROCESS_REFUND:
        return ToolCall(SEND_CONFIRMATION, {"order_id": f.order_id, "email": f.email})
    return Reply(refund_done_text(f))


def _schema(description: str, **props: str) -> dict[str, Any]:
    return {
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {name: {"type": "string", "description": text} for name, text in props.items()},
            "required": list(props),
        },
    }


# The tools as a real model sees them (OpenAI function format); every framework builds its tools from these.
TOOL_SPECS: dict[str, dict[str, Any]] = {
    CHECK_POLICY: _schema(
        "Registra o pedido, o email e a razão e verifica se o reembolso é permitido pela política.",
        order_id="número do pedido, só dígitos",
        email="email do cliente",
        reason="razão da devolução, nas palavras do cliente",
    ),
    PROCESS_REFUND: _schema("Paga o reembolso do pedido (idempotente).", order_id="número do pedido"),
    SEND_CONFIRMATION: _schema(
        "Envia o comprovante do reembolso por email (idempotente).", order_id="número do pedido", email="email"
    ),
}


def openai_tools() -> list[dict[str, Any]]:
    """:data:`TOOL_SPECS` in the Chat Completions ``tools`` format."""
    return [{"type": "function", "function": {"name": name, **spec}} for name, spec in TOOL_SPECS.items()]
