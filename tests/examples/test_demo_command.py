"""``python examples/demo.py``: the README's first command, run as a user would (a separate process)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from pgagentstate import StateStore

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLES / "demo.py"), *args],
                          capture_output=True, text=True, timeout=120)


def test_demo_all_frameworks(dsn: str) -> None:
    proc = run_demo("--dsn", dsn)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for label in ("LangGraph", "Google ADK", "OpenAI Agents SDK"):
        assert f"=== {label}" in out
    assert out.count("kill -9 w") == 3  # one worker killed mid-refund per framework
    assert out.count("PASS  refunds paid = 1") == 3 and "FAIL" not in out
    # Distilled off the request path, then a new conversation two days later knows the email.
    assert out.count("PASS  new conversation: email known, not asked") == 3
    assert out.count("PASS  email distilled into memory once") == 3
    assert "checks: 24/24 passed" in out
    assert "OK: every agent remembered the email, paid once, and knew it again in a new conversation." in out


def test_demo_without_redelivery(dsn: str) -> None:
    """``--no-redelivery``: WhatsApp posts each message once; the worker paying the refund is killed -9 and
    the inbox's other worker takes the turn over."""
    proc = run_demo("--dsn", dsn, "--framework", "core", "--no-redelivery")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "delivers each message once" in out and out.count("kill -9 w") == 1
    assert "delivery failed" not in out  # nothing was delivered twice
    assert "turn(s) recovered by another worker, 0 left, 0 failed" in out
    assert "PASS  refunds paid = 1" in out and "FAIL" not in out and "checks: 8/8 passed" in out
    # ... and the inbox's turns feed distillation too: the new conversation knows the email.
    assert "PASS  new conversation: email known, not asked" in out
    assert "OK: every agent remembered the email, paid once, and knew it again in a new conversation." in out


def test_demo_keep_leaves_the_data_to_inspect(dsn: str) -> None:
    schema = f"t_demo_{uuid.uuid4().hex[:8]}"
    try:
        proc = run_demo("--dsn", dsn, "--framework", "core", "--no-crash", "--keep", "--schema", schema)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "kill -9" not in proc.stdout
        with StateStore(dsn, schema=schema, tenant="demo-core", max_size=1) as store:
            ids = {c.id for c in store.list_conversations()}
            channel = next(i for i in ids if i.startswith("whatsapp:") and "~" not in i)
            assert f"core:{channel.removeprefix('whatsapp:')}" in ids
            assert f"{channel}~2" in ids and f"core:{channel.removeprefix('whatsapp:')}~2" in ids  # two days later
            assert [s.status for s in store.get_workflow(channel)] == ["completed"] * 4
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_demo_without_keep_drops_its_schema(dsn: str) -> None:
    proc = run_demo("--dsn", dsn, "--framework", "core")
    assert proc.returncode == 0, proc.stdout[-3000:]
    schema = proc.stdout.split("Postgres schema '", 1)[1].split("'", 1)[0]
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    assert found is None


def test_the_demo_imports_no_framework() -> None:
    """The demo's orchestrator and webhook import no framework and no adapter: workers import theirs when
    started."""
    code = (
        f"import sys; sys.path.insert(0, {str(EXAMPLES)!r})\n"
        "import pgagentstate.cli, demo, refund.webhook, refund.cluster, refund.report\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('langgraph', 'agents', 'langchain_core',"
        " 'uvicorn') or m.startswith(('google.adk', 'pgagentstate.adk', 'pgagentstate.langgraph',"
        " 'pgagentstate.openai_agents'))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_demo_tells_what_happens_when_it_happens(dsn: str) -> None:
    """The injected payment timeout is announced, the kill -9 is printed under the message it interrupted,
    and the audit says why one chat has two conversations."""
    proc = run_demo("--dsn", dsn, "--framework", "core")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()

    def where(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    refund = where("(refund turn)")
    timeout, kill = where("injected timeout"), where("kill -9 w")
    answered = next(i for i in range(refund, len(lines)) if "answered by" in lines[i])
    assert refund < timeout < answered and refund < kill < answered, "\n".join(lines[refund - 1:answered + 1])
    assert "Why more than one conversation" in proc.stdout
