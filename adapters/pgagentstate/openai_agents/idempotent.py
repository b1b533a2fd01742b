"""Function tools whose side effect runs once, however often the run is retried or resumed.

``idempotent_function_tool`` builds an ordinary SDK ``FunctionTool`` whose body goes through the core's
``run_once`` ledger: the first call runs the function and records its (JSON) result; a later call with the
same key — the same tool call replayed after a crash, a resumed run, a retry — gets the recorded result
without running the function again. Concurrent callers wait for the first; a crashed claim is taken over
after ``lease`` seconds; the same key with different arguments raises ``IdempotencyConflict``.

The key is, by default, the conversation plus the model's tool call id (``ToolContext.tool_call_id``),
which identifies one decision of the model. A business key (``"refund:{order_id}"``) also dedupes
separate decisions that mean the same side effect.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Callable
from typing import Any, get_origin, get_type_hints, overload

from agents import FunctionTool, RunContextWrapper, function_tool
from agents.exceptions import UserError
from agents.tool_context import ToolContext
from pydantic_core import to_jsonable_python

from pgagentstate import AsyncStateStore

from ._identity import identity_of

KeyFn = Callable[[ToolContext[Any], dict[str, Any]], str]


def tool_call_key(ctx: ToolContext[Any], conversation_id: str | None = None) -> str:
    """The default idempotency key of a tool call: conversation, tool name and the model's call id."""
    cid = conversation_id or identity_of(ctx).conversation_id or "-"
    return f"openai_agents/{cid}/{ctx.tool_name}/{ctx.tool_call_id}"


@overload
def idempotent_function_tool(
    store: AsyncStateStore, func: Callable[..., Any], *, key: str | KeyFn | None = ...,
    conversation_id: str | None = ..., lease: float = ..., wait: float | None = ..., **tool_kwargs: Any,
) -> FunctionTool: ...


@overload
def idempotent_function_tool(
    store: AsyncStateStore, func: None = ..., *, key: str | KeyFn | None = ...,
    conversation_id: str | None = ..., lease: float = ..., wait: float | None = ..., **tool_kwargs: Any,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def idempotent_function_tool(
    store: AsyncStateStore,
    func: Callable[..., Any] | None = None,
    *,
    key: str | KeyFn | None = None,
    conversation_id: str | None = None,
    lease: float = 30.0,
    wait: float | None = None,
    **tool_kwargs: Any,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Like ``@function_tool``, but the function's side effect runs at most once per key.

    Example::

        @idempotent_function_tool(store, key="refund:{order_id}")
        async def refund(order_id: str, amount: float) -> str:
            '''Refund an order.'''
            return await payments.refund(order_id, amount)

    Args:
        store: The store whose ledger records the calls.
        func: The tool function (sync or async; it may take a ``RunContextWrapper``/``ToolContext`` first).
        key: ``None`` for conversation + tool call id (see :func:`tool_call_key`); a format string over the
            tool's arguments (``"refund:{order_id}"``); or a callable ``(tool_context, arguments) -> str``.
        conversation_id: Conversation recorded on the ledger entry and used in the default key; by default
            the ``conversation_id``/``session_id`` of the run context.
        lease: Seconds after which a claim by a crashed worker may be taken over.
        wait: Seconds to wait for a concurrent first call before ``IdempotencyInProgress`` (None: lease).
        **tool_kwargs: Passed to ``function_tool`` (``name_override``, ``needs_approval``, ...).

    The result must be JSON-representable (pydantic models and dataclasses are converted); it is what the
    model sees on the first call and on every replay. An exception is not recorded: the next call retries.
    """

    def build(fn: Callable[..., Any]) -> FunctionTool:
        return function_tool(_wrap(store, fn, key, conversation_id, lease, wait), **tool_kwargs)

    return build if func is None else build(func)


def _takes_context(fn: Callable[..., Any], hints: dict[str, Any]) -> bool:
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        return False
    ann = hints.get(params[0].name, params[0].annotation)
    origin = get_origin(ann) or ann
    return origin is RunContextWrapper or origin is ToolContext


def _wrap(
    store: AsyncStateStore, fn: Callable[..., Any], key: str | KeyFn | None, conversation_id: str | None,
    lease: float, wait: float | None,
) -> Callable[..., Any]:
    if not callable(fn):
        raise TypeError(f"idempotent_function_tool needs a function, not {type(fn).__name__}")
    if key is not None and not isinstance(key, str) and not callable(key):
        raise TypeError("key must be None, a format string or a callable (tool_context, arguments) -> str")
    hints = get_type_hints(fn, include_extras=True)
    takes_ctx = _takes_context(fn, hints)
    sig = inspect.signature(fn)
    rest = list(sig.parameters.values())[1 if takes_ctx else 0:]
    names = {p.name for p in rest}
    ctx_name = next(n for n in ("tool_context", "_tool_context", "__pgagentstate_ctx") if n not in names)
    is_async = inspect.iscoroutinefunction(fn)
    tenants: dict[str, AsyncStateStore] = {}

    async def invoke(tool_ctx: ToolContext[Any], *args: Any, **kwargs: Any) -> Any:
        if not isinstance(tool_ctx, ToolContext):
            raise UserError("idempotent tools must be invoked by the Agents SDK with a ToolContext")
        arguments = _arguments(tool_ctx)
        ident = identity_of(tool_ctx)
        cid = conversation_id or ident.conversation_id
        k = _key(key, tool_ctx, arguments, cid)
        s = store
        if ident.tenant:
            s = tenants.get(ident.tenant) or tenants.setdefault(ident.tenant, store.with_context_tenant(ident.tenant))

        async def once(_: str) -> Any:
            call_args = (tool_ctx, *args) if takes_ctx else args
            if is_async:
                result = await fn(*call_args, **kwargs)
            else:
                result = await asyncio.to_thread(fn, *call_args, **kwargs)
            # Recorded and replayed as JSON: convert now, so the first caller sees what replays will see,
            # and a value the ledger cannot store fails before the side effect is considered done.
            return to_jsonable_python(result)

        return await s.run_once(k, once, api=tool_ctx.tool_name, request=arguments, conversation_id=cid,
                                lease=lease, wait=wait)

    functools.update_wrapper(invoke, fn, assigned=("__module__", "__name__", "__qualname__", "__doc__"),
                             updated=())
    # update_wrapper also sets __wrapped__; the SDK must see our signature, not the wrapped function's.
    del invoke.__wrapped__  # type: ignore[attr-defined]
    ctx_param = inspect.Parameter(ctx_name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ToolContext[Any])
    # function_schema reads the signature and the annotations: present the tool's own parameters behind a
    # ToolContext, so the SDK passes us the call id whether or not the function asked for a context.
    invoke.__signature__ = sig.replace(parameters=[ctx_param, *rest])  # type: ignore[attr-defined]
    invoke.__annotations__ = {ctx_name: ToolContext[Any], **{p.name: hints[p.name] for p in rest if p.name in hints}}
    if "return" in hints:
        invoke.__annotations__["return"] = hints["return"]
    return invoke


def _arguments(ctx: ToolContext[Any]) -> dict[str, Any]:
    try:
        parsed = json.loads(ctx.tool_arguments or "{}")
    except json.JSONDecodeError as exc:
        raise UserError(f"tool {ctx.tool_name!r} received arguments that are not JSON") from exc
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def _key(key: str | KeyFn | None, ctx: ToolContext[Any], arguments: dict[str, Any], cid: str | None) -> str:
    if key is None:
        return tool_call_key(ctx, cid)
    if isinstance(key, str):
        try:
            return key.format(**arguments)
        except (KeyError, IndexError) as exc:
            raise UserError(f"idempotency key {key!r} names an argument the tool call lacks: {exc}") from exc
    value = key(ctx, arguments)
    if not isinstance(value, str) or not value:
        raise UserError(f"the idempotency key function returned {value!r}; it must return a non-empty string")
    return value
