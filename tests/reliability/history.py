"""A checker over the whole history of a soak run (benchmarks/reliability/soak.py, soak_world.py).

The history is what the clients were told and what the world recorded, gathered during and after the run:

- ``messages``: every customer message the soak sent, whether the webhook acknowledged it (a 200) and how many
  replies that 200 carried;
- ``logs``: each conversation's event log as stored, ``(seq, event_id, role)`` in seq order;
- ``state_versions``: each state document's versions as stored (``state_history``, oldest first);
- ``observed``: state versions read during the run, ``(document, monotonic time, version)``;
- ``effects``: every side effect the outside world recorded, ``(api, idempotency key)``.

``check`` verifies, over all of it: every acknowledged message stored exactly once, in the order sent, followed by
its replies (``lost``, ``duplicated``, ``phantom``, ``out_of_order``); contiguous logs (``gap``); state versions
that only go up (``state_regression``); each side effect at most once per key (``duplicate_effect``); every
message sent eventually answered (``unanswered``). It knows nothing of how the history was produced, so
tests/reliability/test_history.py feeds it corrupted histories and sees each class of anomaly reported.
Reply events are ``<message id>:reply:<j>`` (the refund webhook's convention, examples/refund/webhook.py).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

KINDS = ("lost", "duplicated", "phantom", "out_of_order", "gap", "state_regression", "duplicate_effect",
         "unanswered")  # fmt: skip


@dataclass(frozen=True)
class Message:
    conversation: str
    message_id: str
    index: int  # position in the customer's dialogue: sent only after the previous one was acknowledged
    acked: bool
    replies: int = 0  # replies carried by the acknowledgement


@dataclass
class History:
    messages: list[Message] = field(default_factory=list)
    logs: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)
    state_versions: dict[str, list[int]] = field(default_factory=dict)
    observed: list[tuple[str, float, int]] = field(default_factory=list)
    effects: list[tuple[str, str]] = field(default_factory=list)

    def extend(self, other: History) -> None:
        self.messages += other.messages
        self.logs.update(other.logs)
        self.state_versions.update(other.state_versions)
        self.observed += other.observed
        self.effects += other.effects


@dataclass(frozen=True)
class Anomaly:
    kind: str
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.subject}: {self.detail}"


@dataclass
class Report:
    operations: dict[str, int]
    anomalies: list[Anomaly]

    @property
    def by_kind(self) -> dict[str, int]:
        return dict(Counter(a.kind for a in self.anomalies))

    @property
    def checked(self) -> int:
        return sum(self.operations.values())


def reply_id(message_id: str, j: int) -> str:
    return f"{message_id}:reply:{j}"


def check(history: History) -> Report:
    anomalies: list[Anomaly] = []

    def found(kind: str, subject: str, detail: str) -> None:
        anomalies.append(Anomaly(kind, subject, detail))

    sent: dict[str, list[Message]] = defaultdict(list)
    for m in history.messages:
        sent[m.conversation].append(m)
    events = 0
    for conversation in sorted(set(sent) | set(history.logs)):
        log = history.logs.get(conversation, [])
        events += len(log)
        seqs = [seq for seq, _, _ in log]
        if seqs != list(range(1, len(log) + 1)):
            found("gap", conversation, f"seqs {_short(seqs)} are not 1..{len(log)}")
        ids = [event_id for _, event_id, _ in log]
        for event_id, n in Counter(ids).items():
            if n > 1:
                found("duplicated", conversation, f"{event_id} stored {n} times")
        position = {event_id: k for k, (_, event_id, _) in enumerate(log)}
        messages = sorted(sent.get(conversation, []), key=lambda m: m.index)
        known = {m.message_id for m in messages}
        for _, event_id, role in log:
            if role == "customer" and event_id not in known:
                found("phantom", conversation, f"{event_id} stored but never sent")
        for m in messages:
            if not m.acked:
                found("unanswered", conversation, f"{m.message_id} never acknowledged")
                if m.message_id not in position:
                    continue  # not acknowledged and not stored: the customer was never told it was taken
            if m.message_id not in position:
                found("lost", conversation, f"{m.message_id} acknowledged, not stored")
                continue
            for j in range(m.replies):
                if reply_id(m.message_id, j) not in position:
                    found("lost", conversation, f"reply {j} to {m.message_id} acknowledged, not stored")
        # In order: each stored message after the one sent before it, its replies right after it.
        stored = [m for m in messages if m.message_id in position]
        expected: list[str] = []
        for m in stored:
            expected.append(m.message_id)
            expected += [reply_id(m.message_id, j) for j in range(m.replies) if reply_id(m.message_id, j) in position]
        wanted = set(expected)
        ours = [i for i in ids if i in wanted]
        if ours != expected:
            found("out_of_order", conversation, f"stored {_short(ours)}, sent {_short(expected)}")
    for document, versions in sorted(history.state_versions.items()):
        if versions != list(range(1, len(versions) + 1)):
            found("state_regression", document, f"stored versions {_short(versions)} are not 1..{len(versions)}")
    last: dict[str, tuple[float, int]] = {}
    for document, t, version in sorted(history.observed, key=lambda o: o[1]):
        before = last.get(document)
        if before is not None and version < before[1]:
            found("state_regression", document, f"read {version} at {t:.3f} after {before[1]} at {before[0]:.3f}")
        last[document] = (t, version)
        final = history.state_versions.get(document)
        if final is not None and version > len(final):
            found("state_regression", document, f"read version {version}, but only {len(final)} are stored")
    for (api, key), n in sorted(Counter(history.effects).items()):
        if n > 1:
            found("duplicate_effect", f"{api}:{key}", f"performed {n} times")
    operations = {
        "messages": len(history.messages),
        "acknowledged": sum(m.acked for m in history.messages),
        "events": events,
        "state_versions": sum(len(v) for v in history.state_versions.values()),
        "state_reads": len(history.observed),
        "side_effects": len(history.effects),
    }
    return Report(operations, anomalies)


def _short(items: list[object], keep: int = 8) -> str:
    return repr(items) if len(items) <= keep else f"{items[:keep]!r}... ({len(items)} in all)"
