"""Run an Agents SDK agent for a message claimed from the core's durable inbox (``store.inbox().work``).

    async def handler(message: InboxMessage) -> Any:
        session = PostgresSession(message.conversation_id, store=store)
        result = await run_message(agent, message, session, message.message["text"])
        return str(result.final_output)

    await store.inbox(concurrency=4).work(handler)

Before the run the helper notes how many items the session holds (in the inbox conversation's scratchpad,
for a day). A turn taken over from a worker that died midway (``message.resumed``) first takes the
session back to that length — the crashed attempt's input, tool calls and outputs go, so the message is
not in the session twice — then runs again. Tools whose side effects must not repeat go through the
ledger (:func:`~pgagentstate.openai_agents.idempotent_function_tool`): the rerun gets the recorded result.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, Runner, RunResult

from pgagentstate import InboxMessage

from .session import PostgresSession

#: How long the session length noted before a turn is kept (a turn resumed later starts over).
MARK_TTL = 86400.0


def mark_key(message: InboxMessage) -> str:
    return f"inbox:{message.delivery_id}:items"


async def run_message(
    agent: Agent[Any], message: InboxMessage, session: PostgresSession, input: Any, **run_kwargs: Any
) -> RunResult:
    """``Runner.run(agent, input, session=session, **run_kwargs)`` for the claimed ``message``, resuming
    a turn whose worker died as the module's docstring says."""
    store = session.store

    async def length() -> int:  # every item, whatever the session's own limit
        return len(await store.list_event_payloads(session.session_id))

    noted = await store.get_scratch(message.conversation_id, mark_key(message)) if message.resumed else None
    if isinstance(noted, int):
        # Roll the crashed attempt back; a pop at a time, so a crash here too leaves a length to go back to.
        while await length() > noted:
            await session.pop_item()
    else:
        noted = await length()
        await store.put_scratch(message.conversation_id, mark_key(message), noted, ttl=MARK_TTL)
    return await Runner.run(agent, input, session=session, **run_kwargs)
