"""Each agent file of examples/ runs on its own, as its docstring says (``python examples/<file>.py DSN``): the
conversation in one process, a new store and a new agent per message, one refund and one email at the services."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("script", ["core_agent", "langgraph_agent", "adk_agent", "openai_agents_agent"])
def test_an_agent_file_plays_the_conversation(dsn: str, script: str) -> None:
    proc = subprocess.run([sys.executable, str(EXAMPLES / f"{script}.py"), dsn], capture_output=True, text=True,
                          timeout=180, cwd=EXAMPLES.parent)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert out.count("Qual é seu email?") == 1  # asked once: the next "servers" read it back from Postgres
    assert "para meu@email.com" in out.splitlines()[-3]  # five minutes later, answered from memory
    assert "refunds paid: 1, emails sent: 1" in out


def test_the_stateless_example_shows_the_bug_and_the_fix(dsn: str) -> None:
    proc = subprocess.run([sys.executable, str(EXAMPLES / "stateless_vs_postgres.py"), dsn], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stateless, with_postgres = proc.stdout.split("With Postgres", 1)
    assert stateless.count("Qual é seu email?") > 1
    assert with_postgres.count("Qual é seu email?") == 1
