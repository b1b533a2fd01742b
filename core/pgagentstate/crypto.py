"""Encryption at rest: AES-256-GCM for everything that holds user content.

Each ciphertext is bound to where it belongs through the AEAD's associated data (:class:`AD`: tenant, kind
of record, conversation, event id / document and key / memory key ...), so a ciphertext copied to another
row, conversation or tenant fails to decrypt with :class:`~pgagentstate.errors.IntegrityError`.

Keys come from a :class:`KeyProvider` by id; new writes use the provider's active key, rows written with
an older key still read, and ``pgagentstate rotate-keys`` re-encrypts them. A stored ciphertext is a JSON
string: U+E000 ``E`` ``:`` <key id> ``:`` <base64url(nonce | ciphertext | tag)> — U+E000 starts no user
string in storage (see :mod:`pgagentstate.codec`), so a ciphertext is never mistaken for data.

Ciphertexts written before the associated data was length-prefixed (U+E000 ``E`` <key id> ``:`` ...,
without the ``:`` after the marker; a key id is never empty and has no ``:``) bound the fields joined by
U+001F, which ids may contain. They still read, with that encoding, and ``rotate-keys`` rewrites them in
the current one whatever their key.
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
#: After a marker: the ciphertext binds :meth:`AD.encoded` (else :meth:`AD.legacy`, see above).
_CURRENT = ":"
_NONCE = 12
#: Start of a sealed bytes value (:meth:`Cipher.seal_bytes`): NUL, U+E000's first UTF-8 byte, "B". Values
#: stored as bytes by the core (snapshot data, chunks, writes) start with a serializer's type name or a
#: deflate header, never with these three bytes.
BYTES_MARKER = b"\x00\xeeB"


@dataclass(frozen=True, slots=True)
class AD:
    """Associated data: where a ciphertext belongs. ``parts`` (tenant, kind of record, its address) are
    bound by every encoding; ``extra`` (e.g. an event's kind and author) only by the current one."""

    parts: tuple[str, ...]
    extra: tuple[str, ...] = ()

    def key(self, name: str) -> AD:
        """The place of one key of a document sealed key by key."""
        return AD((*self.parts, name), self.extra)

    def encoded(self) -> bytes:
        """Every field length-prefixed, after their count: no two different places encode alike,
        whatever characters the fields hold."""
        fields = [f.encode("utf-8", "surrogatepass") for f in (*self.parts, *self.extra)]
        out = [b"pgagentstate ad 2", len(fields).to_bytes(4, "big")]
        for raw in fields:
            out += [len(raw).to_bytes(4, "big"), raw]
        return b"".join(out)

    def legacy(self) -> bytes:
        """The encoding of ciphertexts written before :meth:`encoded`: ``parts`` joined by U+001F."""
        return "\x1f".join(self.parts).encode("utf-8", "surrogatepass")


def _damaged() -> IntegrityError:
    return IntegrityError(
        "a stored value failed authentication: it was moved from another row, tampered with, "
        "or encrypted with a different key"
    )


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

    def seal(self, plaintext: str, ad: AD) -> str:
        key_id = self.active_key_id()
        nonce = os.urandom(_NONCE)
        sealed = self._aes(key_id).encrypt(nonce, plaintext.encode(), ad.encoded())
        return f"{MARKER}{_CURRENT}{key_id}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def open(self, envelope: str, ad: AD) -> str:
        """The plaintext of :meth:`seal`; :class:`IntegrityError` when it does not authenticate for ``ad``
        (moved from another place, tampered with, damaged, other key)."""
        rest = envelope[len(MARKER) :]
        current = rest.startswith(_CURRENT)
        key_id, _, body = rest[current:].partition(":")
        try:
            raw = base64.urlsafe_b64decode(body)
            aad = ad.encoded() if current else ad.legacy()
            return self._aes(key_id).decrypt(raw[:_NONCE], raw[_NONCE:], aad).decode()
        except (InvalidTag, ValueError):  # ValueError: bad base64 (binascii.Error), short body, not UTF-8
            raise _damaged() from None

    def seal_bytes(self, plaintext: bytes, ad: AD) -> bytes:
        """Bytes sealed with the active key: ``BYTES_MARKER`` ``:`` <key id> ``:`` nonce | ciphertext | tag."""
        key_id = self.active_key_id()
        nonce = os.urandom(_NONCE)
        sealed = self._aes(key_id).encrypt(nonce, plaintext, ad.encoded())
        return BYTES_MARKER + b":" + key_id.encode() + b":" + nonce + sealed

    def open_bytes(self, envelope: bytes, ad: AD) -> bytes:
        """The plaintext of :meth:`seal_bytes`; :class:`IntegrityError` when it does not authenticate for
        ``ad`` (moved from another place, tampered with, other key)."""
        rest = envelope[len(BYTES_MARKER) :]
        current = rest.startswith(b":")
        key_id, _, raw = rest[current:].partition(b":")
        try:
            aad = ad.encoded() if current else ad.legacy()
            return self._aes(key_id.decode()).decrypt(raw[:_NONCE], raw[_NONCE:], aad)
        except (InvalidTag, ValueError):  # ValueError: short body, key id not UTF-8
            raise _damaged() from None

    def keyed_digest(self, purpose: str, message: bytes, key_id: str | None = None) -> bytes:
        """HMAC-SHA256 of ``message`` under a subkey of a key (the active one by default) for ``purpose``:
        identifiers that must be stable (equal inputs, equal outputs) without revealing their input to
        whoever lacks the key, e.g. content addresses. They change when the active key does."""
        key_id = key_id or self.active_key_id()
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


def is_current_bytes(envelope: bytes, key_id: str) -> bool:
    """Sealed with ``key_id`` and the current associated data: nothing for a rotation to do."""
    return envelope.startswith(BYTES_MARKER + b":" + key_id.encode() + b":")


def is_current(envelope: str, key_id: str) -> bool:
    """Sealed with ``key_id`` and the current associated data: nothing for a rotation to do."""
    return envelope.startswith(f"{MARKER}{_CURRENT}{key_id}:")


def is_envelope(value: object) -> bool:
    return isinstance(value, str) and value.startswith(MARKER)
