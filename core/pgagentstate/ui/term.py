"""Plain-text rendering for the terminal: aligned tables, a progress bar, and duration/time parsing.

No dependency beyond the standard library: operators run this over ssh, in cron and in CI logs.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, TextIO

# Control characters (C0 but newline, DEL, C1) and the bidirectional overrides: printed raw, customer data
# could move the cursor, rewrite earlier lines, retitle the terminal or reorder what an operator reads.
_UNSAFE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every control character written as a ``\\uXXXX`` escape (newlines kept).

    The escape is also JSON's, so JSON output stays valid and decodes to the same value."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)?\s*$", re.IGNORECASE)
_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``15m``, ``24h``, ``7d``, ``2w``; ValueError otherwise."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 15m, 24h, 7d)")
    return float(match[1]) * _UNITS[(match[2] or "s").lower()]


def parse_version_or_time(text: str, *, now: datetime | None = None) -> int | datetime:
    """``--at`` of ``state``: a version number, an ISO 8601 time (naive = local time), or a duration ago
    (``10m`` = ten minutes ago)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            seconds = parse_duration(text)
        except ValueError:
            raise ValueError(f"--at takes a version, an ISO time or a duration ago, not {text!r}") from None
        return (now or datetime.now().astimezone()) - timedelta(seconds=seconds)
    return when if when.tzinfo else when.astimezone()


def duration_text(seconds: float) -> str:
    """``90`` -> ``1m30s``, ``86400`` -> ``1d``: the largest two units."""
    seconds = round(seconds)
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return "".join(parts)


def ago(when: datetime | None, *, now: datetime | None = None) -> str:
    """``3m ago``, ``2h ago``, ``5d ago`` (``in 4m`` for the future)."""
    if when is None:
        return "-"
    now = now or datetime.now(when.tzinfo)
    seconds = (now - when).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            text = f"{int(seconds // size)}{unit}"
            break
    else:
        text = f"{int(seconds)}s"
    return f"in {text}" if future else f"{text} ago"


def clock(when: datetime | None) -> str:
    """A timestamp in local time, to the second."""
    return "-" if when is None else when.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def short(value: Any, width: int = 60) -> str:
    """One line of at most ``width`` characters (JSON for structures)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, max_col: int = 48, whole: Sequence[str] = ()
) -> str:
    """An aligned plain-text table; cells are cut at ``max_col`` characters, except in the ``whole``
    columns (ids an operator copies into the next command, a check's explanation). Numbers align right."""
    widths_cap = [10**9 if h in whole else max_col for h in headers]
    cells = [[short("" if v is None else v, cap) for v, cap in zip(row, widths_cap, strict=True)] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    numeric = [all(_is_number(r[i]) for r in rows) and bool(rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if numeric[i] else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths, strict=True))]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(row) for row in cells]
    return "\n".join(out)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def key_values(pairs: Sequence[tuple[str, Any]]) -> str:
    """``key: value`` lines with the keys aligned."""
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in pairs)


def heading(text: str) -> str:
    return f"\n{text}\n{'=' * len(text)}"


class Progress:
    """A one-line progress bar on a terminal; on a pipe or in cron, one line per finished task."""

    def __init__(self, stream: TextIO | None = None, *, labels: dict[str, str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.labels = labels or {}
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._current: str | None = None
        self._last = (0, 0)

    def __call__(self, task: str, done: int, total: int) -> None:
        if task != self._current:
            self.finish()
            self._current = task
        self._last = (done, total)
        if self.tty:
            width = max(10, min(40, shutil.get_terminal_size((80, 20)).columns - 50))
            filled = width if total <= 0 else min(width, int(width * done / total))
            label = self.labels.get(task, task)[:30]
            self.stream.write(f"\r{label:<30} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
            self.stream.flush()

    def finish(self) -> None:
        if self._current is None:
            return
        done, total = self._last
        label = self.labels.get(self._current, self._current)
        if self.tty:
            self.stream.write("\n")
        else:
            self.stream.write(f"{label}: {done} of {total}\n")
        self.stream.flush()
        self._current = None
