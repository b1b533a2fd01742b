"""The shape of the library, read from its source (docs/dev/architecture.md draws it): no import circle, imports
only go down the layers, the core imports no framework and no adapter, adapters hold no SQL, and no hand-written
module is a god module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HALVES = (ROOT / "core" / "pgagentstate", ROOT / "adapters" / "pgagentstate")
ADAPTERS = ("langgraph", "adk", "openai_agents")
FRAMEWORKS = ("langgraph", "langchain_core", "google", "agents", "uvicorn")
# Line budget of a hand-written module ("~500": split a module by what it holds before it passes this).
MAX_LINES = 500
# aio.py is the store facade that sync.py is generated from: it may stay one file while its methods only delegate
# to ops/ (issue 20).
EXEMPT = {"aio.py"}
OVER_BUDGET: dict[str, int] = {}
GENERATED = {"sync.py"}


def modules(roots: tuple[tuple[Path, list[str]], ...]) -> dict[str, tuple[Path, bool]]:
    """Every module below each root folder, named with the root's prefix: dotted name -> (file, is a package)."""
    out: dict[str, tuple[Path, bool]] = {}
    for root, prefix in roots:
        for path in root.rglob("*.py"):
            parts = [*prefix, *path.relative_to(root).with_suffix("").parts]
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


MODULES = modules(tuple((half, ["pgagentstate"]) for half in HALVES))
# The example application, as its scripts see it (examples/ on sys.path: ``refund.*`` and ``<framework>_agent``).
EXAMPLES = modules(((ROOT / "examples", []),))


def imported(
    name: str, path: Path, is_pkg: bool, known: dict[str, tuple[Path, bool]] = MODULES
) -> tuple[set[str], set[str]]:
    """(modules of ``known`` it imports, top-level names of everything else it imports), anywhere in the file:
    a function-level import is still an import."""
    tops = {k.split(".")[0] for k in known}
    ours: set[str] = set()
    others: set[str] = set()
    package = name.split(".") if is_pkg else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            targets = [(base if node.level else node.module or "", a.name) for a in node.names]
        else:
            continue
        for module, member in targets:
            if module.split(".")[0] not in tops:
                top = module.split(".")
                others.add(".".join(top[:2]) if top[0] == "google" else top[0])  # google.adk, google.genai
                continue
            if member and f"{module}.{member}" in known:
                ours.add(f"{module}.{member}")
                continue
            while module not in known and "." in module:
                module = module.rsplit(".", 1)[0]
            ours.add(module)
    return ours, others


GRAPH = {name: imported(name, path, is_pkg) for name, (path, is_pkg) in MODULES.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges[v]:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def layer(name: str) -> int:
    """0 foundation (errors, models, codec, crypto, sealing, queries...), 1 operations (ops/), 2 the stores (aio,
    generated sync), 3 the public package, 4 operator interfaces (ui/, cli), 5 adapters."""
    parts = name.split(".")
    if len(parts) > 1 and parts[1] in ADAPTERS:
        return 5
    if len(parts) > 1 and parts[1] in ("ui", "cli"):
        return 4
    if len(parts) == 1:
        return 3
    if parts[1] in ("aio", "sync"):
        return 2
    if parts[1] == "ops":
        return 1
    return 0


def test_the_graph_is_read() -> None:
    assert {"pgagentstate.aio", "pgagentstate.ops.events", "pgagentstate.langgraph.checkpointer"} <= set(MODULES)
    assert "pgagentstate.ops.events" in GRAPH["pgagentstate.aio"][0]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the check can fail


def test_no_import_circle() -> None:
    assert cycles({name: ours for name, (ours, _) in GRAPH.items()}) == []


def test_no_import_circle_in_the_examples() -> None:
    graph = {name: imported(name, path, is_pkg, EXAMPLES)[0] for name, (path, is_pkg) in EXAMPLES.items()}
    assert {"refund.workflow", "refund.agents"} <= graph["langgraph_agent"]  # the graph is read
    assert cycles(graph) == []


def test_the_library_never_imports_the_examples() -> None:
    tops = {name.split(".")[0] for name in EXAMPLES}
    assert {name: others & tops for name, (_, others) in GRAPH.items() if others & tops} == {}


def test_imports_go_down_the_layers() -> None:
    upward = [
        f"{name} ({layer(name)}) imports {target} ({layer(target)})"
        for name, (ours, _) in GRAPH.items()
        for target in ours
        if layer(target) > layer(name)
        or (layer(name) == layer(target) == 5 and name.split(".")[1] != target.split(".")[1])  # adapter to adapter
    ]
    assert upward == []


def test_the_core_imports_no_framework() -> None:
    found = {
        name: sorted(others & {*FRAMEWORKS, "google.adk", "google.genai"})
        for name, (_, others) in GRAPH.items()
        if layer(name) < 5
    }
    assert {name: names for name, names in found.items() if names} == {}


SQL = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\S+\s+SET|DELETE\s+FROM)\b", re.IGNORECASE | re.DOTALL)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_adapters_hold_no_sql(adapter: str) -> None:
    strings = [
        (path.name, node.value)
        for path in (HALVES[1] / adapter).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value)
    ]
    assert strings == []


def test_no_god_module() -> None:
    sizes = {
        str(path.relative_to(half)): len(path.read_text(encoding="utf-8").splitlines())
        for half in HALVES
        for path in half.rglob("*.py")
    }
    over = {
        name: n
        for name, n in sizes.items()
        if name not in GENERATED | EXEMPT and n > OVER_BUDGET.get(name, MAX_LINES)
    }
    assert over == {}, f"split these by what they hold (budget {MAX_LINES} lines): {over}"
    assert set(OVER_BUDGET) | EXEMPT <= set(sizes), "an exception names a file that is gone"
