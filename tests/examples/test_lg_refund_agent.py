"""The LangGraph refund agent resumes a turn whose connection died at the worst moment: after the input
checkpoint and the input's writes were saved, before the first step's checkpoint.

That is where a terminated backend left a customer without a reply in the webhook load test (docs/reliability.md,
finding 4): ``get_state`` applies the saved writes, so the message shows in ``values`` and ``next`` is empty,
though no node ran.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph_agent import LangGraphRefundAgent

from pgagentstate import AsyncStateStore
from pgagentstate.errors import ConnectionLost

from refund.workflow import ServiceUrls

FIRST = "Oi, quero reembolso no pedido #12345"


def crash_after_input_writes(agent: LangGraphRefundAgent) -> list[str]:
    """Make the first step's checkpoint put fail like a terminated connection, once the input checkpoint's
    writes are stored. Returns a list that records each injected crash."""
    saver = agent.checkpointer
    real_aput = saver.aput
    crashes: list[str] = []

    async def aput(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if not crashes and metadata.get("source") == "loop" and metadata.get("step") == 0:
            # The input's writes are saved in the background: wait until they are, as in the failing run.
            for _ in range(200):
                saved = await saver.aget_tuple(config)
                if saved is not None and saved.pending_writes:
                    break
                await asyncio.sleep(0.01)
            crashes.append(str(config["configurable"]["checkpoint_id"]))
            raise ConnectionLost("terminating connection due to administrator command")
        return await real_aput(config, checkpoint, metadata, new_versions)

    saver.aput = aput  # type: ignore[method-assign]
    return crashes


async def test_a_turn_that_died_after_its_input_writes_is_resumed(dsn: str, schema: str) -> None:
    async with AsyncStateStore(dsn, schema=schema) as store:
        await store.setup()
        agent = LangGraphRefundAgent(store, ServiceUrls(payment="http://127.0.0.1:9", email="http://127.0.0.1:9"))
        crashes = crash_after_input_writes(agent)
        with pytest.raises(ConnectionLost):
            await agent.respond("cust-1", FIRST)
        assert len(crashes) == 1

        # The state the retry starts from: the message is visible, nothing is `next`, yet no node ran.
        config = agent.config("cust-1")
        snapshot = await agent.graph.aget_state(config)
        assert [m.content for m in snapshot.values["messages"]] == [FIRST]
        assert snapshot.next == () and snapshot.tasks

        replies = await agent.respond("cust-1", FIRST, retry=True)
        assert replies, "the retried turn must answer the customer"
        messages = (await agent.graph.aget_state(config)).values["messages"]
        assert [type(m) for m in messages[:2]] == [HumanMessage, AIMessage]
        assert [m.content for m in messages if isinstance(m, HumanMessage)] == [FIRST]  # stored once
        assert replies == [messages[-1].content]

        # A redelivery of the answered message replays the answer and runs nothing.
        before = len(messages)
        assert await agent.respond("cust-1", FIRST, retry=True) == replies
        assert len((await agent.graph.aget_state(config)).values["messages"]) == before
