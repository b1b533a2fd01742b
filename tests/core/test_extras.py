"""The extras' lower bounds are versions that work: each is met by the versions the suite runs against, and
none is below the first version with what the docs and examples use."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORK_EXTRAS = ("langgraph", "adk", "openai-agents", "otel", "redis")
# The first version of a distribution that has what our docs, examples or adapters import.
NEEDS = {"openai-agents": Version("0.21")}  # agents.testing (ScriptedModel, function_call) appears in 0.21


def extras() -> dict[str, list[Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {name: [Requirement(r) for r in reqs] for name, reqs in project["optional-dependencies"].items()}


def lower_bound(req: Requirement) -> Version:
    (bound,) = [Version(s.version) for s in req.specifier if s.operator == ">="]
    return bound


def test_every_framework_extra_has_a_lower_bound_the_tested_versions_meet() -> None:
    found = extras()
    for extra in FRAMEWORK_EXTRAS:
        for req in found[extra]:
            installed = Version(metadata.version(req.name))
            assert installed in req.specifier, f"[{extra}] {req}: the suite runs {installed}"
            assert lower_bound(req) >= NEEDS.get(req.name, Version("0")), f"[{extra}] {req}: needs {NEEDS[req.name]}"
