"""The embedded Postgres outlives the process that started it: ``pgagentstate embedded status`` shows it
and ``pgagentstate embedded stop`` stops it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pgagentstate.cli import main

START = """
from pgagentstate import StateStore
with StateStore() as store:
    store.setup()
    store.create_conversation("c1")
"""


def test_embedded_status_and_stop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "pg"
    assert main(["embedded", "status", "--data-dir", str(data)]) == 1
    assert "no embedded Postgres running" in capsys.readouterr().out

    env = {k: v for k, v in os.environ.items() if k not in ("PGAGENTSTATE_DSN", "DATABASE_URL")}
    proc = subprocess.run([sys.executable, "-c", START], env={**env, "PGAGENTSTATE_DATA_DIR": str(data)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "keeps running after this process exits" in proc.stderr and "embedded stop" in proc.stderr
    try:
        # The process has exited; its server has not.
        assert main(["embedded", "status", "--data-dir", str(data), "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert status["running"] and status["pid"] > 0 and status["data_dir"] == str(data.resolve())
    finally:
        assert main(["embedded", "stop", "--data-dir", str(data)]) == 0
    assert f"pid {status['pid']}" in capsys.readouterr().out
    assert main(["embedded", "status", "--data-dir", str(data)]) == 1
    assert not (data / "postmaster.pid").exists()
    assert main(["embedded", "stop", "--data-dir", str(data)]) == 0  # nothing to stop is not an error
