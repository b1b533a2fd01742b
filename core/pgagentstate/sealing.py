"""Values on their way to and from storage: validated JSON, encrypted when the store has a cipher.

Whole values (an event's payload, a memory, a scratchpad entry, a step's result) are sealed as one
ciphertext. Documents that the server merges key by key (state documents, conversation metadata) are
sealed key by key, so ``data || patch`` keeps working on ciphertexts; their key names stay readable.
The associated data built here names where a value belongs; see :mod:`pgagentstate.crypto`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from .codec import (
    Limits,
    decode_text,
    encode,
    escape_text,
    parse_json,
    storage_text_to_json,
    unescape,
    unescape_text,
)
from .crypto import AD, MARKER, Cipher, is_envelope
from .errors import IntegrityError


def ad(tenant: str, kind: str, *parts: str, extra: tuple[str, ...] = ()) -> AD:
    """Associated data: tenant, kind of record and its address; ``extra``: more fields of the record
    that its ciphertext vouches for (bound by the current encoding only, see :class:`~pgagentstate.crypto.AD`)."""
    return AD((tenant, kind, *parts), extra)


def lock_key(cipher: Cipher | None, tenant: str, kind: str, name: str) -> int:
    """The advisory lock key of ``name`` (a conversation id, a lock name) in a tenant: 64 bits of a digest
    of the three fields length-prefixed, so no two different triples share a key by construction; with
    encryption an HMAC under a subkey of the active key, so another tenant cannot compute it to probe or
    block the lock (it can still see held keys in pg_locks; see docs/security.md)."""
    message = AD((tenant, kind, name)).encoded()
    if cipher is None:
        digest = hashlib.sha256(b"pgagentstate advisory lock\x00" + message).digest()
    else:
        digest = cipher.keyed_digest("pgagentstate advisory lock", message)
    return int.from_bytes(digest[:8], "big", signed=True)


def _plaintext_rejected() -> IntegrityError:
    return IntegrityError("a stored value is not encrypted although this store requires encryption")


def _no_keys() -> IntegrityError:
    return IntegrityError("a stored value is encrypted; configure the store's encryption keys to read it")


def seal(cipher: Cipher | None, value: Any, limits: Limits, where: AD, *, path: str) -> str:
    """JSON text for a jsonb parameter: the value, or its ciphertext."""
    text = encode(value, limits, path=path)
    if cipher is None:
        return text
    return json.dumps(cipher.seal(text, where))


def unseal_plain(text: str, *, raw: bool = False) -> Any:
    """:func:`unseal` for a store without a cipher (which needs no associated data)."""
    if text.startswith('"' + MARKER):
        raise _no_keys()
    return storage_text_to_json(text) if raw else decode_text(text)


def unseal(cipher: Cipher | None, text: str, where: AD, *, raw: bool = False) -> Any:
    """The value stored as ``text``; ``raw`` returns its JSON text instead of parsing it."""
    if cipher is None:
        return unseal_plain(text, raw=raw)
    stored = parse_json(text)
    if is_envelope(stored):
        plain = cipher.open(stored, where)
        return storage_text_to_json(plain) if raw else decode_text(plain)
    if cipher.required:
        raise _plaintext_rejected()
    return storage_text_to_json(text) if raw else unescape(stored)


def unseal_parsed(cipher: Cipher | None, stored: Any, where: AD, *, escaped: bool) -> Any:
    """:func:`unseal` for a value already parsed out of a larger JSON text (many values, one parse);
    ``escaped``: that text holds storage escapes (:func:`~pgagentstate.codec.has_escapes`)."""
    if cipher is None:
        if not escaped:  # an envelope starts with the escape character, so without one there is none
            return stored
        if isinstance(stored, str) and stored.startswith(MARKER):
            raise _no_keys()
        return unescape(stored)
    if is_envelope(stored):
        return decode_text(cipher.open(stored, where))
    if cipher.required:
        raise _plaintext_rejected()
    return unescape(stored) if escaped else stored


def seal_doc(cipher: Cipher | None, data: Mapping[str, Any], limits: Limits, where: AD, *, path: str) -> str:
    """JSON text of a document, sealed key by key when there is a cipher."""
    text = encode(dict(data), limits, path=path)  # validates the whole document and its size
    if cipher is None:
        return text
    sealed = {
        escape_text(key): cipher.seal(encode(value, limits, path=f"{path}.{key}"), where.key(key))
        for key, value in data.items()
    }
    return json.dumps(sealed, ensure_ascii=False)


def unseal_doc(cipher: Cipher | None, text: str, where: AD) -> dict[str, Any]:
    if cipher is None:
        if MARKER in text:
            stored = parse_json(text)
            if any(is_envelope(v) for v in stored.values()):
                raise _no_keys()
        value: dict[str, Any] = decode_text(text)
        return value
    out: dict[str, Any] = {}
    for raw_key, stored in parse_json(text).items():
        key = unescape_text(raw_key)
        if is_envelope(stored):
            out[key] = decode_text(cipher.open(stored, where.key(key)))
        elif cipher.required:
            raise _plaintext_rejected()
        else:
            out[key] = unescape(stored)
    return out
