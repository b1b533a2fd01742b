"""What a new operator runs into first: ids that can be copied, the ids the docs show, state documents by
their names, estimates that are not zeros, durations for gc, full doctor details, and migration numbers."""

from __future__ import annotations

import json
import re

import pytest

from pgagentstate import StateRef, StateStore
from pgagentstate.ui.term import table


def test_conversation_ids_are_listed_whole(cli, store: StateStore) -> None:  # type: ignore[no-untyped-def]
    long_id = "whatsapp:5511999999999:" + "x" * 60
    store.create_conversation(long_id, user_id="u" * 70)
    code, out, _ = cli("conversations")
    assert code == 0 and long_id in out and "u" * 70 in out and "…" not in out


def test_show_and_state_take_an_adk_id_as_the_docs_show_it(cli, store: StateStore) -> None:  # type: ignore[no-untyped-def]
    stored = "adk:shop/ana%40mail.com/s1"  # as the ADK adapter stores it: each part percent-encoded
    store.create_conversation(stored, framework="adk")
    store.put_state(StateRef.conversation(stored), {"email": "ana@mail.com"})
    for given in (stored, "adk:shop/ana@mail.com/s1"):
        code, out, err = cli("show", given)
        assert code == 0 and stored in out, err
        code, out, err = cli("state", given)
        assert code == 0 and "ana@mail.com" in out, err


def test_state_names_the_documents_a_conversation_has(cli, store: StateStore) -> None:  # type: ignore[no-untyped-def]
    store.create_conversation("one")
    store.put_state(StateRef.conversation("one", "order"), {"id": "12345"})
    code, out, err = cli("state", "one")  # its only document, whatever its name
    assert code == 0 and "12345" in out and "order" in out, err

    store.create_conversation("two")
    store.put_state(StateRef.conversation("two", "order"), {"id": "1"})
    store.put_state(StateRef.conversation("two", "profile"), {"email": "a@b.c"})
    code, _, err = cli("state", "two")
    assert code == 1 and "'order'" in err and "'profile'" in err and "no state document 'state'" in err
    code, out, _ = cli("state", "two", "--name", "profile")
    assert code == 0 and "a@b.c" in out

    store.create_conversation("empty")
    code, _, err = cli("state", "empty")
    assert code == 1 and "no state documents" in err
    code, _, err = cli("state", "nobody")
    assert code == 1 and "not found" in err


def test_stats_does_not_show_an_unknown_estimate_as_zero(cli, store: StateStore) -> None:  # type: ignore[no-untyped-def]
    store.put_memories([(("u1", "facts"), f"k{i}", {"i": i}) for i in range(16)])
    code, out, _ = cli("stats", "--json")
    memories = next(t for t in json.loads(out)["tables"] if t["table"] == "memories")
    assert code == 0 and json.loads(out)["memories"] == 16
    assert memories["estimated_rows"] == -1  # never analyzed: unknown
    code, out, _ = cli("stats")
    tables = out.split("table (all tenants)", 1)[1]
    line = next(row for row in tables.splitlines() if row.startswith("memories "))
    assert line.split()[1] == "?", line


def test_gc_takes_days_or_durations(cli, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    from pgagentstate.ui.commands.base import days

    assert [days(a) for a in ("30", "30d", "12h", "2w", "1.5")] == [30, 30, 0.5, 14, 1.5]
    code, _, _ = cli("gc", "--completed-days", "12h", "--dry-run", "--json")
    assert code == 0
    with pytest.raises(SystemExit):
        cli("gc", "--completed-days", "soon", "--dry-run")
    assert "not days or a duration" in capsys.readouterr().err


def test_gc_dry_run_says_how_its_steps_chain(cli) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = cli("gc", "--abandon-idle-days", "1", "--abandoned-days", "30d", "--dry-run")
    assert code == 0 and "the mark starts that period" in out


def test_long_details_are_not_cut() -> None:
    detail = "because " * 60
    text = table(["", "check", "detail"], [("WARN", "pool", detail.strip())], whole=("detail",))
    assert detail.strip() in text
    assert "…" in table(["detail"], [(detail,)], max_col=50)


def test_migrate_says_why_a_number_is_missing(cli) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = cli("migrate")
    # 5 was never released; numbers reserved by work merged later (0012 came before 0010/0011) are listed too.
    assert code == 0 and re.search(r"no migration 5(, \d+)*: never released", out), out
    code, out, _ = cli("migrate", "--json")
    assert json.loads(out)["unused_numbers"][0] == 5
