"""Declared shapes for state documents: writes that do not fit are rejected before they reach the
database, and stored documents that do not fit (an old version, a tampered row) raise instead of
reaching the agent.

    from pydantic import BaseModel

    class Refund(BaseModel):
        order_id: str | None = None
        email: str | None = None
        step: int = 0

    store = StateStore(dsn, state_schemas={"refund": PydanticSchema(Refund)})

A schema applies to every state document with that name (``StateRef.conversation(cid, "refund")``).
Patches are checked key by key against the model's fields; whole documents against the whole model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from .errors import ValidationError


@runtime_checkable
class StateSchema(Protocol):
    def validate_document(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The document as it should be stored, or raise ValueError."""
        ...

    def validate_patch(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        """The top-level keys as they should be stored, or raise ValueError."""
        ...


class PydanticSchema:
    """A :class:`StateSchema` from a pydantic model (pydantic is imported only when this is used)."""

    def __init__(self, model: Any) -> None:
        from pydantic import TypeAdapter

        self.model = model
        self._fields = {name: TypeAdapter(field.annotation) for name, field in model.model_fields.items()}
        self._extra = model.model_config.get("extra")

    def validate_document(self, data: Mapping[str, Any]) -> dict[str, Any]:
        validated: dict[str, Any] = self.model.model_validate(dict(data)).model_dump(mode="json")
        return validated

    def validate_patch(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in patch.items():
            adapter = self._fields.get(key)
            if adapter is None:
                if self._extra == "forbid":
                    raise ValueError(f"{key!r} is not a field of {self.model.__name__}")
                out[key] = value
                continue
            out[key] = adapter.dump_python(adapter.validate_python(value), mode="json")
        return out


def check_document(
    schemas: Mapping[str, StateSchema], name: str, data: Mapping[str, Any], *, stored: bool
) -> dict[str, Any]:
    schema = schemas.get(name)
    if schema is None:
        return dict(data)
    try:
        return schema.validate_document(data)
    except ValueError as exc:
        where = "stored state document" if stored else "state document"
        raise ValidationError(f"{where} {name!r} does not fit its schema: {exc}") from exc


def check_patch(schemas: Mapping[str, StateSchema], name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
    schema = schemas.get(name)
    if schema is None:
        return dict(patch)
    try:
        return schema.validate_patch(patch)
    except ValueError as exc:
        raise ValidationError(f"state patch of {name!r} does not fit its schema: {exc}") from exc
