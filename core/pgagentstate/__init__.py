"""pgagentstate: durable conversation state for AI agents on Postgres."""

# The package is split across two source folders (core/ and adapters/) that are merged in the wheel;
# in an editable install both are on sys.path, so the adapters' half must be found through __path__.
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

from .aio import AsyncInbox, AsyncStateStore, AsyncTurn
from .codec import Limits
from .crypto import Encryption, EnvKeyProvider, FileKeyProvider, KeyProvider, StaticKeyProvider
from .embedding import HashEmbeddings, MemoryIndex
from .errors import (
    AlreadyExists,
    ConflictError,
    ConnectionLost,
    DeadlineExceeded,
    IdempotencyConflict,
    IdempotencyInProgress,
    IntegrityError,
    InvalidId,
    InvalidInput,
    InvalidPayload,
    LeaseLost,
    NotFound,
    PayloadTooLarge,
    PgAgentStateError,
    PoolDeadlock,
    SchemaError,
    ServerRefused,
    VersionConflict,
)
from .models import (
    Accepted,
    Conversation,
    Event,
    InboxMessage,
    InboxMetrics,
    LedgerEntry,
    LoadedConversation,
    Memory,
    NewEvent,
    StateDoc,
    StateRef,
    Step,
)
from .redis_tier import RedisTier
from .sync import Inbox, StateStore, Turn

__all__ = [
    "Accepted",
    "AlreadyExists",
    "AsyncInbox",
    "AsyncStateStore",
    "AsyncTurn",
    "ConflictError",
    "ConnectionLost",
    "Conversation",
    "DeadlineExceeded",
    "Encryption",
    "EnvKeyProvider",
    "Event",
    "FileKeyProvider",
    "HashEmbeddings",
    "IdempotencyConflict",
    "IdempotencyInProgress",
    "Inbox",
    "InboxMessage",
    "InboxMetrics",
    "IntegrityError",
    "InvalidId",
    "InvalidInput",
    "InvalidPayload",
    "KeyProvider",
    "LeaseLost",
    "LedgerEntry",
    "Limits",
    "LoadedConversation",
    "Memory",
    "MemoryIndex",
    "NewEvent",
    "NotFound",
    "PayloadTooLarge",
    "PgAgentStateError",
    "PoolDeadlock",
    "RedisTier",
    "SchemaError",
    "ServerRefused",
    "StateDoc",
    "StateRef",
    "StateStore",
    "StaticKeyProvider",
    "Step",
    "Turn",
    "VersionConflict",
]
