"""The project's shape: both halves of the package install together, the sync twin is generated, and
the README's two commands are the ones CI runs."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import pgagentstate
from pgagentstate import AsyncStateStore, AsyncTurn, StateStore, Turn

ROOT = Path(__file__).resolve().parents[2]


def test_editable_install_exposes_core_and_adapters() -> None:
    paths = {Path(p).resolve() for p in pgagentstate.__path__}
    assert (ROOT / "core" / "pgagentstate").resolve() in paths
    adapters = ROOT / "adapters" / "pgagentstate"
    if any(adapters.glob("*/__init__.py")):
        assert adapters.resolve() in paths


@pytest.mark.slow
def test_wheel_contains_both_halves(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)
    (wheel,) = tmp_path.glob("pgagentstate-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"pgagentstate/{p.relative_to(ROOT / 'core' / 'pgagentstate')}"
                for p in (ROOT / "core" / "pgagentstate").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    expected |= {f"pgagentstate/{p.relative_to(ROOT / 'adapters' / 'pgagentstate')}"
                 for p in (ROOT / "adapters" / "pgagentstate").rglob("*.py") if "__pycache__" not in p.parts}
    expected.discard("pgagentstate/API_READY")
    missing = sorted(expected - names)
    assert not missing, missing
    assert "pgagentstate/py.typed" in names
    # The library and nothing else: the refund application, its scripted models and service stand-ins
    # live in examples/ and never ship.
    assert not [n for n in names if n.startswith(("examples/", "tests/", "benchmarks/"))]
    assert not [n for n in names if "demo" in n or "refund" in n or "scripted" in n], sorted(names)
    with zipfile.ZipFile(wheel) as archive:
        shipped = {archive.read(n) for n in names if n.endswith(".py")}
    copied = [p for p in (ROOT / "examples").rglob("*.py") if p.stat().st_size and p.read_bytes() in shipped]
    assert not copied, copied


@pytest.mark.slow
def test_the_wheel_alone_imports_with_no_framework_installed(tmp_path: Path) -> None:
    """A user who installs the library without an extra gets every core module importable, and no
    framework comes with it (the adapters import theirs only when used)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)
    (wheel,) = tmp_path.glob("pgagentstate-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, capture_output=True)
    probe = (
        "import importlib, importlib.util, pkgutil, pgagentstate\n"
        "frameworks = ['langgraph', 'langchain_core', 'google.adk', 'agents', 'redis', 'uvicorn']\n"
        "present = [f for f in frameworks if importlib.util.find_spec(f.split('.')[0]) is not None]\n"
        "assert not present, present\n"
        "core = [m.name for m in pkgutil.walk_packages(pgagentstate.__path__, 'pgagentstate.')\n"
        "        if not m.name.startswith(('pgagentstate.langgraph', 'pgagentstate.adk',\n"
        "                                  'pgagentstate.openai_agents'))]\n"
        "for name in core:\n"
        "    importlib.import_module(name)\n"
        "print(len(core))\n"
    )
    done = subprocess.run([str(python), "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 20  # the core's modules, really imported


def test_sync_store_is_generated_from_async() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_sync.py"), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(("sync_cls", "async_cls"), [(StateStore, AsyncStateStore), (Turn, AsyncTurn)])
def test_sync_and_async_apis_match(sync_cls: type, async_cls: type) -> None:
    def api(cls: type) -> dict[str, list[str]]:
        return {name: list(inspect.signature(member).parameters)
                for name, member in inspect.getmembers(cls, callable) if not name.startswith("_")}

    assert api(sync_cls) == api(async_cls)
    assert api(sync_cls), "no public methods found"


def test_readme_first_screen_has_the_two_commands_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = readme.split("\n---", 1)[0]
    commands = [line.strip() for line in first_screen.splitlines() if line.startswith("    ")]
    assert len(commands) == 2, commands
    demo, tests = commands
    assert demo.endswith("&& .venv/bin/python examples/demo.py")
    assert (ROOT / "examples" / "demo.py").is_file()  # tests/examples/test_demo_command.py runs it
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    body = re.search(r"readme_tests\(\) \{\n\s*(.*?) \"\$@\"\n", ci)
    assert body is not None
    assert body.group(1) == tests


def test_every_public_name_is_importable() -> None:
    missing = [name for name in pgagentstate.__all__ if not hasattr(pgagentstate, name)]
    assert not missing
    assert len(pgagentstate.__all__) == len(set(pgagentstate.__all__))
