"""Stored ADK events back into ``Event`` objects, without the Python hooks that make validation slow.

``Event.model_validate_json`` costs 15-17 us an event, most of it in Python called back from pydantic's Rust
validator: google-genai's ``BaseModel._check_field_type_mismatches`` (a before-validator on every genai model
that loops over all the model's fields to warn about model *instances* of the wrong class, which JSON cannot
contain), ``Part``'s custom ``__init__`` (which validates the part a second time, in Python mode) and
``Event._accept_convenience_kwargs`` (which copies the input to route ``message=``/``state=``/... keyword
arguments, never present in a stored event). This module builds, once, a pydantic-core validator from
``Event``'s own core schema with exactly those hooks replaced by equivalents that do nothing for JSON input:

- ``_check_field_type_mismatches``: dropped (it returns its input unchanged for a dict);
- ``Part.__init__``: replaced by what it does with a dict of keyword arguments, dropping the ``None`` values
  of its explicit keyword parameters before validating the rest;
- ``_accept_convenience_kwargs``: called only when one of its keys is present.

Two validators are built. The *lean* one has no Python hook at all: an event holding a key that
``_accept_convenience_kwargs`` routes (the lean ``Event`` refuses unknown keys) or a ``Part`` keyword given as
null (refused there) fails it, and the list is validated again with the hooks above. A hook before a model
makes pydantic-core build the model's input as a Python dict and validate that dict, where without one it
validates straight from the JSON: 1,000 stored events (``bench_adk.py``'s) take 9.1-9.8 ms lean against
11.7-12.2 ms with the hooks (``Event.model_validate_json``: about 16 ms).

Everything else (types, enums, base64 bytes, defaults, ``model_post_init``, fields set, the other
validators) is pydantic's own, so the events are the ones validation gives (tests/adk/test_adk_trusted_events.py
compares them over a corpus of rich events). A list of events is validated in one call on one JSON array.
Whatever these validators refuse, or if they cannot be built (an ADK or genai version whose schema differs), is
validated the ordinary way, so errors stay ADK's own.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

from google.adk.events import Event
from google.genai import _common as genai_common
from google.genai import types
from pydantic import ValidationError
from pydantic_core import SchemaValidator, core_schema

log = logging.getLogger("pgagentstate.adk")

_GENAI_CHECK = genai_common.BaseModel._check_field_type_mismatches.__func__
_CONVENIENCE = cast(Callable[[Any], Any], Event._accept_convenience_kwargs)  # a bound classmethod
_CONVENIENCE_FN = getattr(_CONVENIENCE, "__func__", _CONVENIENCE)
_CONVENIENCE_KEYS = frozenset(("message", "state", "route", "node_path"))
_PART_KEYWORDS = frozenset(
    name
    for name, p in inspect.signature(types.Part.__init__).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY
)


def _convenience(data: Any) -> Any:
    """``Event._accept_convenience_kwargs``, skipped when none of the keys it routes is there (it then
    returns an unchanged copy of its input)."""
    if type(data) is dict and _CONVENIENCE_KEYS.isdisjoint(data):
        return data
    return _CONVENIENCE(data)


def _part_kwargs(data: Any) -> Any:
    """What ``Part.__init__(**data)`` passes on to pydantic: its explicit keyword arguments without ``None``."""
    if type(data) is dict and None in data.values():
        return {k: v for k, v in data.items() if v is not None or k not in _PART_KEYWORDS}
    return data


def _function_of(node: dict[str, Any]) -> Any:
    spec = node.get("function")
    fn = spec.get("function") if isinstance(spec, dict) else None
    return getattr(fn, "__func__", fn)


def _rewrite(node: Any, models: set[type], lean: bool) -> Any:
    """A copy of a core schema with the hooks above replaced (``lean``: removed, and what they act on
    refused); ``models`` collects the model classes in it."""
    if isinstance(node, list):
        return [_rewrite(item, models, lean) for item in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind == "function-before":
        fn = _function_of(node)
        if fn is _GENAI_CHECK:
            return _rewrite(node["schema"], models, lean)
        if fn is _CONVENIENCE_FN:
            inner = _rewrite(node["schema"], models, lean)
            if lean:
                return _refusing_unknown_keys(inner)
            return {**node, "function": {"type": "no-info", "function": _convenience}, "schema": inner}
    out = {k: (v if k in ("cls", "function", "metadata", "serialization", "ref") else _rewrite(v, models, lean))
           for k, v in node.items()}  # fmt: skip
    if kind == "model":
        models.add(node["cls"])
        if node["cls"] is types.Part and node.get("custom_init"):
            out["custom_init"] = False
            if lean:
                return _refusing_null_keywords(out)
            ref = out.pop("ref", None)
            return core_schema.no_info_before_validator_function(_part_kwargs, out, ref=ref)
    return out


def _model_fields(node: dict[str, Any]) -> dict[str, Any]:
    inner = node
    while inner["type"] != "model-fields":
        inner = inner["schema"]
    return inner


def _refusing_unknown_keys(fields: dict[str, Any]) -> dict[str, Any]:
    """``Event``'s fields refusing unknown keys (it ignores them): the keys ``_accept_convenience_kwargs``
    routes are unknown to it, and an event stored by a newer ADK takes the hooked path, which ignores them."""
    _model_fields(fields)["extra_behavior"] = "forbid"
    return fields


def _refusing_null_keywords(part: dict[str, Any]) -> dict[str, Any]:
    """``Part`` whose explicit keyword parameters refuse null (``Part.__init__`` would drop them)."""
    for name, field in _model_fields(part)["fields"].items():
        default = field["schema"]
        if name in _PART_KEYWORDS and default["type"] == "default" and default["schema"]["type"] == "nullable":
            field["schema"] = {**default, "schema": default["schema"]["schema"]}
    return part


def _build(lean: bool) -> SchemaValidator:
    models: set[type] = set()
    schema = _rewrite(Event.__pydantic_core_schema__, models, lean)
    # pydantic-core reuses the validator a model class already has (`__pydantic_validator__`, hooks and all)
    # for every model node of a schema whose class is marked complete; unmarked while this one is built, the
    # classes get validators built from the rewritten schema. Done once per process, under a lock.
    saved = {cls: cls.__dict__.get("__pydantic_complete__") for cls in models}
    try:
        for cls in models:
            type.__setattr__(cls, "__pydantic_complete__", False)
        return SchemaValidator(core_schema.list_schema(schema))
    finally:
        for cls, value in saved.items():
            if value is None:
                type.__delattr__(cls, "__pydantic_complete__")
            else:
                type.__setattr__(cls, "__pydantic_complete__", value)


_lock = threading.Lock()
_validators: tuple[SchemaValidator, ...] | None = None


def _list_validators() -> tuple[SchemaValidator, ...]:
    """The lean validator, then the one with hooks; none when they cannot be built."""
    global _validators
    if _validators is None:
        with _lock:
            if _validators is None:
                try:
                    _validators = (_build(lean=True), _build(lean=False))
                except Exception:  # an ADK / genai whose schema this does not know: validate as ADK does
                    log.warning("fast event validation unavailable; validating stored events fully", exc_info=True)
                    _validators = ()
    return _validators


def _one(validator: SchemaValidator, text: str) -> Event:
    try:
        (event,) = validator.validate_json("[" + text + "]")
    except (ValidationError, ValueError):
        return Event.model_validate_json(text)
    return event  # type: ignore[no-any-return]


def events_from_json(
    texts: Sequence[str], *, validators: Callable[[], Sequence[SchemaValidator]] = _list_validators
) -> list[Event]:
    """``[Event.model_validate_json(t) for t in texts]``: the same events in 0.4-0.6x the CPU time (plain
    text events about 0.6x, events with function calls, bytes and metadata about 0.4x)."""
    if not texts:
        return []
    chain = validators()
    if not chain:
        return [Event.model_validate_json(t) for t in texts]
    array = "[" + ",".join(texts) + "]"
    for validator in chain:
        try:
            return validator.validate_json(array)  # type: ignore[no-any-return]
        except (ValidationError, ValueError):
            continue
    # One of them is refused (or not JSON): each on its own, so the others keep the fast path and the
    # refused one gets ADK's own error.
    return [_one(chain[-1], t) for t in texts]
