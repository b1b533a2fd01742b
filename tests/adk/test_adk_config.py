"""Configuration: URI schemes in ADK's service registry, ``get_fast_api_app`` and the API server over HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from google.adk.cli.fast_api import get_fast_api_app
from google.adk.cli.service_registry import ServiceRegistry, get_service_registry

from pgagentstate import StateRef, StateStore
from pgagentstate.adk import PostgresMemoryService, PostgresSessionService, conversation_id_for, register_services
from pgagentstate.adk._store import parse_uri
from pgagentstate.adk.registry import memory_service_factory, session_service_factory
from pgagentstate.connect import dsn_url

ROOT = Path(__file__).resolve().parents[2]
AGENT = "support_bot"

AGENT_PY = textwrap.dedent(
    '''
    from typing import AsyncGenerator

    from google.adk.agents import LlmAgent
    from google.adk.models import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types


    class EchoLlm(BaseLlm):
        model: str = "scripted-echo"

        async def generate_content_async(self, llm_request, stream=False) -> AsyncGenerator[LlmResponse, None]:
            last = [p.text for c in llm_request.contents if c.role == "user" for p in c.parts if p.text][-1]
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"echo: {last}")]))


    root_agent = LlmAgent(name="support_bot", model=EchoLlm(), instruction="help")
    '''
)


def make_agents_dir(base: Path, *, services_py: str | None = None, services_yaml: str | None = None) -> Path:
    agents = base / f"agents_{uuid.uuid4().hex[:6]}"
    (agents / AGENT).mkdir(parents=True)
    (agents / AGENT / "__init__.py").write_text("from . import agent\n")
    (agents / AGENT / "agent.py").write_text(AGENT_PY)
    if services_py is not None:
        (agents / "services.py").write_text(services_py)
    if services_yaml is not None:
        (agents / "services.yaml").write_text(services_yaml)
    return agents


def uri_for(dsn: str, schema: str, scheme: str = "pgagentstate") -> str:
    url = dsn_url(dsn, scheme)  # the test DSN may be in libpq's key=value form
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


# ---------------------------------------------------------------- URIs and the registry


def test_parse_uri() -> None:
    cfg = parse_uri("pgagentstate://u:pw@db.internal:6432/agents?tenant=acme&schema=st&sslmode=require")
    assert cfg.dsn == "postgresql://u:pw@db.internal:6432/agents?sslmode=require"
    assert (cfg.tenant, cfg.schema, cfg.embedded_dir) == ("acme", "st", None)
    assert parse_uri("pgagentstate://").dsn is None  # $PGAGENTSTATE_DSN / $DATABASE_URL / embedded
    emb = parse_uri("pgagentstate+embedded:///var/lib/agents/pg?tenant=t1")
    assert (emb.dsn, emb.embedded_dir, emb.tenant) == (None, Path("/var/lib/agents/pg"), "t1")
    assert parse_uri("pgagentstate+embedded://").embedded_dir == Path(".pgagentstate/pg")
    with pytest.raises(ValueError, match="only tenant=, schema="):
        parse_uri("pgagentstate+embedded://?sslmode=require")
    with pytest.raises(ValueError, match="not a URI"):
        parse_uri("just-a-path")


def test_register_services_adds_both_schemes_for_sessions_and_memory() -> None:
    registry = ServiceRegistry()
    assert registry.create_session_service("pgagentstate://h/db") is None
    register_services(registry)
    for scheme in ("pgagentstate", "pgagentstate+embedded"):
        session = registry.create_session_service(f"{scheme}://h/db", agents_dir="/tmp")
        memory = registry.create_memory_service(f"{scheme}://h/db", agents_dir="/tmp")
        assert isinstance(session, PostgresSessionService)
        assert isinstance(memory, PostgresMemoryService)
    register_services(registry)  # idempotent
    with pytest.raises(TypeError, match="unsupported options"):
        session_service_factory("pgagentstate://h/db", pool_size=3)
    assert isinstance(memory_service_factory("pgagentstate://h/db", tenant="t", max_size=2), PostgresMemoryService)


async def test_uri_options_reach_the_store(dsn: str, schema: str) -> None:
    service = session_service_factory(uri_for(dsn, schema) + "&tenant=acme", agents_dir="/tmp")
    try:
        store = await service.store()
        assert (store.tenant, store.schema) == ("acme", schema)
        s = await service.create_session(app_name="a", user_id="u")
        # tenants are isolated: the default tenant does not see acme's session
        with StateStore(dsn, schema=schema) as default:
            assert default.get_conversation(conversation_id_for("a", "u", s.id)) is None
            assert default.with_tenant("acme").get_conversation(conversation_id_for("a", "u", s.id)) is not None
    finally:
        await service.close()


def test_store_and_connection_are_exclusive(dsn: str) -> None:
    with pytest.raises(ValueError, match="either"):
        PostgresSessionService(dsn, uri="pgagentstate://h/db")


# ---------------------------------------------------------------- get_fast_api_app (ASGI)


def exercise_api(client: Any, dsn: str, schema: str, *, tenant: str = "default") -> None:
    """Create a session, run the agent, read it back, add it to memory, delete it: over the real routes."""
    base = f"/apps/{AGENT}/users/cliente/sessions"
    r = client.post(base, json={"state": {"email": "meu@email.com", "user:lang": "pt"}})
    assert r.status_code == 200, r.text
    sid = r.json()["id"]
    assert r.json()["state"] == {"email": "meu@email.com", "user:lang": "pt"}

    r = client.post(
        "/run",
        json={
            "app_name": AGENT,
            "user_id": "cliente",
            "session_id": sid,
            "new_message": {"role": "user", "parts": [{"text": "order 12345 arrived broken"}]},
        },
    )
    assert r.status_code == 200, r.text
    assert [e["content"]["parts"][0]["text"] for e in r.json()] == ["echo: order 12345 arrived broken"]

    r = client.get(f"{base}/{sid}")
    assert r.status_code == 200
    body = r.json()
    assert [e["content"]["parts"][0]["text"] for e in body["events"]] == [
        "order 12345 arrived broken",
        "echo: order 12345 arrived broken",
    ]
    assert body["state"] == {"email": "meu@email.com", "user:lang": "pt"}
    assert [s["id"] for s in client.get(base).json()] == [sid]

    r = client.patch(f"/apps/{AGENT}/users/cliente/memory", json={"session_id": sid})
    assert r.status_code == 200, r.text

    # what the server wrote is in our schema, through the core
    with StateStore(dsn, schema=schema, tenant=tenant) as store:
        cid = conversation_id_for(AGENT, "cliente", sid)
        conv = store.get_conversation(cid)
        assert conv is not None and (conv.framework, conv.app, conv.user_id) == ("adk", AGENT, "cliente")
        assert [e.kind for e in store.list_events(cid)] == ["adk_event", "adk_event"]
        assert store.get_state(StateRef.user(AGENT, "cliente")).data == {"lang": "pt"}  # type: ignore[union-attr]
        found = store.search_memory(("adk", AGENT, "cliente"), query="broken")
        assert sorted(m.value["text"] for m in found) == [
            "echo: order 12345 arrived broken",
            "order 12345 arrived broken",
        ]

    assert client.delete(f"{base}/{sid}").status_code == 200
    assert client.get(f"{base}/{sid}").status_code == 404


@pytest.fixture
def services_py_agents(tmp_path: Path) -> Iterator[Path]:
    agents = make_agents_dir(
        tmp_path, services_py="from pgagentstate.adk import register_services\n\nregister_services()\n"
    )
    yield agents
    sys.modules.pop("services", None)  # ADK imports the agents dir's services.py as "services"


def test_fast_api_app_with_services_py(services_py_agents: Path, dsn: str, schema: str) -> None:
    uri = uri_for(dsn, schema)
    app = get_fast_api_app(
        agents_dir=str(services_py_agents), session_service_uri=uri, memory_service_uri=uri, web=False
    )
    with TestClient(app) as client:
        exercise_api(client, dsn, schema)


def test_fast_api_app_with_services_yaml(tmp_path: Path, dsn: str, schema: str) -> None:
    agents = make_agents_dir(
        tmp_path,
        services_yaml=textwrap.dedent(
            """
            services:
              - scheme: pgyaml
                type: session
                class: pgagentstate.adk.PostgresSessionService
              - scheme: pgyaml
                type: memory
                class: pgagentstate.adk.PostgresMemoryService
            """
        ),
    )
    uri = uri_for(dsn, schema, scheme="pgyaml") + "&tenant=yaml"
    app = get_fast_api_app(agents_dir=str(agents), session_service_uri=uri, memory_service_uri=uri, web=False)
    with TestClient(app) as client:
        exercise_api(client, dsn, schema, tenant="yaml")
    assert get_service_registry().create_session_service("pgyaml://h/db") is not None


def test_embedded_uri(tmp_path: Path, schema: str, dsn: str) -> None:
    # The test suite's own embedded server (started by the dsn fixture when no server is configured).
    data = ROOT / ".pgagentstate" / "test-pg"
    if "host=" not in dsn or str(data) not in dsn:
        pytest.skip("the suite runs on a configured server, not on the embedded one")
    register_services()
    uri = f"pgagentstate+embedded://{data}?schema={schema}"
    agents = make_agents_dir(tmp_path)
    app = get_fast_api_app(agents_dir=str(agents), session_service_uri=uri, memory_service_uri=uri, web=False)
    with TestClient(app) as client:
        exercise_api(client, dsn, schema)


# ---------------------------------------------------------------- `adk api_server` over HTTP


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_adk_api_server_over_http(services_py_agents: Path, dsn: str, schema: str, tmp_path: Path) -> None:
    port = free_port()
    uri = uri_for(dsn, schema)
    adk = Path(sys.executable).with_name("adk")
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(
        [str(adk), "api_server", "--host", "127.0.0.1", "--port", str(port),
         "--session_service_uri", uri, "--memory_service_uri", uri, str(services_py_agents)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            for _ in range(600):
                if proc.poll() is not None:
                    break
                try:
                    if client.get("/list-apps").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            assert AGENT in client.get("/list-apps").json()
            exercise_api(client, dsn, schema)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
