"""``pgagentstate demo``: the seed's refund conversation, kept in Postgres across "requests".

Each customer message is handled by a fresh store (as if by another server behind the load balancer);
the agent still knows the email five minutes later and does not pay or email twice.
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

from .models import NewEvent, StateRef
from .sync import StateStore

DIALOGUE = [
    "Oi, quero reembolso no pedido #12345",
    "meu@email.com",
    "Produto chegou quebrado",
    "Você vai enviar email com comprovante do reembolso?",
]


def _agent_turn(store: StateStore, cid: str, text: str, calls: dict[str, int]) -> str:
    """A tiny rule-based agent: everything it knows comes from Postgres at the start of the turn."""
    with store.turn(cid, create=True, framework="core-demo", channel="whatsapp") as turn:
        facts = turn.state
        turn.append({"role": "customer", "text": text}, author="customer")
        if "#" in text:
            facts["order_id"] = text.split("#", 1)[1].split()[0]
        if "@" in text:
            facts["email"] = text.strip()
        elif facts.get("email") and "reason" not in facts and "order_id" in facts and "?" not in text:
            facts["reason"] = text
        if "email" not in facts:
            reply = "Qual é seu email?"
            turn.set_status("waiting_customer")
        elif "reason" not in facts:
            reply = "Qual foi a razão da devolução?"
            turn.set_status("waiting_customer")
        elif not facts.get("refund"):
            facts["refund"] = "pending"
            reply = ""
        else:
            reply = (
                f"Sim, já enviei o comprovante para {facts['email']} (pedido #{facts['order_id']}). "
                "Quer que eu reenvie?"
            )
        if reply:
            turn.append({"role": "agent", "text": reply}, author="agent")
    if reply:
        return reply

    def pay(key: str) -> dict[str, Any]:
        calls["payment"] += 1
        return {"transaction_id": f"txn_{key[-6:]}", "amount": 500, "currency": "BRL"}

    def send(key: str) -> dict[str, Any]:
        calls["email"] += 1
        return {"message_id": f"msg_{key[-6:]}"}

    txn = store.run_step(
        cid,
        "refund",
        "process_refund",
        lambda: store.run_once(f"{cid}:refund", pay, api="payment", conversation_id=cid),
        position=3,
    )
    store.run_step(
        cid,
        "refund",
        "send_confirmation",
        lambda: store.run_once(f"{cid}:email", send, api="email", conversation_id=cid),
        position=4,
    )
    facts_ref = StateRef.conversation(cid)
    store.patch_state(facts_ref, {"refund": txn["transaction_id"]})
    reply = f"Entendi. Reembolso processado ({txn['transaction_id']}); comprovante enviado."
    store.append_events(cid, [NewEvent({"role": "agent", "text": reply}, author="agent")])
    return reply


def run_demo(args: argparse.Namespace) -> int:
    cid = f"demo-{uuid.uuid4().hex[:8]}"
    calls = {"payment": 0, "email": 0}
    with StateStore(args.dsn, tenant=args.tenant, schema=args.schema, max_size=2) as setup:
        setup.setup()
    for text in DIALOGUE:
        # A new store per message: nothing survives in RAM between "requests".
        with StateStore(args.dsn, tenant=args.tenant, schema=args.schema, max_size=2) as store:
            print(f"  cliente: {text}")
            print(f"  agente:  {_agent_turn(store, cid, text, calls)}")
    with StateStore(args.dsn, tenant=args.tenant, schema=args.schema, max_size=2) as store:
        # A retry of the refund (e.g. after a crash) replays the recorded payment instead of paying again.
        store.run_once(
            f"{cid}:refund",
            lambda key: calls.__setitem__("payment", calls["payment"] + 1),
            api="payment",
            conversation_id=cid,
        )
        events = store.list_events(cid)
        state = store.get_state(StateRef.conversation(cid))
        print(
            f"\nmessages stored: {len(events)}; state version: {state.version if state else 0}; "
            f"payments: {calls['payment']}; emails: {calls['email']}"
        )
        ok = calls == {"payment": 1, "email": 1} and state is not None and state.data.get("email") == "meu@email.com"
        if not args.keep:
            store.delete_conversation(cid)
    print("OK: the agent remembered the email and paid once." if ok else "FAILED")
    return 0 if ok else 1
