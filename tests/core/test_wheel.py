"""The built wheel is the library and nothing else: no example application inside it, and it installs and
imports in a fresh virtual environment that has none of the frameworks, each adapter then saying which extra
to install.

Offline: the wheel is installed by the fresh environment's own pip with ``--no-deps --no-index``, and its
required (non-extra) dependencies are linked in from this test run's own environment, resolved from the wheel's
``Requires-Dist`` (never a framework: those are extras).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = {"langgraph": "langgraph", "adk": "adk", "openai_agents": "openai-agents"}
FRAMEWORK_MODULES = ("langgraph", "langchain_core", "google.adk", "google.genai", "agents", "openai", "uvicorn")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True)
    (built,) = out.glob("pgagentstate-*.whl")
    return built


def required(wheel: Path) -> list[str]:
    """Distribution names the wheel needs without extras, and what they need (with the extras asked for, such as
    ``psycopg[binary]``), transitively, as installed in this environment."""
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(meta_name).decode())
    todo = [(Requirement(r), "") for r in meta.get_all("Requires-Dist") or []]
    extras: dict[str, set[str]] = {}
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue  # an extra nobody asked for (a framework), or not for this platform
        dist = metadata.distribution(req.name)
        name = dist.metadata["Name"]
        new = {""} | set(req.extras)
        if name in extras and new <= extras[name]:
            continue
        extras[name] = extras.get(name, set()) | new
        todo += [(Requirement(r), e) for r in dist.requires or [] for e in sorted(new)]
    return list(extras)


def link_dependencies(names: list[str], site: Path) -> None:
    """Make the distributions ``names`` importable in ``site`` by linking their top-level files and metadata."""
    for name in names:
        dist = metadata.distribution(name)
        base = Path(str(dist.locate_file("")))
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops - {"__pycache__", "bin"}:
            target = site / top
            if not target.exists() and (base / top).exists():
                target.symlink_to(base / top)


# Names only the example application defines (examples/refund, examples/*_agent.py).
EXAMPLE_MARKERS = ("ScriptedRefund", "RefundTools", "WebhookService", "RoundRobinProxy", "Qual é seu email")


def test_the_wheel_holds_no_example_code(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        texts = {n: zf.read(n).decode("utf-8", "replace") for n in names if n.endswith(".py")}
    assert all(n.startswith(("pgagentstate/", "pgagentstate-")) for n in names), names
    assert [n for n in names if any(w in n.lower() for w in ("demo", "refund", "scripted", "example"))] == []
    assert {n: m for n, t in texts.items() for m in EXAMPLE_MARKERS if m in t} == {}
    assert any(n.startswith("pgagentstate/langgraph/") for n in names)  # the adapters are in it, though
    assert "pgagentstate/sql/operations/retention.sql" in names
    # The markers do find the example code where it is.
    assert all(any(m in p.read_text(encoding="utf-8") for p in (ROOT / "examples").rglob("*.py"))
               for m in EXAMPLE_MARKERS)


@pytest.mark.slow
def test_the_wheel_installs_and_imports_without_any_framework(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=True).create(env_dir)  # ensurepip: offline, from the interpreter's own wheel
    python = env_dir / "bin" / "python"
    # The fresh environment's own pip (this run's pip would also uninstall the editable checkout it runs from).
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    deps = required(wheel)
    assert "psycopg" in deps and not {"langgraph", "google-adk", "openai-agents"} & set(deps)
    link_dependencies(deps, site)
    code = """
import importlib, json, pkgutil, sys
import pgagentstate
from pgagentstate import StateStore, AsyncStateStore
core = [m.name for m in pkgutil.walk_packages(pgagentstate.__path__, "pgagentstate.")
        if m.name.split(".")[1] not in ("langgraph", "adk", "openai_agents")]
for name in core:
    importlib.import_module(name)
adapters = {}
for name in ("langgraph", "adk", "openai_agents"):
    try:
        importlib.import_module("pgagentstate." + name)
    except ImportError as exc:
        adapters[name] = str(exc)
frameworks = sorted(m for m in sys.modules if m.split(".")[0] in ("langgraph", "langchain_core", "agents", "openai",
                    "uvicorn") or m.startswith(("google.adk", "google.genai")))
print(json.dumps({"file": pgagentstate.__file__, "core": core, "adapters": adapters, "frameworks": frameworks}))
"""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=clean, cwd=tmp_path,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["file"].startswith(str(site)), found["file"]  # the installed wheel, not this checkout
    assert {"pgagentstate.ops.operations.retention", "pgagentstate.ui.server", "pgagentstate.cli"} <= set(found["core"])
    assert found["frameworks"] == []
    assert found["adapters"] == {
        name: found["adapters"][name] for name in EXTRAS
    }, "an adapter imported although its framework is not installed"
    for name, extra in EXTRAS.items():
        assert f"pip install 'pgagentstate[{extra}]'" in found["adapters"][name]
    cli = subprocess.run([str(env_dir / "bin" / "pgagentstate"), "--help"], capture_output=True, text=True,
                         env=clean, timeout=60)  # the console script the wheel declares
    assert cli.returncode == 0 and "doctor" in cli.stdout and "demo" not in cli.stdout, cli.stdout + cli.stderr
