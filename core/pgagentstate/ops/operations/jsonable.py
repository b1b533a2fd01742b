"""Results of the operator operations as plain JSON values (for ``--json``, the viewer and exports)."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from typing import Any


def to_jsonable(value: Any) -> Any:
    """Any result of these operations as plain JSON values (datetimes as ISO 8601 text, bytes as base64)."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value
