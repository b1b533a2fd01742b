"""Run ``mypy --strict`` on core/ and adapters/ as the one package they become when installed, and on
the examples (``examples/*.py`` and the ``refund`` package they share) against it.

mypy cannot follow a regular package split across two folders (core/pgagentstate and
adapters/pgagentstate, joined at run time by ``pkgutil.extend_path``), so this builds the merged tree
out of symlinks in a temporary folder and checks that; errors are reported with the real paths.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="pgagentstate-mypy-") as tmp:
        merged = Path(tmp) / "pgagentstate"
        merged.mkdir()
        for half in (ROOT / "core" / "pgagentstate", ROOT / "adapters" / "pgagentstate"):
            for entry in (half.iterdir() if half.is_dir() else ()):
                if entry.name != "__pycache__":
                    (merged / entry.name).symlink_to(entry)
        examples = ROOT / "examples"
        modules = [arg for p in sorted(examples.glob("*.py")) for arg in ("-m", p.stem)]
        proc = subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--config-file", str(ROOT / "pyproject.toml"),
             "-p", "pgagentstate", "-p", "refund", *modules],
            cwd=tmp, capture_output=True, text=True,
            env={"MYPYPATH": f"{tmp}:{examples}", "PATH": "/usr/bin:/bin"},
        )
        out = (proc.stdout + proc.stderr).replace(str(merged), "pgagentstate").replace(f"{examples}/", "examples/")
        print(out, end="")
        return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
