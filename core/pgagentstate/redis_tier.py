"""The optional Redis tier: Redis for speed, Postgres for truth (``pip install 'pgagentstate[redis]'``).

``StateStore(dsn, cache=RedisTier("redis://127.0.0.1:6379/0"))`` serves a turn's load from Redis and keeps
the conversation's entry fresh after each commit; ``RedisTier(..., scratchpad=True)`` keeps the scratchpad
in Redis with Redis TTLs. Nothing here is ever trusted for correctness (see docs/redis.md):

- a cached load is a *hint*: the turn's save checks the conversation's version in Postgres, so a stale
  entry ends in :class:`~pgagentstate.errors.VersionConflict` (the entry is dropped, the retry reads
  Postgres), never in a lost update. Reads that return data without a later check never use Redis.
- every value is sealed with AES-256-GCM, bound to its key and version: an edited, truncated, swapped or
  foreign value fails authentication and counts as a miss (and is deleted). With the store's
  :class:`~pgagentstate.crypto.Encryption` the tier's keys derive from the active encryption key, so
  nothing reaches Redis in clear; without it, from ``secret`` (or ``$PGAGENTSTATE_REDIS_SECRET``).
- key names are HMACs of (tenant, kind, conversation): they carry the tenant, cannot be guessed or
  enumerated per tenant without the secret, and two tenants never share one.
- Redis down, slow, flushed, restarted or partitioned: each call is bounded by ``timeout``; after a
  failure Redis is skipped for ``retry_after`` seconds (one timeout per outage, not one per call) and
  everything runs on Postgres. :meth:`RedisTier.status` and ``store.stats()["cache"]`` say so.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import os
import struct
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import InvalidInput

if TYPE_CHECKING:  # pragma: no cover
    from .crypto import Cipher


class Cache(Protocol):
    """What the tier runs: :class:`pgagentstate.ops.base.Cache` (the operations' command)."""

    @property
    def name(self) -> str: ...
    @property
    def keys(self) -> tuple[str, ...]: ...
    @property
    def args(self) -> tuple[Any, ...]: ...
    @property
    def default(self) -> Any: ...


log = logging.getLogger("pgagentstate.redis")

DEFAULT_URL = "redis://127.0.0.1:6379/0"
SECRET_ENV = "PGAGENTSTATE_REDIS_SECRET"
_NONCE = 12
STAMP_LEN = 40
_NAMES_KEPT = 10_000  # two zero-padded 20-digit numbers: string order is numeric order

# Write only when nothing newer is there: a process that read Postgres before another one committed must
# not put its older entry over the newer one (the stamp is the conversation's created_at and version,
# so a conversation deleted and created again starts above the old one).
_PUT_NEWER = """
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, 40) > string.sub(ARGV[1], 1, 40) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
# The scratchpad: one key per entry, with its own Redis TTL (exact, on Redis's clock), and an index set
# per conversation (KEYS[1]) that lives as long as its longest-lived entry; entries gone are pruned from
# the index when listed.
_SCRATCH_PUT = """
local ttl = tonumber(ARGV[2])
if ttl > 0 then redis.call('SET', KEYS[2], ARGV[1], 'PX', ttl) else redis.call('SET', KEYS[2], ARGV[1]) end
local before = redis.call('PTTL', KEYS[1])
redis.call('SADD', KEYS[1], KEYS[2])
if ttl == 0 then
  redis.call('PERSIST', KEYS[1])
elseif before == -2 or (before >= 0 and before < ttl) then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
"""
_SCRATCH_LIST = """
local out = {}
for _, k in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local v = redis.call('GET', k)
  if v then table.insert(out, k); table.insert(out, v) else redis.call('SREM', KEYS[1], k) end
end
return out
"""
_SCRATCH_DELETE = """
redis.call('SREM', KEYS[1], KEYS[2])
return redis.call('DEL', KEYS[2])
"""


#: Commands that change what Redis holds for a key (the last of their keys).
_WRITES = frozenset({"put_newer", "delete", "scratch_put", "scratch_delete"})


def _load_redis() -> Any:
    try:
        import redis
    except ImportError:  # pragma: no cover - exercised without the extra
        raise ImportError("the Redis tier needs the redis package: pip install 'pgagentstate[redis]'") from None
    return redis


def _secret(value: bytes | str | None) -> tuple[bytes, bool]:
    """(secret, shared): a secret given or in the environment is shared by every process that has it; none
    at all gets a random one, which only this process knows (its entries are its own)."""
    if value is None:
        value = os.environ.get(SECRET_ENV) or None
    if value is None:
        return os.urandom(32), False
    raw = value.encode() if isinstance(value, str) else bytes(value)
    if len(raw) < 16:
        raise InvalidInput("the Redis tier's secret must be at least 16 bytes", path="secret")
    return hashlib.sha256(b"pgagentstate redis tier\x00" + raw).digest(), True


def _parts(parts: Sequence[str]) -> bytes:
    """Each part as its length and UTF-8 bytes: no two different lists encode alike."""
    out = bytearray()
    for part in parts:
        data = part.encode()
        out += struct.pack(">I", len(data)) + data
    return bytes(out)


class TierKeys:
    """Key names and sealing for one store: from its encryption key when it has one, else the tier's
    secret. Operations (``ops/context_cache.py``, ``ops/scratchpad.py``) use it through ``Ctx.cache``."""

    def __init__(self, tier: RedisTier, cipher: Cipher | None) -> None:
        self.tier = tier
        self._cipher = cipher
        self._aead: dict[str, AESGCM] = {}
        self._names: dict[tuple[str, ...], str] = {}
        self._plain: dict[str, bytes] = {}  # key names are HMACs: computed once per conversation

    def _subkey(self, purpose: str) -> tuple[str, bytes]:
        if self._cipher is not None:
            key_id = self._cipher.active_key_id()
            return "k" + key_id, self._cipher.keyed_digest("redis tier " + purpose, b"")
        sub = self._plain.get(purpose)
        if sub is None:
            sub = self._plain[purpose] = hmac.new(self.tier._secret, purpose.encode(), hashlib.sha256).digest()
        return "s", sub

    def name(self, tenant: str, kind: str, *parts: str) -> str:
        """``<prefix>:<tenant tag>:<entry tag>``: both HMACs, so the tenant is in every key and nothing in
        a key tells whose it is to someone without the secret."""
        key_id, sub = self._subkey("names")
        memo = (key_id, tenant, kind, *parts)
        found = self._names.get(memo)
        if found is None:
            tag = hmac.new(sub, _parts(("tenant", tenant)), hashlib.sha256).hexdigest()[:16]
            entry = hmac.new(sub, _parts((tenant, kind, *parts)), hashlib.sha256).hexdigest()[:32]
            if len(self._names) >= _NAMES_KEPT:
                self._names.clear()
            found = self._names[memo] = f"{self.tier.prefix}:{tag}:{entry}"
        return found

    def seal(self, stamp: str, plaintext: bytes, where: Sequence[str]) -> bytes:
        """``stamp | key id | nonce ciphertext tag``, authenticated for ``where`` and ``stamp``."""
        key_id, sub = self._subkey("values")
        aead = self._aead.get(key_id)
        if aead is None:
            aead = self._aead[key_id] = AESGCM(sub)
        nonce = os.urandom(_NONCE)
        head = f"{stamp}|{key_id}|".encode()
        return head + nonce + aead.encrypt(nonce, plaintext, _parts((*where, stamp)))

    def open(self, blob: bytes, where: Sequence[str]) -> tuple[str, bytes] | None:
        """(stamp, plaintext), or None when the value does not authenticate (edited, moved from another
        key or tenant, sealed with a key this store no longer has): the caller counts it and reads Postgres."""
        try:
            stamp, key_id, body = blob.split(b"|", 2)
            active, sub = self._subkey("values")
            if key_id.decode() != active:
                return None  # sealed under another encryption key (rotated): a miss
            aead = self._aead.get(active)
            if aead is None:
                aead = self._aead[active] = AESGCM(sub)
            text = stamp.decode()
            return text, aead.decrypt(body[:_NONCE], body[_NONCE:], _parts((*where, text)))
        except (ValueError, UnicodeDecodeError, InvalidTag):
            return None

    def note(self, outcome: str, n: int = 1) -> None:
        """Count what an operation found (hits, misses, stale, rejected...)."""
        self.tier._count(outcome, n)


@dataclass(frozen=True, slots=True)
class TierStatus:
    """What the tier is doing: ``state`` is ``"up"``, ``"down"`` (Redis is skipped until ``retry_at``) or
    ``"unused"``; ``counters`` counts hits, misses, stale hints, rejected (unauthenticated) values, errors
    and the calls answered from Postgres because Redis was down (``fallbacks``)."""

    state: str
    url: str
    shared_secret: bool
    down_since: float | None
    retry_at: float | None
    last_error: str | None
    counters: dict[str, int]


class RedisTier:
    """The Redis tier of one or more stores (sync and async alike); see the module docstring.

    ``url``: the Redis server (``redis://``, ``rediss://``, ``unix://``). ``secret``: what seals values and
    names keys when the store has no encryption (16+ bytes; default ``$PGAGENTSTATE_REDIS_SECRET``, else a
    random one known to this process only). ``ttl``: seconds an entry lives unless refreshed — it bounds how
    long a value can stay in Redis after a write made without the tier (e.g. an erase). ``timeout``: the
    bound on each Redis call, seconds. ``retry_after``: how long Redis is skipped after a failure.
    ``scratchpad``: keep the scratchpad in Redis (fast, not durable; Postgres while Redis is down).
    ``context``: serve a turn's load from Redis.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        secret: bytes | str | None = None,
        ttl: float = 3600.0,
        timeout: float = 0.25,
        retry_after: float = 1.0,
        prefix: str = "pgas",
        scratchpad: bool = False,
        context: bool = True,
    ) -> None:
        self._redis = _load_redis()
        if ttl <= 0:
            raise InvalidInput("ttl must be positive (seconds)", path="ttl")
        if timeout <= 0:
            raise InvalidInput("timeout must be positive (seconds)", path="timeout")
        if retry_after < 0:
            raise InvalidInput("retry_after must not be negative (seconds)", path="retry_after")
        if not prefix or ":" in prefix:
            raise InvalidInput("prefix must be non-empty, without ':'", path="prefix")
        self.url = url
        self.ttl = float(ttl)
        self.timeout = float(timeout)
        self.retry_after = float(retry_after)
        self.prefix = prefix
        self.scratchpad = scratchpad
        self.context = context
        self._secret, self._shared = _secret(secret)
        self._lock = threading.Lock()
        self._counters: Counter[str] = Counter()
        self._down_since: float | None = None
        self._retry_at: float | None = None
        self._last_error: str | None = None
        self._sync: Any = None
        self._async: dict[int, tuple[Any, Any]] = {}  # id(loop) -> (loop, client): a client per event loop
        self._dirty: set[str] = set()  # keys a failed write or delete left behind: deleted once Redis is back
        self._scripts = {
            "put_newer": _PUT_NEWER,
            "scratch_put": _SCRATCH_PUT,
            "scratch_list": _SCRATCH_LIST,
            "scratch_delete": _SCRATCH_DELETE,
        }

    def __repr__(self) -> str:
        return f"RedisTier({self.url!r}, ttl={self.ttl}, timeout={self.timeout}, scratchpad={self.scratchpad})"

    def keys(self, cipher: Cipher | None) -> TierKeys:
        return TierKeys(self, cipher)

    # --- health ---------------------------------------------------------------------------------------

    def _count(self, outcome: str, n: int = 1) -> None:
        with self._lock:
            self._counters[outcome] += n

    def status(self) -> TierStatus:
        with self._lock:
            state = "down" if self._retry_at is not None else "up" if self._counters.get("calls") else "unused"
            return TierStatus(
                state=state,
                url=_redacted(self.url),
                shared_secret=self._shared,
                down_since=self._down_since,
                retry_at=self._retry_at,
                last_error=self._last_error,
                counters=dict(self._counters),
            )

    def _skip(self) -> bool:
        """True while Redis is being skipped after a failure (the breaker is open)."""
        with self._lock:
            if self._retry_at is None:
                return False
            if time.monotonic() < self._retry_at:
                self._counters["fallbacks"] += 1
                return True
            return False  # time to try again: the next call probes Redis

    def _mark(self, cmd: Cache) -> None:
        """A write or delete that did not reach Redis leaves what is there stale: delete it when Redis is
        back (a partition that heals must not serve what was true before it)."""
        if cmd.name in _WRITES:
            with self._lock:
                self._dirty.update(cmd.keys[-1:])

    def _take_dirty(self) -> list[str]:
        with self._lock:
            dirty, self._dirty = list(self._dirty), set()
        return dirty

    def _failed(self, exc: BaseException, cmd: Cache, dirty: Sequence[str] = ()) -> None:
        self._mark(cmd)
        with self._lock:
            self._dirty.update(dirty)
            now = time.monotonic()
            self._counters["errors"] += 1
            self._counters["fallbacks"] += 1
            went_down = self._down_since is None
            if went_down:
                self._down_since = time.time()
            self._retry_at = now + self.retry_after
            self._last_error = f"{type(exc).__name__}: {exc}"[:300]
        if went_down:  # once per outage, not once per call
            log.warning(
                "Redis tier %s unreachable (%s): serving from Postgres, retrying every %.1f s",
                _redacted(self.url), self._last_error, self.retry_after,
            )

    def _succeeded(self) -> None:
        with self._lock:
            self._counters["calls"] += 1
            recovered = self._retry_at is not None
            if recovered:
                down_for = time.time() - (self._down_since or time.time())
                self._retry_at = None
                self._down_since = None
                self._counters["recoveries"] += 1
        if recovered:
            log.warning("Redis tier %s answers again after %.1f s down", _redacted(self.url), down_for)

    # --- running commands -----------------------------------------------------------------------------

    def _options(self) -> dict[str, Any]:
        return {
            "socket_timeout": self.timeout,
            "socket_connect_timeout": self.timeout,
            "retry_on_timeout": False,
            "health_check_interval": 0,
        }

    def _sync_client(self) -> Any:
        if self._sync is None:
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            self._sync = self._redis.Redis.from_url(self.url, retry=Retry(NoBackoff(), 0), **self._options())
        return self._sync

    def _async_client(self) -> Any:
        loop = asyncio.get_running_loop()
        found = self._async.get(id(loop))
        if found is None or found[0] is not loop:
            from redis.asyncio import Redis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            client = Redis.from_url(self.url, retry=Retry(NoBackoff(), 0), **self._options())
            self._async = {k: v for k, v in self._async.items() if not v[0].is_closed()}
            self._async[id(loop)] = found = (loop, client)
        return found[1]

    def execute(self, cmd: Cache) -> Any:
        """Run a cache command from the sync store; ``cmd.default`` when Redis is skipped or fails."""
        if self._skip():
            self._mark(cmd)
            return cmd.default
        dirty: list[str] = []
        try:
            client = self._sync_client()
            if self._dirty:
                dirty = self._take_dirty()
                client.delete(*dirty)
                dirty = []
            if cmd.name in self._scripts:
                result = client.eval(self._scripts[cmd.name], len(cmd.keys), *cmd.keys, *cmd.args)
            else:
                result = getattr(client, cmd.name)(*cmd.keys, *cmd.args)
        except Exception as exc:  # any failure of the tier means: use Postgres
            self._failed(exc, cmd, dirty)
            return cmd.default
        self._succeeded()
        return result

    async def aexecute(self, cmd: Cache) -> Any:
        """Run a cache command from the async store, bounded by ``timeout`` (the socket timeout alone does
        not bound a connect that the network swallows)."""
        if self._skip():
            self._mark(cmd)
            return cmd.default
        dirty: list[str] = []
        try:
            client = self._async_client()
            if self._dirty:
                dirty = self._take_dirty()
                await asyncio.wait_for(client.delete(*dirty), self.timeout * 2)
                dirty = []
            if cmd.name in self._scripts:
                call = client.eval(self._scripts[cmd.name], len(cmd.keys), *cmd.keys, *cmd.args)
            else:
                call = getattr(client, cmd.name)(*cmd.keys, *cmd.args)
            result = await asyncio.wait_for(call, self.timeout * 2)
        except Exception as exc:
            self._failed(exc, cmd, dirty)
            return cmd.default
        self._succeeded()
        return result

    def close(self) -> None:
        """Drop the sync client's connections (async clients close with their event loop)."""
        if self._sync is not None:
            client, self._sync = self._sync, None
            client.close()

    async def aclose(self) -> None:
        found = self._async.pop(id(asyncio.get_running_loop()), None)
        if found is not None:
            await found[1].aclose()


def _redacted(url: str) -> str:
    """The URL without its password, for health output."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user = creds.partition(":")[0]
    return f"{scheme}://{user + ':***' if user else '***'}@{host}"


def random_secret() -> str:
    """A new secret for ``$PGAGENTSTATE_REDIS_SECRET`` (share it between the processes of one deployment)."""
    return base64.b64encode(os.urandom(32)).decode()
