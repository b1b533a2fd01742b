"""The soak's history checker (history.py) finds each class of anomaly it claims to, and none in a clean history.

Fast and without Postgres: the histories are built by hand, a clean one and one corruption per anomaly class.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
from history import KINDS, History, Message, check, reply_id


def clean() -> History:
    """Two conversations of two messages each, every message answered with one or two replies."""
    h = History()
    for c in ("c1", "c2"):
        log: list[tuple[int, str, str]] = []
        for k, replies in enumerate((1, 2)):
            mid = f"{c}.m{k}"
            h.messages.append(Message(c, mid, k, acked=True, replies=replies))
            log.append((len(log) + 1, mid, "customer"))
            log += [(len(log) + 1 + j, reply_id(mid, j), "agent") for j in range(replies)]
        h.logs[c] = log
        h.state_versions[f"{c}/refund"] = [1, 2]
        h.observed += [(f"{c}/refund", 1.0, 1), (f"{c}/refund", 2.0, 2)]
        h.effects += [("payment", f"{c}/refund"), ("email", f"{c}/email")]
    return h


def lose_message(h: History) -> None:
    h.logs["c1"] = [(seq, e, r) for seq, e, r in h.logs["c1"] if e != "c1.m1"]
    h.logs["c1"] = [(k + 1, e, r) for k, (_, e, r) in enumerate(h.logs["c1"])]


def lose_reply(h: History) -> None:
    h.logs["c2"] = [(k + 1, e, r) for k, (_, e, r) in enumerate(x for x in h.logs["c2"] if x[1] != "c2.m1:reply:1")]


def duplicate(h: History) -> None:
    h.logs["c1"].append((len(h.logs["c1"]) + 1, "c1.m0", "customer"))


def phantom(h: History) -> None:
    h.logs["c2"].append((len(h.logs["c2"]) + 1, "c2.m9", "customer"))


def reorder(h: History) -> None:
    log = h.logs["c1"]
    log[0], log[2] = (1, log[2][1], log[2][2]), (3, log[0][1], log[0][2])


def gap(h: History) -> None:
    h.logs["c2"][-1] = (9, *h.logs["c2"][-1][1:])


def state_history_regresses(h: History) -> None:
    h.state_versions["c1/refund"] = [1, 3]


def state_read_goes_back(h: History) -> None:
    h.observed.append(("c2/refund", 3.0, 1))


def state_read_lost(h: History) -> None:
    h.observed.append(("c2/refund", 3.0, 3))  # a version read during the run that the store no longer has


def double_effect(h: History) -> None:
    h.effects.append(("payment", "c2/refund"))


def unanswered(h: History) -> None:
    h.messages[1] = Message("c1", "c1.m1", 1, acked=False)
    h.logs["c1"] = h.logs["c1"][:2]


CORRUPTIONS: dict[str, tuple[Callable[[History], None], str]] = {
    "lost message": (lose_message, "lost"),
    "lost reply": (lose_reply, "lost"),
    "stored twice": (duplicate, "duplicated"),
    "never sent": (phantom, "phantom"),
    "out of order": (reorder, "out_of_order"),
    "seq gap": (gap, "gap"),
    "state history": (state_history_regresses, "state_regression"),
    "state read went back": (state_read_goes_back, "state_regression"),
    "state read lost": (state_read_lost, "state_regression"),
    "side effect twice": (double_effect, "duplicate_effect"),
    "never answered": (unanswered, "unanswered"),
}


def test_a_clean_history_has_no_anomaly() -> None:
    report = check(clean())
    assert report.anomalies == []
    assert report.operations == {"messages": 4, "acknowledged": 4, "events": 10, "state_versions": 4,
                                 "state_reads": 4, "side_effects": 4}  # fmt: skip


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_each_corruption_is_reported_as_its_kind(corruption: str) -> None:
    history = copy.deepcopy(clean())
    corrupt, kind = CORRUPTIONS[corruption]
    corrupt(history)
    report = check(history)
    assert kind in report.by_kind, [str(a) for a in report.anomalies]


def test_every_kind_of_anomaly_is_exercised() -> None:
    assert {kind for _, kind in CORRUPTIONS.values()} == set(KINDS)
