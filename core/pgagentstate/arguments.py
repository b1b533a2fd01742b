"""Checks of the store methods' non-text arguments: counts, positions, versions, durations, times and lists of
names. A wrong type or a value outside its column's range gets an :class:`~pgagentstate.errors.InvalidInput`
naming the argument, before anything is sent (not a ``TypeError`` from a comparison, nor a ``DatabaseError``
from the server: ``'10'``, ``2.5``, ``-1``, ``10**20``, NaN, ``1e300``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from .codec import DEFAULT_LIMITS, Limits, check_id
from .errors import InvalidInput

BIGINT = 2**63 - 1  # limits, offsets, versions and seqs are bigint on the server (or compared with one)
INT = 2**31 - 1  # a step's position is an integer column
#: The longest duration accepted (a ttl, a lease): longer ones leave timestamptz's range once added to now().
MAX_SECONDS = 100 * 365 * 86400.0


def integer(value: object, what: str, *, low: int = 0, high: int = BIGINT) -> int:
    """``value`` when it is an int (not a bool) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} must be an integer, not {type(value).__name__}", path=what)
    if not low <= value <= high:
        raise InvalidInput(f"{what} must be between {low} and {high}, not {value}", path=what)
    return value


def optional_integer(value: object, what: str, *, low: int = 0, high: int = BIGINT) -> int | None:
    return None if value is None else integer(value, what, low=low, high=high)


def duration(value: object, what: str) -> float:
    """``value`` in seconds when it is a finite, positive number of at most :data:`MAX_SECONDS`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what} must be a number of seconds, not {type(value).__name__}", path=what)
    seconds = float(value)
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS):
        raise InvalidInput(f"{what} must be positive seconds up to {MAX_SECONDS:.0f}, not {value}", path=what)
    return seconds


def optional_duration(value: object, what: str) -> float | None:
    return None if value is None else duration(value, what)


def timestamp(value: object, what: str) -> datetime | None:
    """``value`` when it is a datetime or None."""
    if value is not None and not isinstance(value, datetime):
        raise InvalidInput(f"{what} must be a datetime, not {type(value).__name__}", path=what)
    return value


def epoch(value: object, what: str) -> datetime:
    """A Unix timestamp (seconds, a finite number in datetime's range) as an aware UTC datetime."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what} must be a number of seconds since the epoch, not {type(value).__name__}", path=what)
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (ValueError, OverflowError, OSError) as exc:
        raise InvalidInput(f"{what} is not a time: {value!r}", path=what) from exc


def items(value: object, what: str) -> list[Any]:
    """A list of values (a list or tuple): a mapping or a string is one value, not a list of its keys or
    characters, and is refused rather than stored piece by piece."""
    if not isinstance(value, list | tuple):
        raise InvalidInput(f"{what} must be a list, not {type(value).__name__}", path=what)
    return list(value)


def names(value: object, what: str, limits: Limits = DEFAULT_LIMITS) -> list[str] | None:
    """A list of names (event kinds, ...); a string is one name, not its characters."""
    if value is None:
        return None
    if isinstance(value, str):
        return [check_id(value, f"{what}[0]", limits)]
    if not isinstance(value, Iterable):
        raise InvalidInput(f"{what} must be a list of strings, not {type(value).__name__}", path=what)
    return [check_id(v, f"{what}[{i}]", limits) for i, v in enumerate(value)]
