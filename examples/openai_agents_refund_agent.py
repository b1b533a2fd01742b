"""The refund agent on the OpenAI Agents SDK: an ``Agent`` with function tools (two of them idempotent),
memory tools, and its history in a ``PostgresSession``.

    python examples/openai_agents_refund_agent.py [DSN]

The agent, its tools and the scripted ``Model`` are ``pgagentstate.openai_agents.refund_agent`` (shipped
with the package so ``pgagentstate demo`` can run it). Here it is driven through the SDK's own
``Runner.run`` with a session and a run context.
"""

from __future__ import annotations

from _common import run
from agents import Runner

from pgagentstate import AsyncStateStore
from pgagentstate.demo.workflow import ServiceUrls
from pgagentstate.openai_agents import PostgresSession
from pgagentstate.openai_agents.refund_agent import OpenAIAgentsRefundAgent, RefundContext


async def handle(store: AsyncStateStore, urls: ServiceUrls, customer: str, text: str) -> list[str]:
    agent = OpenAIAgentsRefundAgent(store, urls).agent
    session = PostgresSession(f"openai_agents:{customer}", store=store, user_id=customer)
    context = RefundContext(user_id=customer, conversation_id=session.session_id, customer=customer)
    result = await Runner.run(agent, text, session=session, context=context)
    return [str(result.final_output)]


if __name__ == "__main__":
    run("OpenAI Agents SDK refund agent", handle)
