"""Every error pgagentstate raises, under one root.

    PgAgentStateError
    ├── InvalidInput                      bad arguments: nothing was written
    │   ├── InvalidId                     empty, too long, not a string, NUL in an id
    │   ├── InvalidPayload                not JSON (sets, objects, NaN), nested too deep
    │   └── PayloadTooLarge               over ``Limits.max_payload_bytes``
    ├── NotFound                          the conversation (or row) does not exist for this tenant
    ├── AlreadyExists                     create of an id that is taken
    ├── ConflictError                     a concurrent writer got there first
    │   ├── VersionConflict               compare-and-swap lost: ``expected`` vs ``actual``
    │   ├── IdempotencyConflict           same idempotency key, different request
    │   └── LeaseLost                     an inbox turn was taken over after its lease ran out
    ├── IdempotencyInProgress             another worker holds the key's lease (wait timed out)
    ├── ValidationError                   a document does not fit its declared model
    ├── IntegrityError                    a stored ciphertext failed authentication, or plaintext where
    │                                     encryption is required
    ├── ConnectionLost                    the connection died mid-operation; retryable
    │   ├── DeadlineExceeded              no answer within the store's per-call deadline (a hung path)
    │   └── ServerRefused                 the server (or what stands for it) turned the connection away
    ├── PoolDeadlock                      the caller's own locks hold every pooled connection; not retryable
    ├── SchemaError                       schema missing or newer than this library
    └── DatabaseError                     any other server error (the driver error is ``__cause__``)

Driver (psycopg) errors are translated in exactly one place, :func:`translate`.
"""

from __future__ import annotations

import re

import psycopg
from psycopg import errors as pg_errors


class PgAgentStateError(Exception):
    """Root of every error raised by pgagentstate."""

    #: True when the same call may simply be tried again.
    retryable: bool = False


class InvalidInput(PgAgentStateError, ValueError):
    """The arguments were rejected before anything reached the database."""

    def __init__(self, message: str, *, path: str = "") -> None:
        self.path = path
        super().__init__(f"{message} (at {path})" if path else message)


class InvalidId(InvalidInput):
    """An identifier is empty, too long, not a string or contains NUL."""


class InvalidPayload(InvalidInput):
    """A value is not representable as JSON, or is nested too deeply."""


class PayloadTooLarge(InvalidInput):
    """A payload is larger than the configured limit."""

    def __init__(self, size: int, limit: int, *, path: str = "", message: str | None = None) -> None:
        self.size = size
        self.limit = limit
        super().__init__(message or f"payload of {size} bytes exceeds the limit of {limit} bytes", path=path)


class NotFound(PgAgentStateError, LookupError):
    """The addressed conversation or record does not exist (for this tenant)."""


class AlreadyExists(PgAgentStateError):
    """An object with this id already exists."""


class ConflictError(PgAgentStateError):
    """A concurrent writer changed what this call expected to change."""

    retryable = True


class VersionConflict(ConflictError):
    """Optimistic concurrency check failed: the stored version is not the expected one."""

    def __init__(self, expected: int | str | None, actual: int | str | None, *, what: str = "version") -> None:
        self.expected = expected
        self.actual = actual
        self.what = what
        super().__init__(f"{what} conflict: expected {expected}, found {actual}")


class IdempotencyConflict(ConflictError):
    """An idempotency key was reused with a different request."""

    retryable = False

    def __init__(self, key: str, *, stored_hash: str, request_hash: str) -> None:
        self.key = key
        self.stored_hash = stored_hash
        self.request_hash = request_hash
        super().__init__(
            f"idempotency key {key!r} was first used for a different request "
            f"(stored {stored_hash[:12]}, now {request_hash[:12]})"
        )


class LeaseLost(ConflictError):
    """The worker's lease on an inbox turn ran out and another worker took the turn over: this worker's
    outcome is not recorded (the other one's will be). Not retryable: the turn is no longer this worker's."""

    retryable = False

    def __init__(self, conversation_id: str, seq: int) -> None:
        self.conversation_id = conversation_id
        self.seq = seq
        super().__init__(
            f"the turn of message {seq} of conversation {conversation_id!r} was taken over by another worker"
        )


class IdempotencyInProgress(PgAgentStateError):
    """Another worker holds a live claim on the key and did not finish in time."""

    retryable = True

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"idempotency key {key!r} is being processed by another worker")


class ValidationError(PgAgentStateError, ValueError):
    """A document does not fit the model declared for it."""


class IntegrityError(PgAgentStateError):
    """A stored value cannot be trusted: its ciphertext does not authenticate for the place it was read
    from (moved, tampered, wrong key), or it is plaintext although encryption is required."""


class ConnectionLost(PgAgentStateError):
    """The connection to Postgres failed during the operation; it is safe to retry.

    If the failure happened while committing, the write may or may not have landed:
    every write in pgagentstate is either idempotent (event ids, idempotency keys) or
    version-checked, so a retry either succeeds or reports a conflict — never a duplicate.
    """

    retryable = True


class DeadlineExceeded(ConnectionLost):
    """A transaction got no answer within the store's ``deadline``: the path to Postgres hangs (a stuck
    proxy or pooler, a partition the kernel has not noticed yet). The connection was cut, so the
    transaction either committed before the hang or never will; retryable as any ``ConnectionLost``."""

    def __init__(self, seconds: float, where: str) -> None:
        self.seconds = seconds
        super().__init__(f"no answer from Postgres at {where} within the deadline of {seconds:g} s; connection cut")


class ServerRefused(ConnectionLost):
    """Every connection attempt was refused or reset (the server is down, its port closed, or a proxy in
    front of it turns connections away): the call fails fast instead of waiting for the pool. Retryable:
    the server may be restarting."""


class PoolDeadlock(PgAgentStateError):
    """The calling task (or thread) holds every connection of the store's pool in its own
    ``conversation_lock`` / ``advisory_lock`` blocks, so a call made inside them could never get one. Not
    retryable: a retry would wait the same way. Make the call outside the lock, or give the pool more
    connections (``max_size``) than the locks held at once."""


class SchemaError(PgAgentStateError):
    """The database schema is missing, or newer than this library understands."""


class DatabaseError(PgAgentStateError):
    """Any other error reported by the server; the driver's error is ``__cause__``."""

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        self.sqlstate = sqlstate
        super().__init__(message)


def translate(exc: BaseException) -> PgAgentStateError:
    """Map a driver exception onto the pgagentstate hierarchy (the only place that does)."""
    if isinstance(exc, PgAgentStateError):
        return exc
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate == "PAS01":  # raised by {schema}.check_version
        detail = (exc.diag.message_detail or " ").split(" ") if isinstance(exc, psycopg.Error) else ["", ""]
        expected = int(detail[0]) if detail[0] else None
        actual = int(detail[1]) if len(detail) > 1 and detail[1] else None
        message = exc.diag.message_primary if isinstance(exc, psycopg.Error) else None
        return VersionConflict(expected, actual, what=(message or "version").removesuffix(" conflict"))
    if sqlstate == "PAS02":
        return NotFound(exc.diag.message_primary if isinstance(exc, psycopg.Error) else str(exc))
    if isinstance(exc, pg_errors.ForeignKeyViolation):
        return NotFound(f"the conversation does not exist ({exc.diag.message_detail or exc})")
    if isinstance(exc, pg_errors.UniqueViolation):
        return AlreadyExists(str(exc).strip())
    if isinstance(exc, pg_errors.UndefinedTable | pg_errors.InvalidSchemaName | pg_errors.UndefinedFunction):
        return SchemaError(f"pgagentstate schema is not set up ({exc}); run setup() or `pgagentstate migrate`")
    if isinstance(exc, pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
        err: PgAgentStateError = ConflictError(str(exc))
        return err
    if isinstance(exc, pg_errors.ProgramLimitExceeded):
        # E.g. "index row size 2720 exceeds btree version 4 maximum 2704 for index ...": keep the server's
        # words and numbers (the up-front checks of ids and namespaces should make this rare).
        primary = exc.diag.message_primary if isinstance(exc, psycopg.Error) else None
        numbers = [int(n) for n in re.findall(r"\d+", primary or "")]
        size, limit = (numbers[0], numbers[-1]) if len(numbers) >= 2 else (0, 0)
        return PayloadTooLarge(size, limit, message=f"too large for the database: {primary or exc}")
    if isinstance(exc, pg_errors.LockNotAvailable):
        return ConflictError(f"timed out waiting for a lock ({exc.diag.message_primary})")
    if isinstance(exc, pg_errors.QueryCanceled):
        return DatabaseError(str(exc).strip(), sqlstate=sqlstate)
    if isinstance(exc, pg_errors.AdminShutdown | pg_errors.CrashShutdown | pg_errors.CannotConnectNow):
        return ConnectionLost(str(exc))
    if isinstance(exc, psycopg.InternalError) and sqlstate is None:
        # The client's own protocol state broke (behind PgBouncer a transaction killed mid-flight shows
        # up as "received 2 results from command 'COMMIT'"): the connection is unusable, retry on another.
        return ConnectionLost(str(exc).strip())
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return ConnectionLost(str(exc).strip() or type(exc).__name__)
    if isinstance(exc, pg_errors.InsufficientPrivilege) and "row-level security" in str(exc):
        return DatabaseError(
            f"{str(exc).strip()}: the database role is bound by row-level security (it is not the tables' "
            "owner), and only a store created with tenant_isolation=True tells Postgres its tenant",
            sqlstate=sqlstate,
        )
    if isinstance(exc, psycopg.Error):
        return DatabaseError(str(exc).strip(), sqlstate=sqlstate)
    raise TypeError(f"not a driver error: {exc!r}")
