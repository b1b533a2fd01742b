"""LangGraph's own graph tests that take a checkpointer, run with our ``PostgresCheckpointer`` swapped in.

The langgraph sdist is downloaded at test time (``sdist.py``); ``lg_checkpointer_plugin.py`` makes its
``postgres`` (sync) and ``postgres_aio`` (async) checkpointer fixtures yield ours and deselects every other
variant. Every selected test must pass, except the deliberate differences below (also in docs/langgraph.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from sdist import run_pytest, sdist

HERE = Path(__file__).resolve().parent
FILES = [
    "tests/test_pregel.py",
    "tests/test_pregel_async.py",
    "tests/test_time_travel.py",
    "tests/test_time_travel_async.py",
    "tests/test_subgraph_persistence.py",
    "tests/test_subgraph_persistence_async.py",
    "tests/test_interruption.py",
]
#: "module::test[params]" -> why ours differs from PostgresSaver there, on purpose.
DELIBERATE: dict[str, str] = {}


def test_langgraph_graph_tests_pass_with_our_checkpointer() -> None:
    root = sdist("langgraph", "1.2.24")
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    out = run_pytest(["-q", "-p", "lg_checkpointer_plugin", *FILES], cwd=root, env={"PYTHONPATH": path},
                     timeout=3600)
    assert out.ran >= 400, out.output  # 414 selected with langgraph 1.2.24
    assert sorted(out.failures) == sorted(DELIBERATE), out.output
