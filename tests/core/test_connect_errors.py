"""A DSN that does not lead to a server fails on the first call, saying why, for every form of DSN."""

from __future__ import annotations

import logging
import socket

import pytest

from pgagentstate import AsyncStateStore, ConnectionLost, StateStore


def closed_port() -> int:
    """A local port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("form", ["url", "keywords"])
def test_a_wrong_dsn_fails_at_once_with_the_cause(form: str, caplog: pytest.LogCaptureFixture) -> None:
    port = closed_port()
    dsn = (f"postgresql://postgres:secret@127.0.0.1:{port}/x" if form == "url"
           else f"user=postgres password=secret host=127.0.0.1 port={port} dbname=x")
    caplog.set_level(logging.WARNING)
    with StateStore(dsn) as store, pytest.raises(ConnectionLost) as info:
        store.get_conversation("c1")
    message = str(info.value)
    assert f"127.0.0.1:{port}" in message and "refused" in message.lower(), message
    assert "secret" not in message
    # No pool was started to retry in the background (it logged a warning per attempt, 11 of them).
    assert not [r for r in caplog.records if r.name.startswith("psycopg")], caplog.records


async def test_a_wrong_dsn_fails_at_once_with_the_cause_async(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with AsyncStateStore(f"postgresql://postgres@127.0.0.1:{closed_port()}/x") as store:
        with pytest.raises(ConnectionLost, match=r"(?i)refused"):
            await store.get_conversation("c1")
    assert not [r for r in caplog.records if r.name.startswith("psycopg")], caplog.records


def test_a_right_dsn_still_connects_through_the_probe(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema) as store:
        store.create_conversation("c1")
        assert store.get_conversation("c1") is not None


@pytest.mark.parametrize("keywords", [
    "user=postgres dbname=x host=127.0.0.1",
    "host=/tmp/sockets user=postgres dbname=postgres port=5433",
    "user=a password='p@ss w/:' host=db.internal port=6432 dbname=agents sslmode=require",
])
def test_a_key_value_dsn_has_the_same_url(keywords: str) -> None:
    from psycopg.conninfo import conninfo_to_dict

    from pgagentstate.connect import dsn_url

    url = dsn_url(keywords)
    assert url.startswith("postgresql://") and conninfo_to_dict(url) == conninfo_to_dict(keywords)
    assert dsn_url(url) == url  # a URL stays as it is
    assert dsn_url(keywords, "pgagentstate").startswith("pgagentstate://")


def test_a_key_value_test_dsn_reaches_the_same_server(dsn: str, schema: str) -> None:
    """The suite runs with PGAGENTSTATE_TEST_DSN in either form: the store takes both."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from pgagentstate.connect import dsn_url

    keywords = make_conninfo("", **conninfo_to_dict(dsn))
    assert "://" not in keywords
    with StateStore(keywords, schema=schema) as store:
        store.create_conversation("c1")
    with StateStore(dsn_url(keywords), schema=schema) as store:
        assert store.get_conversation("c1") is not None
