"""Issue 14, items 4, 9, 14, 15: the first recorded result wins, a callee's error reaches its caller as is,
and with encryption the ledger gives away neither requests (keyed hash) nor error texts."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgagentstate import IdempotencyConflict, StateStore
from pgagentstate.crypto import Encryption, StaticKeyProvider

K1, K2 = os.urandom(32), os.urandom(32)


def encrypted(dsn: str, schema: str, keys: dict[str, bytes] | None = None, active: str = "k1") -> StateStore:
    return StateStore(dsn, schema=schema, encryption=Encryption(StaticKeyProvider(keys or {"k1": K1}, active=active)))


def raw(dsn: str, schema: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        cur = conn.execute(statement.encode())
        return cur.fetchall() if cur.description else []


# --- item 4 --------------------------------------------------------------------------------------------


def test_the_first_recorded_result_wins_when_a_lease_ran_out(
    dsn: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    started = {"A": threading.Event(), "B": threading.Event()}
    go = {"A": threading.Event(), "B": threading.Event()}
    got: dict[str, Any] = {}

    def callee(name: str) -> Any:
        def fn(key: str) -> str:
            started[name].set()
            assert go[name].wait(30)
            return f"refund by {name}"
        return fn

    def caller(name: str) -> None:
        with StateStore(dsn, schema=schema) as store:
            got[name] = store.run_once("refund-1", callee(name), api="pay", request={"amount": 5})

    a = threading.Thread(target=caller, args=("A",))
    a.start()
    assert started["A"].wait(30)
    raw(dsn, schema, "UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 minute'")  # A is slow
    b = threading.Thread(target=caller, args=("B",))
    b.start()
    assert started["B"].wait(30)  # B took over
    go["A"].set()
    a.join(30)
    assert got["A"] == "refund by A"  # A's caller acts on A's result
    with caplog.at_level(logging.WARNING, logger="pgagentstate.ledger"):
        go["B"].set()
        b.join(30)
    assert got["B"] == "refund by A"
    assert "refund-1" in caplog.text
    with StateStore(dsn, schema=schema) as store:
        entry = store.get_ledger_entry("refund-1")
        assert entry is not None and entry.result == "refund by A" and entry.status == "succeeded"


# --- item 9 --------------------------------------------------------------------------------------------


class MailboxError(Exception):
    pass


BAD_TEXT = "no mailbox for a\x00b \ud800"


def test_run_once_callee_error_with_nul_and_lone_surrogate_reaches_the_caller(store: StateStore) -> None:
    error = MailboxError(BAD_TEXT)

    def fn(key: str) -> None:
        raise error

    with pytest.raises(MailboxError) as caught:
        store.run_once("k", fn, request={"a": 1})
    assert caught.value is error
    entry = store.get_ledger_entry("k")
    assert entry is not None and entry.status == "failed"
    assert entry.error is not None and entry.error.startswith("MailboxError: no mailbox for a")
    assert store.run_once("k", lambda key: "sent", request={"a": 1}) == "sent"  # retried at once, no lease wait


def test_run_step_callee_error_with_nul_and_lone_surrogate_reaches_the_caller(store: StateStore) -> None:
    store.create_conversation("c1")
    error = MailboxError(BAD_TEXT)

    def fn() -> None:
        raise error

    with pytest.raises(MailboxError) as caught:
        store.run_step("c1", "refund", "notify", fn)
    assert caught.value is error
    (step,) = store.get_workflow("c1", "refund")
    assert step.status == "failed"


# --- items 14 and 15 -----------------------------------------------------------------------------------


def test_an_encrypted_request_is_not_hashed_in_clear(dsn: str, schema: str) -> None:
    request = {"amount": 4999}
    unkeyed = hashlib.sha256(
        json.dumps({"api": "pay", "request": request}, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    with encrypted(dsn, schema) as store:
        assert store.run_once("r1", lambda key: "ok", api="pay", request=request) == "ok"
        [(stored,)] = raw(dsn, schema, "SELECT request_hash FROM idempotency_keys")
        assert unkeyed not in stored
        assert store.run_once("r1", lambda key: "again", api="pay", request=request) == "ok"  # a retry matches
        with pytest.raises(IdempotencyConflict):
            store.run_once("r1", lambda key: "other", api="pay", request={"amount": 5000})
    with encrypted(dsn, schema, {"k1": K1, "k2": K2}, active="k2") as store:
        assert store.run_once("r1", lambda key: "again", api="pay", request=request) == "ok"  # older key
        assert store.rotate_keys()["ledger_request"] == 1
    with encrypted(dsn, schema, {"k2": K2}, active="k2") as store:  # k1 retired: the hash was made again
        assert store.run_once("r1", lambda key: "again", api="pay", request=request) == "ok"
        with pytest.raises(IdempotencyConflict):
            store.run_once("r1", lambda key: "other", api="pay", request={"amount": 5000})


def test_an_encrypted_ledger_stores_no_error_text_in_clear(dsn: str, schema: str) -> None:
    def fn(key: str) -> None:
        raise MailboxError("no mailbox meu@email.com")

    with encrypted(dsn, schema) as store:
        with pytest.raises(MailboxError):
            store.run_once("m1", fn)
        assert "meu@email.com" not in str(raw(dsn, schema, "SELECT error FROM idempotency_keys"))
        entry = store.get_ledger_entry("m1")
        assert entry is not None and entry.error == "MailboxError: no mailbox meu@email.com"
    with encrypted(dsn, schema, {"k1": K1, "k2": K2}, active="k2") as store:
        assert store.rotate_keys()["ledger_error"] == 1
    with encrypted(dsn, schema, {"k2": K2}, active="k2") as store:
        entry = store.get_ledger_entry("m1")
        assert entry is not None and entry.error == "MailboxError: no mailbox meu@email.com"


@pytest.mark.parametrize(
    ("option", "value"),
    [("lease", float("nan")), ("lease", float("inf")), ("lease", 1e300), ("lease", "10"), ("lease", 0),
     ("wait", float("nan")), ("wait", -1), ("wait", "5")],
)
def test_run_once_refuses_bad_durations_before_the_callee_runs(store: StateStore, option: str, value: Any) -> None:
    from pgagentstate import InvalidInput

    ran: list[str] = []
    with pytest.raises(InvalidInput) as info:
        store.run_once("k-bad-duration", lambda key: ran.append(key), **{option: value})
    assert info.value.path == option and ran == []
    assert store.get_ledger_entry("k-bad-duration") is None
