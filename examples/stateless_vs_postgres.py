"""The seed's bug, reproduced and fixed with the same agent rules.

    python examples/stateless_vs_postgres.py [DSN]

First the agent keeps the conversation in RAM, and every request starts with empty RAM (another server,
a redeploy): five minutes later it asks for the email again. Then the same rules with the conversation
loaded from and saved to Postgres in one ``store.turn``: it answers with the email it was given.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

from pgagentstate import StateStore

from refund.dialogue import SCRIPT, Msg, Reply, decide

CANNED: dict[str, Any] = {  # the tools' answers, canned: this example is about memory, not payments
    "check_refund_policy": {"eligible": True, "amount": 500.0, "currency": "BRL"},
    "process_refund": {"transaction_id": "txn_12345", "amount": 500.0, "currency": "BRL"},
    "send_confirmation": {"message_id": "msg_67890", "to": "meu@email.com"},
}


def agent_turn(history: list[Msg], text: str) -> str:
    history.append(Msg("customer", text))
    while not isinstance(decision := decide(history), Reply):
        history += [Msg("tool_call", tool=decision.name, args=decision.args),
                    Msg("tool_result", tool=decision.name, result=CANNED[decision.name])]
    history.append(Msg("agent", decision.text))
    return decision.text


def stateless() -> None:
    print("Stateless (RAM only, a fresh process per request):")
    for _, text in SCRIPT:
        ram: list[Msg] = []  # the request's memory, gone when it ends
        print(f"   Cliente: {text}\n   Agente : {agent_turn(ram, text)}")


def with_postgres(dsn: str | None) -> None:
    print("\nWith Postgres (load -> process -> save in one turn):")
    cid = f"example-{uuid.uuid4().hex[:8]}"
    with StateStore(dsn, tenant="examples") as setup:
        setup.setup()
    for _, text in SCRIPT:
        with StateStore(dsn, tenant="examples", max_size=1) as store, \
                store.turn(cid, recent=100, create=True, channel="whatsapp") as turn:
            history = [Msg(**e.payload) for e in turn.events]
            before = len(history)
            reply = agent_turn(history, text)
            for m in history[before:]:
                turn.append({"role": m.role, "text": m.text, "tool": m.tool, "args": dict(m.args),
                             "result": m.result}, author=m.role)
        print(f"   Cliente: {text}\n   Agente : {reply}")


if __name__ == "__main__":
    stateless()
    with_postgres(sys.argv[1] if len(sys.argv) > 1 else None)
