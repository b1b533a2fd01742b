"""Encryption at rest: AES-256-GCM for everything that holds user content.

Each ciphertext is bound to where it belongs through the AEAD's associated data (tenant, kind of record,
conversation, event id / document and key / memory key ...), so a ciphertext copied to another row,
conversation or tenant fails to decrypt with :class:`~pgagentstate.errors.IntegrityError`.

Keys come from a :class:`KeyProvider` by id; new writes use the provider's active key, rows written with
an older key still read, and ``pgagentstate rotate-keys`` re-encrypts them. A stored ciphertext is a JSON
string: U+E000 ``E`` <key id> ``:`` <base64url(nonce | ciphertext | tag)> — U+E000 starts no user
string in storage (see :mod:`pgagentstate.codec`), so a ciphertext is never mistaken for data.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import IntegrityError, InvalidInput

MARKER = "\ue000E"
_NONCE = 12
#: Start of a sealed bytes value (:meth:`Cipher.seal_bytes`): NUL, U+E000's first UTF-8 byte, "B". Values
#: stored as bytes by the core (snapshot data, chunks, writes) start with a serializer's type name or a
#: deflate header, never with these three bytes.
BYTES_MARKER = b"\x00\xeeB"


@runtime_checkable
class KeyProvider(Protocol):
    """Where keys come from (environment, file, a cloud KMS...). Keys are 32 bytes (AES-256)."""

    def active_key_id(self) -> str:
        """The id of the key new writes use."""
        ...

    def get_key(self, key_id: str) -> bytes:
        """The key with this id; raise KeyError if unknown."""
        ...


def _check_keys(keys: Mapping[str, bytes], active: str) -> None:
    if not keys:
        raise InvalidInput("no encryption keys given", path="keys")
    for key_id, key in keys.items():
        if not key_id or ":" in key_id or "\x00" in key_id:
            raise InvalidInput(f"bad key id {key_id!r} (non-empty, no ':')", path="keys")
        if len(key) != 32:
            raise InvalidInput(f"key {key_id!r} is {len(key)} bytes; AES-256 needs 32", path="keys")
    if active not in keys:
        raise InvalidInput(f"active key {active!r} is not among the keys", path="active")


@dataclass(frozen=True)
class StaticKeyProvider:
    """Keys held in memory: ``StaticKeyProvider({"k1": key_bytes}, active="k1")``."""

    keys: Mapping[str, bytes]
    active: str

    def __post_init__(self) -> None:
        _check_keys(self.keys, self.active)

    def active_key_id(self) -> str:
        return self.active

    def get_key(self, key_id: str) -> bytes:
        return self.keys[key_id]


def _parse_keys(spec: str) -> dict[str, bytes]:
    keys: dict[str, bytes] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key_id, _, encoded = item.partition(":")
        keys[key_id] = base64.b64decode(encoded)
    return keys


class EnvKeyProvider(StaticKeyProvider):
    """``PGAGENTSTATE_ENCRYPTION_KEYS="k1:<base64>,k2:<base64>"``; the active key is
    ``PGAGENTSTATE_ENCRYPTION_ACTIVE_KEY`` or the last one listed."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        keys = _parse_keys(env.get("PGAGENTSTATE_ENCRYPTION_KEYS", ""))
        active = env.get("PGAGENTSTATE_ENCRYPTION_ACTIVE_KEY") or (list(keys)[-1] if keys else "")
        super().__init__(keys, active)


class FileKeyProvider(StaticKeyProvider):
    """A JSON file ``{"active": "k2", "keys": {"k1": "<base64>", "k2": "<base64>"}}`` (mode 0600)."""

    def __init__(self, path: str | Path) -> None:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        keys = {key_id: base64.b64decode(value) for key_id, value in data["keys"].items()}
        super().__init__(keys, data.get("active") or list(keys)[-1])


def generate_key() -> str:
    """A new random key, base64-encoded, for a provider's configuration."""
    return base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()


@dataclass(frozen=True)
class Encryption:
    """Turns encryption at rest on: ``StateStore(dsn, encryption=Encryption(EnvKeyProvider()))``.

    ``required``: a row that is not encrypted is an error on read (set it to False while migrating an
    existing plaintext database, then run ``pgagentstate rotate-keys``).
    """

    keys: KeyProvider
    required: bool = True


class Cipher:
    """Seals and opens values for one store (AESGCM objects cached per key id)."""

    def __init__(self, encryption: Encryption) -> None:
        self.encryption = encryption
        self._aead: dict[str, AESGCM] = {}
        self._subkeys: dict[tuple[str, str], bytes] = {}

    @property
    def required(self) -> bool:
        return self.encryption.required

    def _aes(self, key_id: str) -> AESGCM:
        aead = self._aead.get(key_id)
        if aead is None:
            try:
                aead = AESGCM(self.encryption.keys.get_key(key_id))
            except KeyError:
                raise IntegrityError(f"encryption key {key_id!r} is not available") from None
            self._aead[key_id] = aead
        return aead

    def active_key_id(self) -> str:
        return self.encryption.keys.active_key_id()

    def seal(self, plaintext: str, ad: str) -> str:
        key_id = self.active_key_id()
        nonce = os.urandom(_NONCE)
        sealed = self._aes(key_id).encrypt(nonce, plaintext.encode(), ad.encode())
        return f"{MARKER}{key_id}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def open(self, envelope: str, ad: str) -> str:
        key_id, _, body = envelope[len(MARKER) :].partition(":")
        raw = base64.urlsafe_b64decode(body)
        try:
            return self._aes(key_id).decrypt(raw[:_NONCE], raw[_NONCE:], ad.encode()).decode()
        except InvalidTag:
            raise IntegrityError(
                "a stored value failed authentication: it was moved from another row, tampered with, "
                "or encrypted with a different key"
            ) from None

    def seal_bytes(self, plaintext: bytes, ad: str) -> bytes:
        """Bytes sealed with the active key: ``BYTES_MARKER`` <key id> ``:`` nonce | ciphertext | tag."""
        key_id = self.active_key_id()
        nonce = os.urandom(_NONCE)
        sealed = self._aes(key_id).encrypt(nonce, plaintext, ad.encode())
        return BYTES_MARKER + key_id.encode() + b":" + nonce + sealed

    def open_bytes(self, envelope: bytes, ad: str) -> bytes:
        """The plaintext of :meth:`seal_bytes`; :class:`IntegrityError` when it does not authenticate for
        ``ad`` (moved from another place, tampered with, other key)."""
        key_id, _, raw = envelope[len(BYTES_MARKER) :].partition(b":")
        try:
            return self._aes(key_id.decode()).decrypt(raw[:_NONCE], raw[_NONCE:], ad.encode())
        except (InvalidTag, ValueError, UnicodeDecodeError):
            raise IntegrityError(
                "a stored value failed authentication: it was moved from another row, tampered with, "
                "or encrypted with a different key"
            ) from None

    def keyed_digest(self, purpose: str, message: bytes) -> bytes:
        """HMAC-SHA256 of ``message`` under a subkey of the active key for ``purpose``: identifiers that
        must be stable (equal inputs, equal outputs) without revealing their input to whoever lacks the
        key, e.g. content addresses. They change when the active key does."""
        key_id = self.active_key_id()
        sub = self._subkeys.get((key_id, purpose))
        if sub is None:
            try:
                key = self.encryption.keys.get_key(key_id)
            except KeyError:
                raise IntegrityError(f"encryption key {key_id!r} is not available") from None
            sub = self._subkeys[(key_id, purpose)] = hmac.new(key, purpose.encode(), hashlib.sha256).digest()
        return hmac.new(sub, message, hashlib.sha256).digest()


def is_sealed_bytes(data: bytes) -> bool:
    return data[: len(BYTES_MARKER)] == BYTES_MARKER


def bytes_key_id(envelope: bytes) -> str:
    return envelope[len(BYTES_MARKER) :].partition(b":")[0].decode(errors="replace")


def key_id_of(envelope: str) -> str:
    return envelope[len(MARKER) :].partition(":")[0]


def is_envelope(value: object) -> bool:
    return isinstance(value, str) and value.startswith(MARKER)
