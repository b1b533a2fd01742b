"""The frameworks' own test suites, downloaded as released sdists at test time and run against our classes.

Nothing of upstream is copied into this repository: ``sdist(name, version)`` runs
``pip download --no-deps --no-binary :all: NAME==VERSION`` once into a cache folder (``.pgagentstate/upstream``
beside the checkout, or ``$PGAGENTSTATE_UPSTREAM_CACHE``), unpacks it and returns the unpacked tree.
``run_pytest`` runs part of that tree in a subprocess (with a plugin of ours that swaps our classes into the
upstream fixtures) and returns pytest's outcome counts, read from its JUnit XML report.

These suites take minutes, so they run once per CI run, not in every pass: the tests under ``tests/upstream``
are skipped unless ``PGAGENTSTATE_UPSTREAM=1`` (``.ci/run`` sets it for one dedicated step).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("PGAGENTSTATE_UPSTREAM_CACHE", ROOT / ".pgagentstate" / "upstream"))
ENABLED = os.environ.get("PGAGENTSTATE_UPSTREAM") == "1"


def sdist(name: str, version: str) -> Path:
    """The unpacked sdist of ``name==version`` (downloaded once, under a file lock for parallel callers)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    target = CACHE / f"{name}-{version}"
    with open(CACHE / f".{name}-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists():
            return _root_of(target)
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                 "-d", tmp, f"{name}=={version}"],
                check=True, timeout=600,
            )
            archive = next(Path(tmp).glob("*.tar.gz"))
            with tarfile.open(archive) as tar:
                tar.extractall(target, filter="data")
        (target / ".complete").touch()
        return _root_of(target)


def _root_of(target: Path) -> Path:
    """An sdist unpacks into one ``name-version/`` folder: return it."""
    entries = [p for p in target.iterdir() if p.is_dir()]
    return entries[0] if len(entries) == 1 else target


@dataclass
class Outcome:
    """pytest's counts for one upstream run, with the ids of the tests that failed or errored."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failures: list[str] = field(default_factory=list)
    output: str = ""

    @property
    def ran(self) -> int:
        return self.passed + self.failed + self.errors


def run_pytest(args: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 1800) -> Outcome:
    """Run ``pytest ARGS`` in ``cwd`` in a subprocess; the counts come from its JUnit XML report."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}", *args],
            cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout,
        )
        out = Outcome(output=proc.stdout[-20_000:] + proc.stderr[-5_000:])
        if not report.exists():
            return out
        for case in ET.parse(report).getroot().iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            if case.find("failure") is not None:
                out.failed += 1
                out.failures.append(name)
            elif case.find("error") is not None:
                out.errors += 1
                out.failures.append(name)
            elif case.find("skipped") is not None:
                out.skipped += 1
            else:
                out.passed += 1
        return out
