"""Generate core/pgagentstate/sync.py (StateStore) from core/pgagentstate/aio.py (AsyncStateStore).

The async store is the source of truth; the sync one is a mechanical translation, so the two can never
disagree. ``--check`` exits 1 when sync.py is not what this script would write (run in CI and tests).
A line ending in ``# sync: <code>`` is replaced by <code> (same indentation) in the sync version;
``# sync: -`` drops the line, ``# sync: -block`` drops it with the lines indented under it (code that only
the asyncio store has, where the sync one would be left with ``pass`` or ``if False:``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "core" / "pgagentstate" / "aio.py"
TARGET = ROOT / "core" / "pgagentstate" / "sync.py"

# Order matters: longer names first.
WORDS = [
    ("AsyncConnectionPool", "ConnectionPool"),
    ("AsyncConnection", "Connection"),
    ("AsyncCursor", "Cursor"),
    ("AsyncStateStore", "StateStore"),
    ("AsyncTurn", "Turn"),
    ("AsyncInbox", "Inbox"),
    ("_AsyncSource", "_SyncSource"),
    ("AsyncIterator", "Iterator"),
    ("AsyncExitStack", "ExitStack"),
    ("asynccontextmanager", "contextmanager"),
    ("enter_async_context", "enter_context"),
    ("asyncio.Lock", "threading.Lock"),
    ("asyncio.sleep", "time.sleep"),
    ("__aenter__", "__enter__"),
    ("__aexit__", "__exit__"),
    ("aclose", "close"),
    ("aexecute", "execute"),  # RedisTier: the async and sync calls of the Redis tier
]
SUBS = [
    (re.compile(r"\basync def "), "def "),
    (re.compile(r"\basync with "), "with "),
    (re.compile(r"\basync for "), "for "),
    (re.compile(r"\bawait "), ""),
    (re.compile(r"^import asyncio$", re.MULTILINE), "import threading\nimport time"),
]

HEADER = '''"""StateStore: the synchronous store.

GENERATED from aio.py by tools/gen_sync.py — do not edit; change aio.py and run the tool.
"""
'''


def convert(text: str) -> str:
    lines = []
    dropping: int | None = None  # the indentation of a block being dropped
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if dropping is not None:
            if not line.strip() or indent > dropping:
                continue
            dropping = None
        match = re.match(r"^(\s*)(.*?)\s*# sync: (.*)$", line)
        if match:
            if match[3] == "-":
                continue
            if match[3] == "-block":
                dropping = indent
                continue
            line = match[1] + match[3]
        lines.append(line)
    out = "\n".join(lines) + "\n"
    for pattern, repl in SUBS:
        out = pattern.sub(repl, out)
    for old, new in WORDS:
        out = re.sub(rf"\b{re.escape(old)}\b" if old[0].isalpha() else re.escape(old), new, out)
    # Replace the module docstring.
    out = re.sub(r'^""".*?"""\n', HEADER, out, count=1, flags=re.DOTALL)
    # Let ruff settle import order and line breaks, so the output is stable under `ruff format`.
    fixed = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--fix-only", "--quiet", "--stdin-filename", str(TARGET), "-"],
        input=out,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    return subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--quiet", "--stdin-filename", str(TARGET), "-"],
        input=fixed,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout


def main() -> int:
    generated = convert(SOURCE.read_text(encoding="utf-8"))
    if "--check" in sys.argv:
        if TARGET.read_text(encoding="utf-8") != generated:
            print(f"{TARGET} is out of date: run python tools/gen_sync.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(generated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
