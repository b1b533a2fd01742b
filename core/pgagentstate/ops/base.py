"""The commands an operation yields, and small helpers shared by the operation modules."""

from __future__ import annotations

import base64
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any, Literal, TypeGuard, TypeVar

from ..codec import Limits, encodable, lone_surrogate
from ..crypto import Cipher
from ..errors import ConnectionLost, InvalidPayload
from ..queries import reads_only
from ..sanitize import Sanitizer
from ..validation import StateSchema

if TYPE_CHECKING:  # pragma: no cover
    from ..redis_tier import TierKeys

T = TypeVar("T")

Fetch = Literal["all", "one", "none", "rowcount"]
Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Stmt:
    """One named statement (see ``queries.py``); the driver adds ``tenant`` to ``params``.

    ``script`` instead of a name runs SQL text with ``{schema}`` placeholders and no parameters (a
    migration file, possibly several statements); scripts are never pipelined.
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    fetch: Fetch = "all"
    script: str | None = None
    binary: bool = False  # results in binary format: bytea arrives as bytes, not as hex text to decode
    #: ``{name}`` placeholders of the statement replaced by fixed SQL fragments the core chose (a vector
    #: type's dimensions, a distance operator) — never by user input, which travels as parameters.
    subs: tuple[tuple[str, str], ...] = ()
    #: Planned with this call's values every time, never from a prepared statement's generic plan: for a
    #: statement whose best plan depends on them. A memory search under a namespace of 100 items wants the
    #: primary-key range, under one of 100,000 the full-text index; a generic plan guesses 0.5% of the
    #: table for any range, looks cheaper than the real plans, is chosen after 5 calls and then tests every
    #: memory of a large namespace (95 ms instead of 4 ms at 100,000 memories of one user, PG15). Costs a
    #: parse and a plan per call (0.1-0.2 ms for a search).
    custom_plan: bool = False


@dataclass(frozen=True, slots=True)
class Tx:
    """Statements run in one transaction. ``hold`` keeps it open for the next ``Tx`` of the operation;
    ``snapshot`` makes it a REPEATABLE READ transaction, so every statement sees one snapshot;
    ``replica`` lets a store configured with a read replica run it there (history reads that may lag);
    ``patient`` exempts it from the store's deadline (it waits on purpose: the migration lock, an index build)."""

    stmts: tuple[Stmt, ...]
    hold: bool = False
    snapshot: bool = False
    replica: bool = False
    patient: bool = False


@dataclass(frozen=True, slots=True)
class Call:
    """Run user code outside any transaction; in the async store it may return an awaitable."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Cache:
    """A call to the store's Redis tier (:mod:`pgagentstate.redis_tier`): a Redis command or one of the
    tier's scripts by ``name``. Never needed for correctness: when Redis is skipped or fails, the driver
    sends back ``default`` instead, and the operation carries on with Postgres."""

    name: str
    keys: tuple[str, ...]
    args: tuple[Any, ...] = ()
    default: Any = None


Command = Tx | Call | Sleep | Cache
Op = Generator[Command, Any, T]


def read_again(cmd: Command, error: BaseException) -> TypeGuard[Tx]:
    """Whether a transaction that failed with ``error`` is run once more, on a new connection: a read whose
    connection broke (a pooled connection the server or the path to it dropped while it sat idle, noticed
    only when used: a failover, a proxy or pooler restart). Nothing it did can be repeated, and the new
    connection waits for a writable server as a first connection does. Not after ``DeadlineExceeded`` (the
    path hangs: a second wait would double the call's time) nor ``ServerRefused`` (already retried)."""
    return (
        type(error) is ConnectionLost
        and isinstance(cmd, Tx)
        and all(stmt.script is None and reads_only(stmt.name) for stmt in cmd.stmts)
    )


@dataclass(frozen=True, slots=True)
class Ctx:
    """What every operation may need to know about the store that runs it."""

    tenant: str
    limits: Limits
    cipher: Cipher | None = None
    schemas: Mapping[str, StateSchema] = field(default_factory=dict)
    sanitizer: Sanitizer | None = None
    cache: TierKeys | None = None  # the Redis tier's keys when the store has one (else nothing is cached)
    scratch_in_redis: bool = False
    #: The store's memory index (:class:`pgagentstate.ops.memory_index.VectorSettings`), if it has one.
    memory_index: Any = None


def tx(*stmts: Stmt, hold: bool = False) -> Tx:
    return Tx(tuple(stmts), hold=hold)


def one(name: str, /, **params: Any) -> Op[Row | None]:
    """Run one statement in its own transaction; its first row, or None."""
    (row,) = yield Tx((Stmt(name, params, "one"),))
    return row  # type: ignore[no-any-return]


def many(
    name: str, /, *, replica: bool = False, binary: bool = False, custom_plan: bool = False, **params: Any
) -> Op[list[Row]]:
    """Run one statement in its own transaction; all its rows. ``replica``: may run on a read replica;
    ``binary``: results in binary format; ``custom_plan``: see :attr:`Stmt.custom_plan`."""
    (rows,) = yield Tx((Stmt(name, params, "all", binary=binary, custom_plan=custom_plan),), replica=replica)
    return rows  # type: ignore[no-any-return]


def count(name: str, /, **params: Any) -> Op[int]:
    """Run one statement in its own transaction; the number of rows it touched."""
    (n,) = yield Tx((Stmt(name, params, "rowcount"),))
    return n  # type: ignore[no-any-return]


def json_str(value: str | None) -> str:
    """A JSON string literal, for rows built as JSON text: many rows travel as one ``jsonb`` parameter,
    which psycopg sends and Postgres parses faster than one array parameter per column. A NUL in
    ``value`` makes Postgres refuse the parameter (callers check ids and labels first)."""
    return "null" if value is None else encode_basestring(value)


def json_rows(rows: Iterable[Iterable[str]]) -> str | None:
    """Rows of JSON fragments (see :func:`json_str`) as the text of one JSON array of arrays; None when
    there is no row (``jsonb_array_elements(NULL)`` yields nothing, as ``'[]'`` does)."""
    text = ",".join("[" + ",".join(row) + "]" for row in rows)
    return f"[{text}]" if text else None


def json_b64(data: bytes) -> str:
    """``data`` as a JSON string of base64, for ``decode(..., 'base64')`` on the server."""
    return '"' + base64.b64encode(data).decode("ascii") + '"'


def iso(value: datetime | None) -> str | None:
    """A timestamp as ISO text, for rows built as JSON (see :func:`json_str`)."""
    return None if value is None else value.isoformat()


def unencodable(tx: Tx) -> InvalidPayload:
    """The typed error for a statement parameter that UTF-8 cannot encode (a lone surrogate that no check
    caught before): the driver raised ``UnicodeEncodeError`` before sending it. Names the parameter."""
    for stmt in tx.stmts:
        for name, value in stmt.params.items():
            for text in value if isinstance(value, list | tuple) else (value,):
                if isinstance(text, str) and not encodable(text):
                    return InvalidPayload(f"text {lone_surrogate(text)}", path=name)
    return InvalidPayload("text is not valid Unicode")
