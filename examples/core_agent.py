"""The refund agent with no framework: ``store.turn`` loads the history, the dialogue's rules decide; what
distillation found in the customer's earlier conversations comes from ``store.search_memory``.

    python examples/core_agent.py [DSN]

The whole agent is :meth:`CoreRefundAgent.respond`: one ``store.turn`` per customer message (one round trip
to load the recent history, one atomic commit of everything the turn appended), the refund tools of
``refund/workflow.py`` in between. This is what ``examples/demo.py --framework core`` runs.
"""

from __future__ import annotations

from pgagentstate import AsyncStateStore

from refund.agents import thread_key, tools_for
from refund.dialogue import Msg, Reply, decide
from refund.in_process import run
from refund.workflow import ServiceUrls

MAX_STEPS = 8  # model calls per turn: the refund takes 4 (3 tools + the answer)


class CoreRefundAgent:
    """The same agent with no framework: ``store.turn`` loads the history, the dialogue rules decide.

    Its history is the conversation ``core:<customer>`` (``core:<customer>~2`` for the customer's second,
    see ``refund.agents.thread_key``); a turn commits only when it ends, so a crashed
    attempt leaves nothing behind and a retry simply runs again (the tools are durable).
    """

    framework = "core"

    def __init__(self, store: AsyncStateStore, urls: ServiceUrls) -> None:
        self.store = store
        self.urls = urls

    async def respond(self, customer: str, text: str, *, retry: bool = False, conversation: int = 1) -> list[str]:
        thread = thread_key(customer, conversation)
        tools = tools_for(self.store, self.urls, thread)
        # Long-term memory: the facts distillation found in the customer's conversations (pgagentstate.distill).
        memories = [Msg("memory", str(m.value.get("text", ""))) for m in await self.store.search_memory(
            ("memories", customer), limit=10)]
        async with self.store.turn(
            f"core:{thread}", recent=500, create=True, framework="core", channel="whatsapp", user_id=customer
        ) as turn:
            history = memories + [Msg(**e.payload) for e in turn.events]
            new = [Msg("customer", text)]
            for _ in range(MAX_STEPS):
                decision = decide(history + new)
                if isinstance(decision, Reply):
                    new.append(Msg("agent", decision.text))
                    break
                result = await tools.call(decision.name, decision.args)
                new += [
                    Msg("tool_call", tool=decision.name, args=decision.args),
                    Msg("tool_result", tool=decision.name, result=result),
                ]
            for msg in new:
                turn.append(
                    {
                        "role": msg.role,
                        "text": msg.text,
                        "tool": msg.tool,
                        "args": dict(msg.args),
                        "result": msg.result,
                    },
                    author=msg.role,
                )
            turn.set_status("waiting_customer")
        return [m.text for m in new if m.role == "agent"]

    async def aclose(self) -> None:
        return None


AGENT = CoreRefundAgent  # what refund.agents.load_agent starts in a worker


if __name__ == "__main__":
    run("Refund agent on the core only", CoreRefundAgent)
