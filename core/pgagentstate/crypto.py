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


def key_id_of(envelope: str) -> str:
    return envelope[len(MARKER) :].partition(":")[0]


def is_envelope(value: object) -> bool:
    return isinstance(value, str) and value.startswith(MARKER)
