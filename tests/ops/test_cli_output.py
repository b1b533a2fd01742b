"""What the operator commands print is safe and usable: customer data cannot drive the terminal, an export
is private wherever it is written, and a closed pipe is not an error."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from pgagentstate import NewEvent, StateRef, StateStore

# Set the terminal's title, clear the screen, erase with backspaces, ring the bell, a C1 CSI (red) and a
# right-to-left override: each would act on an operator's terminal if printed raw.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x08\x08\x9b31m\u202eevil\r"
RAW = ("\x1b", "\x07", "\x08", "\x9b", "\u202e", "\r")



def test_customer_data_cannot_drive_the_terminal(cli, store: StateStore) -> None:  # type: ignore[no-untyped-def]
    store.create_conversation("c1", app="refunds" + HOSTILE, user_id="u1", metadata={"note": HOSTILE})
    store.append_events("c1", [NewEvent({"role": "customer", "text": "hi" + HOSTILE}, author="customer")])
    store.put_state(StateRef.conversation("c1"), {"email": HOSTILE})
    for argv in (("conversations",), ("show", "c1"), ("state", "c1"), ("state", "c1", "--json"),
                 ("show", "c1", "--json"), ("export", "u1")):
        code, out, _ = cli(*argv)
        assert code == 0, argv
        assert not any(ch in out for ch in RAW), (argv, out)
        assert "\\u001b" in out, (argv, out)  # shown, escaped, not dropped


def test_export_to_a_file_is_private_and_does_not_follow_a_symlink(cli, store: StateStore,  # type: ignore[no-untyped-def]
                                                                    tmp_path: Path) -> None:
    store.create_conversation("c1", user_id="u1")
    existing = tmp_path / "existing.json"
    existing.write_text("old")
    existing.chmod(0o644)
    code, _, _ = cli("export", "u1", "-o", str(existing))
    assert code == 0 and stat.S_IMODE(existing.stat().st_mode) == 0o600
    assert '"u1"' in existing.read_text()

    victim = tmp_path / "victim"
    victim.write_text("do not touch")
    link = tmp_path / "planted.json"
    link.symlink_to(victim)
    code, _, _ = cli("export", "u1", "-o", str(link))
    assert code == 0 and victim.read_text() == "do not touch"
    assert not link.is_symlink() and stat.S_IMODE(link.stat().st_mode) == 0o600
    assert '"u1"' in link.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.json", "planted.json", "victim"]


def test_export_into_a_closed_pipe_is_not_an_error(dsn: str, schema: str, store: StateStore) -> None:
    store.create_conversation("c1", user_id="u1")
    # More than a pipe holds, so the command is still writing when the reader has gone.
    store.append_events("c1", [NewEvent({"text": "x" * 1000}) for _ in range(300)])
    proc = subprocess.run(
        f"'{sys.executable}' -m pgagentstate.cli export u1 --dsn '{dsn}' --schema {schema} | head -c 10",
        shell=True, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONUNBUFFERED": "0"},
    )
    assert len(proc.stdout) == 10
    assert "BrokenPipeError" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
