"""Issue 14, item 16: advisory lock keys are unambiguous across tenants and, with encryption, keyed so
that another tenant cannot compute them."""

from __future__ import annotations

import os

import psycopg
import pytest

from pgagentstate import ConflictError, StateStore
from pgagentstate.crypto import Encryption, StaticKeyProvider

KEYS = StaticKeyProvider({"k1": os.urandom(32)}, active="k1")
SMALL = {"min_size": 1, "max_size": 2}


def test_tenant_and_id_do_not_run_together(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema, tenant="acme", **SMALL) as acme, \
            StateStore(dsn, schema=schema, tenant="acme:vip", **SMALL) as other:
        with acme.conversation_lock("vip:1"), other.conversation_lock("1", timeout=0.5):
            pass  # two different conversations: neither waits for the other
        with acme.advisory_lock("gc:1"), other.advisory_lock("1", timeout=0.5):
            pass


def test_with_encryption_the_key_cannot_be_computed_from_tenant_and_id(dsn: str, schema: str) -> None:
    guesses = ("SELECT pg_try_advisory_xact_lock(hashtextextended('pgagentstate.conversation:acme:c1', 0)), "
               "pg_try_advisory_xact_lock(hashtextextended('pgagentstate.lock:acme:gc', 0))")
    with StateStore(dsn, schema=schema, tenant="acme", encryption=Encryption(KEYS), **SMALL) as acme, \
            StateStore(dsn, schema=schema, tenant="acme", encryption=Encryption(KEYS), **SMALL) as same, \
            StateStore(dsn, schema=schema, tenant="acme", **SMALL) as keyless, \
            acme.conversation_lock("c1"), acme.advisory_lock("gc"):
        with psycopg.connect(dsn) as conn:
            assert conn.execute(guesses).fetchone() == (True, True)
        with keyless.conversation_lock("c1", timeout=0.5):  # without the key: another lock
            pass
        with pytest.raises(ConflictError), same.conversation_lock("c1", timeout=0.2):  # the same key excludes
            pass
