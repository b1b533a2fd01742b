"""What the demo prints after a run: the chat as the customer saw it, and the audit read from Postgres."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pgagentstate import StateStore
from pgagentstate.distill import Distiller

from .agents import channel_conversation_id
from .dialogue import ASK_EMAIL
from .services import Ledger
from .workflow import facts_ref


@dataclass
class Audit:
    """Everything the checks look at, read back after the run."""

    framework: str
    transcript: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    ledger: list[dict[str, Any]]
    conversations: list[dict[str, Any]]
    facts: dict[str, Any]
    fact_versions: list[tuple[int, str]]
    payment: dict[str, int]
    email: dict[str, int]
    whatsapp: dict[str, int]
    kills: list[str] = field(default_factory=list)
    next_transcript: list[dict[str, Any]] = field(default_factory=list)  # the customer's second conversation
    memories: list[dict[str, Any]] = field(default_factory=list)  # the customer's long-term memory, distilled

    @property
    def agent_replies(self) -> list[str]:
        return [m["text"] for m in self.transcript if m["role"] == "agent"]

    def checks(self) -> list[tuple[str, bool]]:
        replies = self.agent_replies
        last = replies[-1] if replies else ""
        later = [m["text"] for m in self.next_transcript if m["role"] == "agent"]
        emails = [m for m in self.memories if m["topic"] == "email"]
        return [
            ("refunds paid = 1", self.payment["effects"] == 1),
            ("emails sent = 1", self.email["effects"] == 1),
            ("email asked once", sum(r == ASK_EMAIL for r in replies) == 1),
            ("5 min later: answered with the known email", "meu@email.com" in last and "comprovante" in last),
            ("all 4 steps completed", len(self.steps) == 4 and all(s["status"] == "completed" for s in self.steps)),
            ("each reply delivered once", self.whatsapp["effects"] == len(replies) + len(later)),
            # Distillation: once per conversation position, consolidated (one fact per topic, never rewritten
            # with the same text), in the worker's process.
            ("email distilled into memory once", [(m["text"], m["version"]) for m in emails]
             == [("email: meu@email.com", 1)]),
            ("new conversation: email known, not asked",
             bool(later) and "meu@email.com" in later[0] and ASK_EMAIL not in later),
        ]

    @property
    def ok(self) -> bool:
        return all(passed for _, passed in self.checks())


def memory_namespace(framework: str, customer: str) -> tuple[str, ...]:
    """Where distillation puts the customer's facts: the layout of the framework's memory (see
    :data:`pgagentstate.distill.NAMESPACES`), e.g. ``("memories", customer)`` for LangGraph."""
    return Distiller().namespace_for("refunds", customer, channel_conversation_id(customer), framework)


def _transcript(store: StateStore, conversation_id: str) -> list[dict[str, Any]]:
    return [
        {
            "role": e.payload.get("role"),
            "text": e.payload.get("text"),
            "at": e.created_at,
            "worker": e.payload.get("worker", ""),
        }
        for e in store.list_events(conversation_id)
    ]


def collect(
    store: StateStore, framework: str, customer: str, workdir_ledgers: dict[str, Ledger], kills: list[str]
) -> Audit:
    cid = channel_conversation_id(customer)
    transcript = _transcript(store, cid)
    steps = [
        {
            "workflow": s.workflow,
            "step": s.step,
            "status": s.status,
            "attempts": s.attempts,
            "last_error": s.last_error or "",
        }
        for s in store.get_workflow(cid)
    ]
    ledger = [
        {"api": e.api, "key": e.key, "status": e.status, "attempts": e.attempts, "duplicate_hits": e.duplicate_hits}
        for e in store.list_ledger(conversation_id=cid)
    ]
    conversations = [
        {
            "id": c.id,
            "framework": c.framework,
            "messages": c.last_seq,
            "version": c.version,
            "snapshots": len(store.list_snapshots(c.id)),
        }
        for c in store.list_conversations()
    ]
    history = store.state_history(facts_ref(cid))
    facts = history[0].data if history else {}
    versions = [(d.version, str(d.data.get("status", ""))) for d in reversed(history)]
    return Audit(
        framework,
        transcript,
        steps,
        ledger,
        conversations,
        facts,
        versions,
        workdir_ledgers["payment"].stats(),
        workdir_ledgers["email"].stats(),
        workdir_ledgers["whatsapp"].stats(),
        kills,
        _transcript(store, channel_conversation_id(customer, 2)),
        [
            {
                "topic": m.value.get("topic"),
                "text": m.value.get("text"),
                "version": m.version,
                "source": m.value.get("source") or {},
            }
            for m in store.search_memory(memory_namespace(framework, customer), limit=20)
            if m.value.get("kind") == "fact"
        ],
    )


def chat(audit: Audit) -> list[str]:
    """The transcript as a chat, with the simulated clock and the worker that answered; then the customer's
    next conversation."""
    lines = _chat(audit.transcript)
    if audit.next_transcript:
        days = round((audit.next_transcript[0]["at"] - audit.transcript[0]["at"]) / timedelta(days=1))
        lines.append(f"      ⏩ {days} dias depois (relógio simulado): uma conversa nova, sem histórico")
        lines += _chat(audit.next_transcript, "%d/%m %H:%M")
    return lines


def _chat(transcript: list[dict[str, Any]], clock: str = "%H:%M") -> list[str]:
    lines = []
    previous = None
    for m in transcript:
        at = m["at"]
        if m["role"] == "customer":
            if previous is not None and (at - previous).total_seconds() >= 240:
                gap = int((at - previous).total_seconds() // 60)
                lines.append(f"      ⏩ {gap} minutos depois (relógio simulado)")
            previous = at
        who = "Cliente" if m["role"] == "customer" else "Agente "
        where = f"  [{m['worker']}]" if m["role"] == "agent" else ""
        lines.append(f"  {at.strftime(clock)}  {who}: {m['text']}{where}")
    return lines


def table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [[str(c) for c in r] for r in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    fmt = "  " + " | ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*cells[0]).rstrip(), "  " + "-+-".join("-" * w for w in widths)]
    out += [fmt.format(*r).rstrip() for r in cells[1:]]
    return out


def _distillations(a: Audit) -> str:
    """The run_once records of the conversation's distillations: one per log position."""
    runs = [e for e in a.ledger if e["api"] == "distill"]
    if not runs:
        return "none"
    upto = ", ".join(e["key"].rsplit(":", 1)[1] for e in runs)
    statuses = "/".join(sorted({e["status"] for e in runs}))
    return f"{len(runs)} (up to events {upto}), {sum(e['attempts'] for e in runs)} attempts in all, {statuses}"


def audit_lines(a: Audit) -> list[str]:
    customer = sum(m["role"] == "customer" for m in a.transcript)
    lines = ["", "  Audit (read back from Postgres and from the services' own records):"]
    lines += table(
        ["what", "value"],
        [
            [
                "messages stored (whatsapp conversation)",
                f"{len(a.transcript)} ({customer} customer, {len(a.transcript) - customer} agent)",
            ],
            *[
                [
                    f"  conversation {c['id']}",
                    f"{c['framework'] or '-'}: {c['messages']} events, {c['snapshots']} checkpoints, "
                    f"version {c['version']}",
                ]
                for c in a.conversations
            ],
            [
                "refunds paid (payment API)",
                f"{a.payment['effects']}  ({a.payment['requests']} requests, "
                f"{a.payment['replayed']} answered from its idempotency record, "
                f"{a.payment['timeouts']} timed out)",
            ],
            ["emails sent (email API)", f"{a.email['effects']}  ({a.email['requests']} requests)"],
            ["WhatsApp messages sent", f"{a.whatsapp['effects']}  ({a.whatsapp['requests']} requests)"],
            ["facts (state 'refund')", ", ".join(f"{k}={a.facts.get(k)}" for k in ("order_id", "email", "reason"))],
            ["state versions", " -> ".join(f"v{v} {s}" for v, s in a.fact_versions)],
            ["distillations (distill worker)", _distillations(a)],
            *[
                [
                    f"  memory {m['topic']!r} (distilled)",
                    f"{m['text']}  (v{m['version']}, from {m['source'].get('conversation')} "
                    f"up to event {m['source'].get('seq')})",
                ]
                for m in a.memories
            ],
            ["workers killed", "; ".join(a.kills) or "none"],
        ],
    )
    if len(a.conversations) > 1:
        lines += [
            "",
            "  Why more than one conversation for one chat: the webhook keeps the WhatsApp channel's own",
            "  (what was said, the facts, the refund workflow and its ledger: what operators look at), and the",
            "  framework keeps its thread or session in the same Postgres (its history, what the model sees).",
            "  The customer's second conversation (two days later) has a new pair of its own: '~2'.",
        ]
    lines += ["", "  Workflow steps:"]
    lines += table(
        ["step", "status", "attempts", "last error"],
        [[s["step"], s["status"], s["attempts"], s["last_error"][:60]] for s in a.steps],
    )
    lines += ["", "  Idempotency ledger (external calls):"]
    lines += table(
        ["api", "status", "attempts", "key (sent as Idempotency-Key)"],
        [
            [e["api"], e["status"], e["attempts"], e["key"]]
            for e in a.ledger
            if e["api"] not in ("whatsapp", "distill")
        ],
    )
    lines += ["", "  Checks:"]
    lines += [f"  {'PASS' if ok else 'FAIL'}  {name}" for name, ok in a.checks()]
    return lines
