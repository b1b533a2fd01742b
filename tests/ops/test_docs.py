"""The docs run: every ```python block whose first line is ``# runnable`` is executed, each in its own
process, against a fresh database per document; every Python block of the docs is such a block; and the API
reference names every public method."""

from __future__ import annotations

import inspect
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgagentstate import AsyncStateStore, StateStore
from pgagentstate.ops import operations

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
MARK = "# runnable"


def runnable_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, code) of each runnable block of a document."""
    text = path.read_text(encoding="utf-8")
    out = []
    for match in BLOCK.finditer(text):
        code = match.group(1)
        if code.lstrip().startswith(MARK):
            out.append((text.count("\n", 0, match.start()) + 2, code))
    return out


DOCUMENTS = sorted(p for p in DOCS.glob("*.md") if runnable_blocks(p))

# An opening or closing code fence, indented or not (a block in a list item is still a block).
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\s`]*)")
PYTHON = {"python", "py", "python3"}
# Documents whose Python blocks are not all runnable yet (empty once every document is converted).
NOT_YET_RUNNABLE: set[str] = set()


def python_block_lines(text: str) -> list[int]:
    """Line number of the first line inside each Python code block, however it is fenced."""
    out: list[int] = []
    fence = ""
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match is None:
            continue
        if not fence:
            fence = match.group(1)
            if match.group(2).lower() in PYTHON:
                out.append(number + 1)
        elif match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) and not match.group(2):
            fence = ""
    return out


def not_runnable(path: Path) -> list[int]:
    """Python blocks of a document that the docs run would skip."""
    runnable = {line for line, _ in runnable_blocks(path)}
    return [line for line in python_block_lines(path.read_text(encoding="utf-8")) if line not in runnable]


def test_the_docs_have_runnable_examples() -> None:
    names = {p.name for p in DOCUMENTS}
    assert {"quickstart.md", "concepts.md", "operations.md", "api.md", "adk.md", "openai_agents.md",
            "security.md"} <= names, names
    assert sum(len(runnable_blocks(p)) for p in DOCUMENTS) >= 10


def test_every_python_block_in_the_docs_runs() -> None:
    problems = [f"docs/{doc.name}:{line}" for doc in sorted(DOCS.glob("*.md")) if doc.name not in NOT_YET_RUNNABLE
                for line in not_runnable(doc)]
    assert not problems, (
        "these ```python blocks are not run in CI: make each one a complete example whose first line is "
        "`# runnable` (or fence configuration as ```text / ```ini):\n" + "\n".join(problems)
    )
    stale = sorted(name for name in NOT_YET_RUNNABLE if not not_runnable(DOCS / name))
    assert not stale, f"every Python block of {stale} runs now: remove them from NOT_YET_RUNNABLE"


def test_the_check_finds_blocks_that_would_not_run(tmp_path: Path) -> None:
    doc = tmp_path / "example.md"
    doc.write_text(
        "```python\n# runnable\nprint(1)\n```\n"  # 2: runs
        "```python\nprint(2)\n```\n"  # 6: no mark
        "- a list item:\n\n  ```py\n  # runnable\n  print(3)\n  ```\n"  # 11: indented, the runner skips it
        "~~~python\n# runnable\nprint(4)\n~~~\n"  # 15: tilde fence, the runner skips it
        "````text\n```python\nnot a block: inside a text fence\n```\n````\n"
        "```bash\npip install pgagentstate\n```\n",
        encoding="utf-8",
    )
    assert [line for line, _ in runnable_blocks(doc)] == [2]
    assert not_runnable(doc) == [6, 11, 15]


@pytest.fixture
def fresh_database(dsn: str) -> Iterator[str]:
    """A database of its own, so the docs can use the default schema like a reader would."""
    name = f"docs_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: p.name)
def test_runnable_blocks_run(doc: Path, fresh_database: str, tmp_path: Path) -> None:
    env = {**os.environ, "PGAGENTSTATE_DSN": fresh_database, "PGAGENTSTATE_DATA_DIR": str(tmp_path / "pg")}
    env.pop("DATABASE_URL", None)
    for line, code in runnable_blocks(doc):
        script = tmp_path / f"{doc.stem}_{line}.py"
        script.write_text(code, encoding="utf-8")
        proc = subprocess.Popen([sys.executable, "-X", "faulthandler", str(script)], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            out, err = proc.communicate()
            pytest.fail(f"{doc.name}:{line} hung for 180 s:\n{out}\n{err}")
        assert proc.returncode == 0, f"{doc.name}:{line} failed:\n{out}\n{err}"


def _public(cls: type) -> set[str]:
    return {n for n, m in inspect.getmembers(cls) if not n.startswith("_") and callable(m)}


def test_the_api_reference_names_every_public_method() -> None:
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    names = _public(StateStore) | _public(AsyncStateStore)
    names |= {n for n in operations.__all__ if inspect.isfunction(getattr(operations, n))}
    missing = sorted(n for n in names if f"{n}(" not in text)
    assert not missing, f"docs/api.md does not document: {missing}"


def test_docs_examples_connect_the_way_the_library_does() -> None:
    """No example falls back to a server of its own (it hung 30 s on a machine without one and wrote into
    the `postgres` database of a machine with one): they use the library's resolution (environment, else
    the embedded Postgres)."""
    hardcoded = [f"docs/{doc.name}:{line}" for doc in DOCUMENTS for line, code in runnable_blocks(doc)
                 if re.search(r"[\"']postgres(ql)?://", code)]
    assert not hardcoded, hardcoded


def test_user_docs_state_current_facts_in_their_own_words() -> None:
    """A user has never seen the issue texts ("the brief") and needs no development log: rounds of work,
    what was tried and dropped, go to git and docs/dev/."""
    pages = [*DOCS.glob("*.md"), DOCS.parent / "README.md", DOCS.parent / "examples" / "README.md"]
    words = re.compile(r"\bthe brief\b|\bbrief's\b|\b(this|previous|last|earlier) rounds?\b|tried and dropped",
                       re.IGNORECASE)
    found = [f"{page.name}:{n}: {line.strip()}" for page in pages
             for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1) if words.search(line)]
    assert not found, "\n".join(found)


def test_install_commands_name_the_source_tree() -> None:
    """The package is not on PyPI: `pip install pgagentstate` would fail (or install someone else's)."""
    found = [f"{page.name}:{n}" for page in [*DOCS.glob("*.md"), DOCS.parent / "README.md"]
             for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"pip install ['\"]?pgagentstate\b", line)]
    assert not found, found


EXAMPLES = DOCS.parent / "examples"
# What a fresh clone's shell does not have: no server is configured, the library picks the embedded one.
UNSET = ("PGAGENTSTATE_DSN", "DATABASE_URL", "PGAGENTSTATE_TEST_DSN", "PGAGENTSTATE_DATA_DIR", "PGHOST", "PGPORT",
         "PGDATABASE", "PGUSER", "OPENAI_API_KEY", "GOOGLE_API_KEY")


def _run_bounded(argv: list[str], cwd: Path, env: dict[str, str], what: str) -> None:
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate()
        pytest.fail(f"{what} hung for 300 s:\n{out[-3000:]}\n{err[-3000:]}")
    assert proc.returncode == 0, f"{what} failed:\n{out[-3000:]}\n{err[-3000:]}"


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("PGAGENTSTATE_FRESH_CLONE") != "1",
    reason="about 90 s on a quiet machine; .ci/run sets PGAGENTSTATE_FRESH_CLONE=1 in its embedded-Postgres pass",
)
def test_a_fresh_clone_runs_every_docs_example_and_every_example_script_twice(tmp_path: Path) -> None:
    """No environment at all: every runnable docs block and every ``examples/*.py`` starts the embedded
    Postgres (in the working directory, as a user's first run does) and runs twice on the same database.
    Several minutes; each process is bounded (300 s), and the embedded server is stopped afterwards."""
    from pgagentstate import embedded

    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env["PGAGENTSTATE_DEMO_SCRIPTED"] = "1"  # the examples' scripted models, never a real one
    scripts = [(f"{doc.name}:{line}", tmp_path / f"{doc.stem}_{line}.py", code)
               for doc in DOCUMENTS for line, code in runnable_blocks(doc)]
    for _, path, code in scripts:
        path.write_text(code, encoding="utf-8")
    runs = [(name, [sys.executable, str(path)]) for name, path, _ in scripts]
    # demo.py is the crash demo (three frameworks, worker processes, about a minute): tests/examples/
    # test_demo_command.py runs it, on the embedded server too.
    runs += [(f"examples/{p.name}", [sys.executable, str(p)]) for p in sorted(EXAMPLES.glob("*.py"))
             if p.name != "demo.py"]
    try:
        for attempt in (1, 2):
            for name, argv in runs:
                _run_bounded(argv, tmp_path, env, f"{name} (run {attempt})")
    finally:
        embedded.stop(tmp_path / ".pgagentstate" / "pg")
    assert not (tmp_path / ".pgagentstate" / "pg" / "postmaster.pid").exists()


def test_every_docs_example_says_what_it_shows() -> None:
    """An example that only asserts prints nothing when it works and a bare AssertionError when not."""
    silent = [f"docs/{doc.name}:{line}" for doc in DOCUMENTS for line, code in runnable_blocks(doc)
              if "print(" not in code]
    assert not silent, silent
