"""The refund agent as an OpenAI Agents SDK ``Agent`` with function tools, run with a
:class:`~pgagentstate.openai_agents.PostgresSession` (the conversation), the adapter's memory tools and
instructions (long-term memory: the facts pgagentstate's distillation worker found in the customer's earlier
conversations, put into the instructions by ``memory_instructions``) and idempotent tools
(``idempotent_function_tool``).

    python examples/openai_agents_agent.py [DSN]

The model is ``ScriptedRefundModel`` (``refund/scripted_openai_agents.py``: the shared dialogue rules as a
``Model``), or an OpenAI model when ``OPENAI_API_KEY`` is set. The tools are the durable refund workflow of
``refund/workflow.py``; the payment and email tools are also idempotent per order at the tool level, so a
replayed tool call returns the recorded outcome without touching the workflow at all.

A turn whose worker died is rolled back with the session's ``pop_item`` (the SDK's own rewind) to before
the customer's message, then run again: the tools' steps and ledger make the second run reuse what the
first one paid.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents import Agent, FunctionTool, Model, RunContextWrapper, Runner, function_tool
from agents.tool_context import ToolContext

from pgagentstate import AsyncStateStore
from pgagentstate.openai_agents import (
    PostgresSession,
    StateContext,
    idempotent_function_tool,
    memory_instructions,
    memory_tools,
)

from refund.agents import thread_key, tools_for, use_real_model
from refund.dialogue import INSTRUCTIONS, MEMORY_HEADER
from refund.in_process import run
from refund.scripted_openai_agents import ScriptedRefundModel, text_of, to_dialogue
from refund.workflow import ServiceUrls


@dataclass
class RefundContext(StateContext):
    """The run context: who the customer is and which of their conversations this is (the adapter's tools
    read ``user_id`` and ``conversation_id``)."""

    customer: str = ""
    thread: str = ""  # refund.agents.thread_key


class ToolFailed(Exception):
    """A refund tool failed; the SDK reports the message (JSON) to the model as the tool's output."""


def make_tools(store: AsyncStateStore, urls: ServiceUrls, *, lease: float = 2.0) -> list[FunctionTool]:
    """The refund tools, plus the adapter's ``remember``/``recall``/``forget`` memory tools."""

    # Results go back to the model as JSON text (the SDK would otherwise send ``str(dict)``).
    @function_tool
    async def check_refund_policy(ctx: RunContextWrapper[RefundContext], order_id: str, email: str,
                                  reason: str) -> str:
        """Registra o pedido, o email e a razão e verifica se o reembolso é permitido pela política."""
        return json.dumps(await tools_for(store, urls, ctx.context.thread).call(
            "check_refund_policy", {"order_id": order_id, "email": email, "reason": reason}))

    def per_order(what: str) -> Any:
        def key(tool_context: ToolContext[Any], arguments: dict[str, Any]) -> str:
            return f"openai_agents/{tool_context.context.customer}/{what}/{arguments.get('order_id')}"
        return key

    async def process_refund(ctx: RunContextWrapper[RefundContext], order_id: str) -> str:
        """Paga o reembolso do pedido (idempotente)."""
        result = await tools_for(store, urls, ctx.context.thread).call("process_refund", {"order_id": order_id})
        if "error" in result:
            raise ToolFailed(json.dumps(result))  # not recorded by the idempotent tool: a later call retries
        return json.dumps(result)

    async def send_confirmation(ctx: RunContextWrapper[RefundContext], order_id: str, email: str) -> str:
        """Envia o comprovante do reembolso por email (idempotente)."""
        result = await tools_for(store, urls, ctx.context.thread).call(
            "send_confirmation", {"order_id": order_id, "email": email})
        if "error" in result:
            raise ToolFailed(json.dumps(result))
        return json.dumps(result)

    return [
        check_refund_policy,
        idempotent_function_tool(store, process_refund, key=per_order("refund"), lease=lease),
        idempotent_function_tool(store, send_confirmation, key=per_order("receipt"), lease=lease),
        *memory_tools(store),
    ]


def _is_user(item: Any, text: str) -> bool:
    return isinstance(item, Mapping) and item.get("role") == "user" and text_of(item.get("content")) == text


class OpenAIAgentsRefundAgent:
    """The refund ``Agent``; one ``PostgresSession`` per WhatsApp conversation (``openai_agents:<customer>``,
    then ``openai_agents:<customer>~2``...)."""

    framework = "openai_agents"

    def __init__(self, store: AsyncStateStore, urls: ServiceUrls, model: Model | str | None = None) -> None:
        if model is None:
            if use_real_model("OPENAI_API_KEY"):
                model = os.environ.get("PGAGENTSTATE_DEMO_OPENAI_MODEL", "gpt-4.1-mini")
            else:
                from agents import set_tracing_disabled

                set_tracing_disabled(True)  # nowhere to send traces without a key
                model = ScriptedRefundModel()
        self.store = store
        self.agent: Agent[RefundContext] = Agent(
            name="refund_agent", model=model, tools=list(make_tools(store, urls)),
            instructions=memory_instructions(store, INSTRUCTIONS, header=MEMORY_HEADER),
        )

    def session(self, customer: str, conversation: int = 1) -> PostgresSession:
        return PostgresSession(f"openai_agents:{thread_key(customer, conversation)}", store=self.store,
                               user_id=customer, channel="whatsapp", app="refunds")

    async def respond(self, customer: str, text: str, *, retry: bool = False, conversation: int = 1) -> list[str]:
        session = self.session(customer, conversation)
        if retry:
            items = await session.get_items()
            users = [i for i, item in enumerate(items) if _is_user(item, text)]
            if users:
                after = items[users[-1] + 1:]
                answered = [t for m in to_dialogue(after) if m.role == "agent" and (t := m.text)]
                if answered and isinstance(after[-1], Mapping) and after[-1].get("role") == "assistant":
                    return answered  # the turn finished; only its bookkeeping was lost
                for _ in range(len(items) - users[-1]):  # roll the crashed turn back, message included
                    await session.pop_item()
        context = RefundContext(user_id=customer, conversation_id=session.session_id, customer=customer,
                                thread=thread_key(customer, conversation))
        result = await Runner.run(self.agent, text, session=session, context=context, max_turns=10)
        replies = [m.text for m in to_dialogue([i.to_input_item() for i in result.new_items]) if m.role == "agent"]
        return replies or [str(result.final_output)]

    async def aclose(self) -> None:
        return None


AGENT = OpenAIAgentsRefundAgent  # what refund.agents.load_agent starts in a worker


if __name__ == "__main__":
    run("OpenAI Agents SDK refund agent", OpenAIAgentsRefundAgent)
