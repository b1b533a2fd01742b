"""Tenant isolation enforced by Postgres itself: row-level security, as a role that owns nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from pgagentstate import NewEvent, NotFound, StateRef, StateStore
from pgagentstate.errors import DatabaseError

APP_ROLE = "pgagentstate_test_app"


@pytest.fixture
def app_dsn(dsn: str, schema: str) -> Iterator[str]:
    """A DSN for a LOGIN role that is neither superuser nor owner: RLS binds it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (APP_ROLE,)).fetchone()
        if not exists:
            with contextlib.suppress(psycopg.errors.DuplicateObject):  # another test run made it meanwhile
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS").format(sql.Identifier(APP_ROLE)))
        ident, role = sql.Identifier(schema), sql.Identifier(APP_ROLE)
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(ident, role))
        grant = "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {} TO {}"
        conn.execute(sql.SQL(grant).format(ident, role))
        conn.execute(sql.SQL("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {} TO {}").format(ident, role))
    yield psycopg.conninfo.make_conninfo(dsn, user=APP_ROLE)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA {} FROM {}").format(ident, role))
        conn.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM {}").format(ident, role))
        conn.execute(sql.SQL("REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {} FROM {}").format(ident, role))


def _seed(store: StateStore) -> None:
    store.create_conversation("conv-b", user_id="bob")
    store.append_events("conv-b", [NewEvent({"text": "bob's secret"})])
    store.put_state(StateRef.conversation("conv-b"), {"email": "bob@example.com"})
    store.put_memory(("users", "bob"), "email", {"text": "bob@example.com"}, user_id="bob")
    store.run_once("refund-b", lambda key: {"txn": "b"}, api="payment")


def test_every_table_has_row_level_security(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT c.relname, c.relrowsecurity, count(p.polname) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_policy p ON p.polrelid = c.oid "
            "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname <> 'migrations' GROUP BY 1, 2",
            (schema,),
        ).fetchall()
    assert rows
    assert [r[0] for r in rows if not r[1] or r[2] == 0] == []


def test_a_tenant_cannot_see_touch_or_detect_another(app_dsn: str, schema: str) -> None:
    with StateStore(app_dsn, schema=schema, tenant="tenant-b", tenant_isolation=True) as b:
        _seed(b)
    with StateStore(app_dsn, schema=schema, tenant="tenant-a", tenant_isolation=True) as a:
        assert a.get_conversation("conv-b") is None
        assert a.list_conversations() == []
        assert a.list_events("conv-b") == []
        assert a.get_state(StateRef.conversation("conv-b")) is None
        assert a.search_memory(()) == [] and a.get_memory(("users", "bob"), "email") is None
        assert a.get_ledger_entry("refund-b") is None
        with pytest.raises(NotFound):
            a.append_events("conv-b", [NewEvent({"text": "injected"})])
        assert a.delete_conversation("conv-b") is False
        assert a.delete_memory(("users", "bob"), "email") is False
        # The same ids are free for tenant A: nothing reveals that B uses them.
        a.create_conversation("conv-b")
        assert a.run_once("refund-b", lambda key: {"txn": "a"}, api="payment") == {"txn": "a"}
    with StateStore(app_dsn, schema=schema, tenant="tenant-b", tenant_isolation=True) as b:
        assert [e.payload for e in b.list_events("conv-b")] == [{"text": "bob's secret"}]
        assert b.run_once("refund-b", lambda key: {"txn": "again"}, api="payment") == {"txn": "b"}


def test_the_database_enforces_it_even_without_the_stores_filters(app_dsn: str, dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema, tenant="tenant-b") as owner:  # the owner bypasses RLS
        _seed(owner)
    table = sql.Identifier(schema, "conversations")
    with psycopg.connect(app_dsn) as conn:
        # No tenant set: nothing is visible.
        assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone() == (0,)
        conn.execute("SELECT set_config('pgagentstate.tenant', 'tenant-a', true)")
        assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone() == (0,)
        assert conn.execute(sql.SQL("UPDATE {} SET status = 'failed'").format(table)).rowcount == 0
        assert conn.execute(sql.SQL("DELETE FROM {}").format(table)).rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(sql.SQL("INSERT INTO {} (tenant_id, id) VALUES ('tenant-b', 'forged')").format(table))
        conn.rollback()
    with StateStore(dsn, schema=schema, tenant="tenant-b") as owner:
        conv = owner.get_conversation("conv-b")
        assert conv is not None and conv.status == "active"


def test_every_operation_works_as_the_restricted_role(app_dsn: str, schema: str) -> None:
    with StateStore(app_dsn, schema=schema, tenant="t", tenant_isolation=True) as s:
        with s.turn("c1", create=True) as turn:
            turn.append({"text": "oi"})
            turn.state["email"] = "meu@email.com"
        s.append_events("c1", [NewEvent(1)], state_patches=[(StateRef.user("app", "u"), {"k": 1})])
        assert s.load_conversation("c1", states=[StateRef.conversation("c1")]).states[0] is not None
        s.run_step("c1", "refund", "verify", lambda: True)
        s.put_scratch("c1", "k", 1)
        assert s.list_scratch("c1") == {"k": 1}
        assert s.pop_event("c1") is not None
        with s.conversation_lock("c1"):
            pass
        assert s.delete_conversation("c1") is True


def test_a_role_bound_by_rls_without_tenant_isolation_is_told_so(app_dsn: str, schema: str) -> None:
    with StateStore(app_dsn, schema=schema, tenant="acme") as store, pytest.raises(DatabaseError) as info:
        store.create_conversation("c1")
    assert "tenant_isolation=True" in str(info.value)
    with StateStore(app_dsn, schema=schema, tenant="acme", tenant_isolation=True) as store:
        assert store.list_conversations() == []  # nothing was written
