"""Run an ADK agent for a message claimed from the core's durable inbox (``store.inbox().work``).

    async def handler(message: InboxMessage) -> Any:
        content = types.Content(role="user", parts=[types.Part(text=message.message["text"])])
        events = await run_message(runner, message, content, user_id=message.message["user"])
        return [e.content.parts[0].text for e in events if e.is_final_response() and e.content]

    await store.inbox(concurrency=4).work(handler)

The session is the message's conversation unless ``session_id`` names another (created if missing). Each
run carries the delivery id in its events' ``custom_metadata`` (``inbox_delivery``, through
``RunConfig.custom_metadata``). A turn taken over from a worker that died (``message.resumed``) finds
its user event by that id: when the invocation had reached its final response (only recording the outcome
was lost) its events are returned as they are; otherwise the session is rewound to before the invocation
(``Runner.rewind_async``: the message is not in the session twice) and the run starts again. Tools whose
side effects must not repeat go through the core's ledger (``store.run_once``): the rerun replays them.
"""

from __future__ import annotations

from google.adk.agents.run_config import RunConfig
from google.adk.events import Event
from google.adk.runners import Runner
from google.genai import types

from pgagentstate import InboxMessage

#: The ``custom_metadata`` key naming the inbox delivery an invocation belongs to.
DELIVERY_KEY = "inbox_delivery"


async def run_message(
    runner: Runner,
    message: InboxMessage,
    new_message: types.Content,
    *,
    user_id: str,
    session_id: str | None = None,
    run_config: RunConfig | None = None,
) -> list[Event]:
    """``runner.run_async`` for the claimed ``message`` (see the module's docstring); the events of the run."""
    sid = session_id or message.conversation_id
    service = runner.session_service
    session = await service.get_session(app_name=runner.app_name, user_id=user_id, session_id=sid)
    if session is None:
        await service.create_session(app_name=runner.app_name, user_id=user_id, session_id=sid)
    elif message.resumed:
        starts = [
            i
            for i, e in enumerate(session.events)
            if e.author == "user" and (e.custom_metadata or {}).get(DELIVERY_KEY) == message.delivery_id
        ]
        if starts:
            invocation = session.events[starts[-1]].invocation_id
            after = [e for e in session.events[starts[-1] + 1 :] if e.invocation_id == invocation]
            # Finished: a final response that is an answer, not the error event a failed run leaves behind.
            if any(e.author != "user" and e.is_final_response() and not e.error_code and e.content for e in after):
                return after
            await runner.rewind_async(user_id=user_id, session_id=sid, rewind_before_invocation_id=invocation)
    config = run_config.model_copy(deep=True) if run_config is not None else RunConfig()
    config.custom_metadata = {**(config.custom_metadata or {}), DELIVERY_KEY: message.delivery_id}
    return [
        event
        async for event in runner.run_async(user_id=user_id, session_id=sid, new_message=new_message, run_config=config)
    ]
