"""The Agents SDK's own session tests (its sdist), run with PostgresSession swapped in for its sessions.

The same tests run twice through ``oa_swap_plugin``: with the SDK's SQLAlchemySession on Postgres (the peer)
and with ours. Each must pass wherever it passes for the peer, except the deliberate differences below
(also listed in docs/openai_agents.md). Tests of SQLite's own machinery fail under both.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sdist import run_pytest, sdist

HERE = Path(__file__).resolve().parent
FILES = ["tests/memory/test_session_limit.py", "tests/memory/test_session.py"]
#: Tests that pass for the peer and fail for ours on purpose (docs/openai_agents.md, "Differences").
DELIBERATE: set[str] = set()


def test_the_sdk_session_tests_pass_wherever_they_pass_for_sqlalchemy_on_postgres(dsn: str) -> None:
    root = sdist("openai-agents", "0.24.0")
    outcomes = {}
    for mode in ("peer", "ours"):
        started = time.monotonic()
        outcomes[mode] = run_pytest(
            ["-p", "oa_swap_plugin", "-q", "--tb=line", *FILES], cwd=root,
            env={"PGAGENTSTATE_SWAP": mode, "PGAGENTSTATE_SWAP_DSN": dsn,
                 "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])},
        )  # fmt: skip
        print(mode, outcomes[mode].passed, "passed", outcomes[mode].failed + outcomes[mode].errors,
              "failed", f"{time.monotonic() - started:.0f} s")
    peer, ours = outcomes["peer"], outcomes["ours"]
    assert ours.ran == peer.ran > 0, ours.output
    assert set(ours.failures) - set(peer.failures) <= DELIBERATE, ours.output
