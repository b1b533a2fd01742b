"""Shared seeding for the operations tests: the seed's refund conversation, and ways to age rows."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from pgagentstate import StateRef, StateStore

DIALOGUE = [
    ("customer", "Oi, quero reembolso no pedido #12345"),
    ("agent", "Qual é seu email?"),
    ("customer", "meu@email.com"),
    ("agent", "Qual foi a razão da devolução?"),
    ("customer", "Produto chegou quebrado"),
    ("agent", "Entendi. Reembolso processado (txn_12345); comprovante enviado."),
    ("customer", "Você vai enviar email com comprovante do reembolso?"),
    ("agent", "Sim, já enviei o comprovante para meu@email.com (pedido #12345). Quer que eu reenvie?"),
]


def seed_refund(store: StateStore, cid: str, *, user_id: str = "5511999999999", framework: str = "core") -> None:
    """The seed's conversation: messages through turns, state facts, the four workflow steps, the payment
    and email calls through the ledger (with one retried payment that the ledger stops)."""
    for i, (role, text) in enumerate(DIALOGUE):
        with store.turn(cid, create=True, framework=framework, app="refunds", user_id=user_id,
                        channel="whatsapp") as turn:
            turn.append({"role": role, "text": text}, author=role)
            if i == 0:
                turn.state["order_id"] = "12345"
            if i == 2:
                turn.state["email"] = "meu@email.com"
            if i == 4:
                turn.state["reason"] = "Produto chegou quebrado"
            turn.set_status("waiting_customer" if role == "agent" else "active")
        if i == 4:
            store.run_step(cid, "refund", "understand", lambda: {"order_id": "12345"}, position=1)
            store.run_step(cid, "refund", "verify_policy", lambda: {"eligible": True}, position=2)
            store.run_step(
                cid, "refund", "process_refund",
                lambda: store.run_once(f"{cid}:refund", lambda key: {"transaction_id": "txn_12345", "amount": 500},
                                       api="payment", request={"order": "12345"}, conversation_id=cid),
                position=3,
            )
            store.run_step(
                cid, "refund", "send_confirmation",
                lambda: store.run_once(f"{cid}:email", lambda key: {"message_id": "msg_67890"}, api="email",
                                       request={"to": "meu@email.com"}, conversation_id=cid),
                position=4,
            )
            store.patch_state(StateRef.conversation(cid), {"refund": "txn_12345"})
    # "5 minutes later" a retry of the payment: the ledger replays the recorded result.
    store.run_once(f"{cid}:refund", lambda key: {"transaction_id": "txn_DUPLICATE"}, api="payment",
                   request={"order": "12345"}, conversation_id=cid)


def execute(dsn: str, schema: str, statement: str, params: dict[str, Any] | None = None) -> int:
    """Run one statement with ``{schema}`` replaced by the quoted schema; returns the rows it touched."""
    pieces = statement.split("{schema}")
    parts: list[sql.Composable] = [sql.SQL(pieces[0])]
    for piece in pieces[1:]:
        parts += [sql.Identifier(schema), sql.SQL(piece)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql.Composed(parts), params or {}).rowcount


def age_conversation(dsn: str, schema: str, cid: str, days: float) -> None:
    """Pretend the conversation's last activity was ``days`` ago."""
    execute(dsn, schema, "UPDATE {schema}.conversations SET updated_at = now() - make_interval(secs => %(s)s) "
            "WHERE id = %(id)s", {"s": days * 86400, "id": cid})
