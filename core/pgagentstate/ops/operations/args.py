"""Argument checks shared by the operator operations: durations and positive counts, with a typed error
naming the argument."""

from __future__ import annotations

from datetime import timedelta

from ...errors import InvalidInput

DAY = 86400.0


def seconds(value: float | timedelta | None, what: str) -> float | None:
    """``value`` (seconds or a timedelta) in seconds; :class:`InvalidInput` when negative or NaN."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not seconds >= 0:  # also rejects NaN
        raise InvalidInput(f"{what} must be a non-negative duration", path=what)
    return seconds


def positive(value: int, what: str = "limit") -> int:
    """``value`` when it is a positive integer (not a bool); else :class:`InvalidInput`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{what} must be a positive integer", path=what)
    return value
