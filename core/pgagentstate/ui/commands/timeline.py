"""``pgagentstate show`` (one conversation's timeline) and ``pgagentstate state --at`` (time travel)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime

from ...errors import InvalidInput
from ...models import Conversation, StateDoc, StateRef
from ...ops import operations
from ..term import ago, clock, heading, key_values, parse_version_or_time, short, table
from .base import Add, emit, find_conversation, idle_option, open_store


def _title(e: operations.TimelineEntry) -> str:
    return e.title + (f" (sent {clock(e.sent_at)})" if e.sent_at is not None else "")


def _render_timeline(tl: operations.Timeline, *, show_all: bool = False) -> str:
    c = tl.conversation
    shown = [e for e in tl.entries if show_all or not e.folded]
    folded = len(tl.entries) - len(shown)
    out = [
        heading(f"conversation {c.id}"),
        key_values(
            [
                ("health", tl.health + ("" if tl.health == c.status else f" (status {c.status})")),
                ("framework / app", f"{c.framework or '-'} / {c.app or '-'}"),
                ("user / channel", f"{c.user_id or '-'} / {c.channel or '-'}"),
                ("version / events", f"{c.version} / {c.last_seq}"),
                ("created", f"{clock(c.created_at)} ({ago(c.created_at)})"),
                ("updated", f"{clock(c.updated_at)} ({ago(c.updated_at)})"),
                ("metadata", short(c.metadata, 100) if c.metadata else "-"),
            ]
        ),
        heading("timeline (in the order the store recorded it)"),
        table(["time", "kind", "what", "detail"], [(clock(e.at), e.kind, _title(e), e.text) for e in shown], max_col=70)
        if shown
        else "(empty)",
    ]
    if folded:
        out.append(f"\n{folded} state change(s) written with a message are folded into it (show --all lists them)")
    if tl.state_versions or tl.shared_state:
        latest: dict[str, operations.StateVersion] = {}
        for v in [*tl.state_versions, *tl.shared_state]:
            latest[v.label] = v
        out.append(heading("state"))
        for label, v in latest.items():
            shared = " (shared by the user's conversations)" if v.scope == "user" else (
                " (shared by the app's conversations)" if v.scope == "app" else "")
            out.append(f"{label!r} at version {v.version}{shared}:")
            out.append(json.dumps(v.data, indent=2, ensure_ascii=False, default=str))
        rows = []
        for v in tl.state_versions:
            changes = ", ".join(
                f"+{ch.path}={short(ch.new, 30)}"
                if ch.op == "added"
                else f"-{ch.path}"
                if ch.op == "removed"
                else f"~{ch.path}: {short(ch.old, 20)} -> {short(ch.new, 20)}"
                for ch in v.changes
            )
            rows.append((v.label, v.version, clock(v.changed_at), changes or "(no change)"))
        out.append("\n" + table(["document", "version", "changed", "changes"], rows, max_col=90))
    if tl.steps:
        out.append(heading("workflow steps"))
        out.append(
            table(
                ["workflow", "pos", "step", "status", "attempts", "started", "completed", "lease", "error / result"],
                [
                    (
                        s.workflow,
                        s.position,
                        s.step,
                        s.status,
                        s.attempts,
                        clock(s.started_at),
                        clock(s.completed_at),
                        ago(s.lease_expires_at) if s.status == "in_progress" else "",
                        s.last_error or ("" if s.result is None else short(s.result, 50)),
                    )
                    for s in tl.steps
                ],
            )
        )
    if tl.ledger:
        out.append(heading("external calls (idempotency ledger)"))
        out.append(
            table(
                ["api", "key", "status", "attempts", "dups stopped", "created", "result / error"],
                [
                    (
                        k.api,
                        k.key,
                        k.status,
                        k.attempts,
                        k.duplicate_hits,
                        clock(k.created_at),
                        k.error or ("" if k.result is None else short(k.result, 50)),
                    )
                    for k in tl.ledger
                ],
            )
        )
    if tl.scratchpad:
        out.append(heading("scratchpad"))
        out.append(
            table(
                ["key", "value", "expires"],
                [
                    (s.key, short(s.value, 50), ("expired " if s.expired else "") + ago(s.expires_at))
                    for s in tl.scratchpad
                ],
            )
        )
    if tl.snapshots:
        out.append(heading("checkpoints"))
        out.append(
            table(
                ["namespace", "count", "first", "newest", "newest id"],
                [
                    (s.namespace or "(root)", s.count, clock(s.first_at), clock(s.last_at), s.latest_id)
                    for s in tl.snapshots
                ],
            )
        )
    return "\n".join(out)


def _not_found(args: argparse.Namespace) -> int:
    print(f"pgagentstate: conversation {args.id!r} not found (tenant {args.tenant!r})", file=sys.stderr)
    return 1


def cmd_show(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        cid = find_conversation(store, args.id)
        tl = None if cid is None else store.run(
            operations.timeline(store.context, cid, event_limit=args.events, idle=args.idle)
        )
    if tl is None:
        print(f"pgagentstate: conversation {args.id!r} not found (tenant {args.tenant!r})", file=sys.stderr)
        return 1
    emit(args, tl, lambda: _render_timeline(tl, show_all=args.all))
    return 0


def _pick(
    conv: Conversation, versions: list[operations.StateVersion], version: int | None, at: datetime | None
) -> tuple[StateDoc | None, StateDoc | None]:
    """The version asked for (and the one before) among versions the timeline read (only the latest of a
    user or app document: its history belongs to every conversation sharing it)."""
    found = [v for v in versions if (version is None or v.version == version) and (at is None or v.changed_at <= at)]
    if not found:
        return None, None
    pick = found[-1]
    before = next((v for v in reversed(versions) if v.version < pick.version), None)

    def doc(v: operations.StateVersion) -> StateDoc:
        if v.scope == "user":
            ref = StateRef.user(conv.app, conv.user_id, v.name)
        elif v.scope == "app":
            ref = StateRef.app(conv.app, v.name)
        else:  # a checkpointed thread's values belong to the conversation
            ref = StateRef.conversation(conv.id, v.name)
        return StateDoc(ref, v.data, v.version, v.changed_at)

    return doc(pick), None if before is None else doc(before)


def cmd_state(args: argparse.Namespace) -> int:
    version: int | None = None
    at: datetime | None = None
    if args.at is not None:
        try:
            point = parse_version_or_time(args.at)
        except ValueError as exc:
            raise InvalidInput(str(exc), path="--at") from None
        if isinstance(point, int):
            version = point
        else:
            at = point
    with open_store(args) as store:
        cid = find_conversation(store, args.id)
        if cid is None:
            return _not_found(args)
        tl = store.run(operations.timeline(store.context, cid, event_limit=1))
        assert tl is not None
        names = sorted({v.name for v in tl.state_versions if v.scope == "conversation"})
        # Documents that are not the conversation's own: its user's and app's (ADK's user: and app: keys),
        # and a LangGraph thread's channel values from its checkpoints.
        others: dict[str, list[operations.StateVersion]] = {}
        for v in [*tl.state_versions, *tl.shared_state]:
            if v.scope != "conversation":
                others.setdefault(v.label, []).append(v)
        # Without --name: the document called 'state', else the conversation's only document, else a
        # checkpointed thread's values.
        name = args.name or (
            "state" if "state" in names or len(names) > 1 else names[0] if names
            else "checkpoint:values" if "checkpoint:values" in others else "state"
        )
        doc: StateDoc | None = None
        previous: StateDoc | None = None
        if name in others:
            doc, previous = _pick(tl.conversation, others[name], version, at)
        else:
            doc = store.run(operations.state_at(store.context, cid, version=version, at=at, name=name))
            if doc is not None and doc.version > 1:
                previous = store.run(operations.state_at(store.context, cid, version=doc.version - 1, name=name))
        names += sorted(others)
    if doc is None:
        if name in names:
            print(f"pgagentstate: no state {name!r} of conversation {cid!r} at {args.at} (not written yet)",
                  file=sys.stderr)
        else:
            has = f"its documents: {', '.join(map(repr, names))}" if names else "it has no state documents"
            if not names and tl.thread is not None:
                has += f" and its checkpoints hold only its {len(tl.thread.messages)} messages (show lists them)"
            print(f"pgagentstate: conversation {cid!r} has no state document {name!r}; {has}", file=sys.stderr)
        return 1
    changes = operations.diff(previous.data if previous else None, doc.data)

    def render() -> str:
        head = key_values(
            [
                ("conversation", cid),
                ("document", name),
                ("version", doc.version),
                ("written", f"{clock(doc.updated_at)} ({ago(doc.updated_at)})"),
            ]
        )
        body = json.dumps(doc.data, indent=2, ensure_ascii=False, default=str)
        marks = {"added": "+", "removed": "-", "changed": "~"}
        diff_lines = [
            f"  {marks[c.op]} {c.path}: "
            + (
                short(c.new)
                if c.op == "added"
                else short(c.old)
                if c.op == "removed"
                else f"{short(c.old, 40)} -> {short(c.new, 40)}"
            )
            for c in changes
        ]
        also = [repr(n) for n in names if n != name]
        tail = f"\n\nother documents (--name): {', '.join(also)}" if also else ""
        return (f"{head}\n\n{body}\n\nchanges from version {doc.version - 1}:\n" + ("\n".join(diff_lines) or "  none")
                + tail)

    emit(args, {"state": doc, "changes": changes}, render)
    return 0


def register(add: Add) -> None:
    p = add("show", cmd_show, "timeline of one conversation: messages, state versions, steps, external calls")
    p.add_argument("id", help="conversation id")
    p.add_argument("--events", type=int, default=None, metavar="N", help="only the newest N events")
    p.add_argument("--all", action="store_true", help="also list the state changes folded into their messages")
    idle_option(p)

    p = add("state", cmd_state, "a conversation's state as it was at a version or a time (time travel)")
    p.add_argument("id", help="conversation id")
    p.add_argument("--at", metavar="VERSION|TIME", help="version number, ISO time, or a duration ago (10m)")
    p.add_argument("--name", help="state document name (default: 'state', else the conversation's only document)")
