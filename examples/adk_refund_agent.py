"""The refund agent on Google ADK: an ``LlmAgent`` with function tools, sessions and memory in Postgres.

    python examples/adk_refund_agent.py [DSN]

The agent, its tools and the scripted ``BaseLlm`` are ``pgagentstate.adk.refund_agent`` (shipped with the
package so ``pgagentstate demo`` can run it). Here it is driven through ADK's own ``Runner.run_async``
with ``PostgresSessionService`` and ``PostgresMemoryService``.
"""

from __future__ import annotations

from _common import run
from google.genai import types

from pgagentstate import AsyncStateStore
from pgagentstate.adk.refund_agent import APP_NAME, AdkRefundAgent
from pgagentstate.demo.workflow import ServiceUrls


async def handle(store: AsyncStateStore, urls: ServiceUrls, customer: str, text: str) -> list[str]:
    agent = AdkRefundAgent(store, urls)  # a new Runner: the session lives in Postgres
    runner, sessions = agent.runner, agent.sessions
    if await sessions.get_session(app_name=APP_NAME, user_id=customer, session_id=customer) is None:
        await sessions.create_session(app_name=APP_NAME, user_id=customer, session_id=customer)
    replies = []
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for event in runner.run_async(user_id=customer, session_id=customer, new_message=message):
        if event.is_final_response() and event.content and event.content.parts:
            replies.append("".join(p.text or "" for p in event.content.parts))
    return replies


if __name__ == "__main__":
    run("Google ADK refund agent", handle)
