"""Fixtures of the operator tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pgagentstate.cli import main


@pytest.fixture
def cli(dsn: str, schema: str, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run a command against the test schema: (exit code, stdout, stderr)."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main([argv[0], "--dsn", dsn, "--schema", schema, *argv[1:]])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
