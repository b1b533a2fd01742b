"""pgagentstate: durable conversation state for AI agents on Postgres."""

# The package is split across two source folders (core/ and adapters/) that are merged in the wheel;
# in an editable install both are on sys.path, so the adapters' half must be found through __path__.
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

from .aio import AsyncStateStore, AsyncTurn
from .codec import Limits
from .errors import (
    AlreadyExists,
    ConflictError,
    ConnectionLost,
    IdempotencyConflict,
    IdempotencyInProgress,
    InvalidId,
    InvalidInput,
    InvalidPayload,
    NotFound,
    PayloadTooLarge,
    PgAgentStateError,
    SchemaError,
    VersionConflict,
)
from .models import (
    Conversation,
    Event,
    LedgerEntry,
    Memory,
    NewEvent,
    StateDoc,
    StateRef,
    Step,
)
from .sync import StateStore, Turn

__all__ = [
    "AlreadyExists",
    "AsyncStateStore",
    "AsyncTurn",
    "ConflictError",
    "ConnectionLost",
    "Conversation",
    "Event",
    "IdempotencyConflict",
    "IdempotencyInProgress",
    "InvalidId",
    "InvalidInput",
    "InvalidPayload",
    "LedgerEntry",
    "Limits",
    "Memory",
    "NewEvent",
    "NotFound",
    "PayloadTooLarge",
    "PgAgentStateError",
    "SchemaError",
    "StateDoc",
    "StateRef",
    "StateStore",
    "Step",
    "Turn",
    "VersionConflict",
]
