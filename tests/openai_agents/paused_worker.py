"""One process of the paused-run tests: ``python paused_worker.py PHASE DSN SCHEMA CONVERSATION COUNTER_FILE``.

Phases: ``pause`` (run until the refund needs approval, save the paused run), ``approve`` (claim, approve,
finish the run), ``approve-crash`` (claim, approve, pay, then die before the run finishes),
``reclaim`` (take over a dead claim and finish). Prints one JSON line. Payments are appended to
COUNTER_FILE, so the test counts them across processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from pgagentstate import AsyncStateStore
from pgagentstate.openai_agents import PausedRuns, PostgresSession, idempotent_function_tool


def build_agent(store: AsyncStateStore, counter: Path, model: ScriptedModel) -> Agent[Any]:
    @idempotent_function_tool(store, needs_approval=True)
    async def refund(order_id: str, amount: float) -> str:
        """Refund an order (a human must approve)."""
        with counter.open("a") as f:
            f.write(f"{os.getpid()} {order_id} {amount}\n")
        return f"refunded {amount:.2f} for {order_id}"

    return Agent(name="support", instructions="Refund broken orders.", tools=[refund], model=model)


async def main(phase: str, dsn: str, schema: str, cid: str, counter: Path) -> dict[str, Any]:
    set_tracing_disabled(True)
    async with AsyncStateStore(dsn, schema=schema) as store:
        runs = PausedRuns(store)
        session = PostgresSession(cid, store=store)
        if phase == "pause":
            model = ScriptedModel([[function_call("refund", {"order_id": "12345", "amount": 19.9},
                                                  call_id="call_refund")]])
            agent = build_agent(store, counter, model)
            result = await Runner.run(agent, "Produto chegou quebrado, quero reembolso do #12345", session=session,
                                      context={"user_id": "cust-42", "conversation_id": cid})
            version = await runs.save(cid, result, user_id="cust-42")
            return {"version": version, "interruptions": len(result.interruptions), "pending": await runs.pending(cid)}

        if phase == "approve-crash":
            model = ScriptedModel([RuntimeError("process died right after paying")])
        else:
            model = ScriptedModel([[assistant_message("Reembolso aprovado e feito.")]])
        agent = build_agent(store, counter, model)
        paused = await runs.claim(cid, agent, reclaim_after=0 if phase == "reclaim" else None)
        for item in paused.interruptions:
            paused.state.approve(item)
        try:
            result = await Runner.run(agent, paused.state, session=session)
        except RuntimeError:
            os._exit(3)  # a crash: no cleanup, the claim stays behind
        version = await runs.finish(cid, result, version=paused.version)
        conv = await store.get_conversation(cid)
        return {"final_output": result.final_output, "version": version, "status": conv.status if conv else None,
                "context": paused.state._context.context if paused.state._context else None}


if __name__ == "__main__":
    phase, dsn, schema, cid, counter = sys.argv[1:6]
    print(json.dumps(asyncio.run(main(phase, dsn, schema, cid, Path(counter)))))
