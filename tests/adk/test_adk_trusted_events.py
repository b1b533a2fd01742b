"""Stored events read back without pydantic's Python hooks are the events ADK's own validation gives.

``pgagentstate.adk._trusted`` validates stored events with a validator built from ``Event``'s core schema
minus hooks that do nothing for JSON input; these tests hold it to ``Event.model_validate_json`` over events
using every field ADK persists, and check the way back to full validation for whatever it refuses.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from fastapi.openapi.models import APIKey, APIKeyIn
from google.adk.auth.auth_credential import AuthCredential, AuthCredentialTypes
from google.adk.auth.auth_tool import AuthConfig
from google.adk.events import Event
from google.adk.events.event import NodeInfo
from google.adk.events.event_actions import EventActions, EventCompaction
from google.adk.models.cache_metadata import CacheMetadata
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types
from pydantic import BaseModel, ValidationError
from pydantic_core import SchemaValidator, core_schema

from pgagentstate import AsyncStateStore
from pgagentstate.adk import PostgresSessionService, _trusted
from pgagentstate.adk._trusted import events_from_json


def _content(role: str, *parts: types.Part) -> types.Content:
    return types.Content(role=role, parts=list(parts))


def corpus() -> list[Event]:
    """Events carrying every kind of content part and action, and the response metadata ADK keeps."""
    auth = AuthConfig(
        auth_scheme=APIKey(**{"in": APIKeyIn.header, "name": "X-Api-Key"}),
        raw_auth_credential=AuthCredential(auth_type=AuthCredentialTypes.API_KEY, api_key="secret"),
        credential_key="k-1",
    )
    return [
        Event(invocation_id="i1", author="user", content=_content("user", types.Part(text="Oi, quero reembolso"))),
        Event(
            invocation_id="i1",
            author="agent",
            content=_content(
                "model",
                types.Part(text="thinking about it", thought=True),
                types.Part(
                    function_call=types.FunctionCall(
                        id="fc-1", name="lookup", args={"order": 12345, "deep": [1, 2.5, None]}
                    ),
                    thought_signature=b"\x00sig\xff\xfe",
                ),
            ),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=120,
                candidates_token_count=30,
                total_token_count=150,
                thoughts_token_count=7,
                prompt_tokens_details=[types.ModalityTokenCount(modality=types.MediaModality.TEXT, token_count=120)],
            ),
            finish_reason=types.FinishReason.STOP,
            model_version="gemini-2.5-flash",
            avg_logprobs=-0.25,
            long_running_tool_ids={"fc-1", "fc-0"},
        ),
        Event(
            invocation_id="i1",
            author="agent",
            content=_content(
                "user",
                types.Part(
                    function_response=types.FunctionResponse(
                        id="fc-1",
                        name="lookup",
                        response={"status": "shipped", "items": [1, 2, 3], "none": None},
                        will_continue=False,
                        scheduling=types.FunctionResponseScheduling.WHEN_IDLE,
                    )
                ),
            ),
            actions=EventActions(
                state_delta={"order": {"id": 12345, "tags": ["a", "b"]}, "user:lang": "pt", "app:n": 1.5},
                artifact_delta={"receipt.pdf": 2},
                skip_summarization=True,
                requested_auth_configs={"fc-1": auth},
                requested_tool_confirmations={"fc-2": ToolConfirmation(hint="refund 30 BRL?", payload={"amount": 30})},
            ),
        ),
        Event(
            invocation_id="i2",
            author="agent",
            branch="root.billing",
            content=_content(
                "model",
                types.Part(
                    inline_data=types.Blob(
                        data=b"\x89PNG\r\n\x1a\n\x00\x01", mime_type="image/png", display_name="chart"
                    )
                ),
                types.Part(file_data=types.FileData(file_uri="gs://bucket/f.pdf", mime_type="application/pdf")),
                types.Part(executable_code=types.ExecutableCode(code="print(1)", language=types.Language.PYTHON)),
                types.Part(
                    code_execution_result=types.CodeExecutionResult(outcome=types.Outcome.OUTCOME_OK, output="1")
                ),
                types.Part(
                    text="clip", video_metadata=types.VideoMetadata(start_offset="1s", end_offset="2s", fps=2.0)
                ),
            ),
            actions=EventActions(transfer_to_agent="billing", transfer_reason="refund", escalate=True),
            custom_metadata={"trace": {"id": "t-1", "ok": True}, "n": 1.5, "big": 2**70},
            grounding_metadata=types.GroundingMetadata(
                web_search_queries=["refund policy"],
                grounding_chunks=[types.GroundingChunk(web=types.GroundingChunkWeb(uri="https://x.test", title="X"))],
                grounding_supports=[
                    types.GroundingSupport(
                        segment=types.Segment(start_index=0, end_index=4, text="clip"),
                        grounding_chunk_indices=[0],
                        confidence_scores=[0.9],
                    )
                ],
            ),
            citation_metadata=types.CitationMetadata(citations=[types.Citation(uri="https://x.test", start_index=1)]),
        ),
        Event(
            invocation_id="i3",
            author="agent",
            error_code="RESOURCE_EXHAUSTED",
            error_message="quota",
            interrupted=True,
            turn_complete=True,
            partial=False,
            input_transcription=types.Transcription(text="oi", finished=True),
            output_transcription=types.Transcription(text="ola"),
            cache_metadata=CacheMetadata(
                cache_name="projects/p/cachedContents/c",
                expire_time=1.9e9,
                fingerprint="abc",
                invocations_used=2,
                contents_count=3,
                created_at=1.8e9,
            ),
            node_info=NodeInfo(path="wf/a@1", output_for=["wf/a@1"], message_as_output=True),
            output={"result": [1, "two", {"3": None}]},
            interaction_id="int-1",
        ),
        Event(
            invocation_id="i4",
            author="agent",
            actions=EventActions(
                compaction=EventCompaction(
                    start_timestamp=1.0,
                    end_timestamp=2.0,
                    compacted_content=_content("model", types.Part(text="summary")),
                ),
                end_of_agent=True,
                agent_state={"step": 3},
                rewind_before_invocation_id="i2",
                route=["a", 1, True],
            ),
            isolation_scope="fc-9",
        ),
        Event(author="agent", content=_content("model", types.Part(text="x" * 5000 + 'ção 😀 \\ " \n'))),
    ]


def stored(event: Event) -> str:
    """What the service stores (and Postgres gives back as text)."""
    return json.dumps(event.model_dump(exclude_none=True, mode="json"))


def assert_same(got: list[Event], want: list[Event]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert type(g) is type(w)
        assert g == w
        assert g.model_dump() == w.model_dump()
        assert g.model_dump(mode="json") == w.model_dump(mode="json")
        assert json.loads(g.model_dump_json(exclude_unset=True)) == json.loads(w.model_dump_json(exclude_unset=True))
        assert _classes(g) == _classes(w)


def _classes(value: Any) -> Any:
    """The class of every nested model, to compare what equality does not look at."""
    if isinstance(value, BaseModel):
        return (type(value), {k: _classes(v) for k, v in value.__dict__.items()}, sorted(value.model_fields_set))
    if isinstance(value, dict):
        return {k: _classes(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_classes(v) for v in value]
    if isinstance(value, set):
        return sorted(value)
    return type(value)


def test_stored_events_read_back_as_adk_validates_them() -> None:
    events = corpus()
    texts = [stored(e) for e in events]
    want = [Event.model_validate_json(t) for t in texts]
    assert_same(events_from_json(texts), want)
    assert events_from_json([]) == []
    lean, hooked = _trusted._list_validators()
    for validator in (lean, hooked):  # each of them on its own takes these events and gives ADK's
        assert_same(validator.validate_json("[" + ",".join(texts) + "]"), want)


def test_inputs_the_hooks_act_on_are_handled_as_adk_does() -> None:
    """Keys that only the removed hooks handle: a ``Part`` keyword given as null, ADK's convenience
    keyword arguments, camelCase aliases, a citation source under genai's old name."""
    ids = {"id": "e1", "timestamp": 1.5}  # (without them, validation draws new ones)
    texts = [
        json.dumps(
            {
                **ids,
                "author": "a",
                "content": {
                    "role": "model",
                    "parts": [{"text": None, "thought": True}, {"text": "x", "function_call": None}],
                },
            }
        ),
        json.dumps({**ids, "author": "a", "state": {"k": 1}, "node_path": "wf/x"}),
        json.dumps(
            {
                **ids,
                "invocationId": "i",
                "author": "a",
                "content": {"parts": [{"functionCall": {"name": "f"}}]},
                "actions": {"stateDelta": {"a": 1}},
                "longRunningToolIds": ["b", "a"],
            }
        ),
        json.dumps({**ids, "author": "a", "citation_metadata": {"citationSources": [{"uri": "https://x.test"}]}}),
    ]
    want = [Event.model_validate_json(t) for t in texts]
    assert_same(events_from_json(texts), want)
    assert want[1].actions.state_delta == {"k": 1} and want[1].node_info.path == "wf/x"
    # The lean validator refuses the first two (a null Part keyword, a convenience key): the hooks handle
    # them, alone or among ordinary events.
    lean, _ = _trusted._list_validators()
    plain = stored(corpus()[0])
    for text, expected in zip(texts, want, strict=True):
        assert_same(events_from_json([plain, text]), [Event.model_validate_json(plain), expected])
    for text in texts[:2]:
        with pytest.raises(ValidationError):
            lean.validate_json("[" + text + "]")


def test_events_refused_by_the_fast_path_get_full_validation() -> None:
    """A validator that refuses everything sends each event to ``Event.model_validate_json``."""
    events = corpus()
    texts = [stored(e) for e in events]
    refusing = SchemaValidator(core_schema.list_schema(core_schema.int_schema()))
    want = [Event.model_validate_json(t) for t in texts]
    assert_same(events_from_json(texts, validators=lambda: (refusing, refusing)), want)
    assert_same(events_from_json(texts, validators=lambda: ()), want)


def test_an_invalid_stored_event_fails_with_adks_own_error() -> None:
    good = stored(corpus()[0])
    bad = json.dumps({"author": "a", "content": {"parts": [{"no_such_field": 1}]}})
    with pytest.raises(ValidationError) as ours:
        events_from_json([good, bad, good])
    with pytest.raises(ValidationError) as adks:
        Event.model_validate_json(bad)
    assert ours.value.errors() == adks.value.errors()
    with pytest.raises(ValidationError):
        events_from_json([good, "not json"])


def test_an_unknown_schema_falls_back_to_full_validation(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def unknown(lean: bool) -> SchemaValidator:
        raise KeyError("schema")

    monkeypatch.setattr(_trusted, "_build", unknown)
    monkeypatch.setattr(_trusted, "_validators", None)
    texts = [stored(e) for e in corpus()]
    with caplog.at_level(logging.WARNING, logger="pgagentstate.adk"):
        assert_same(events_from_json(texts), [Event.model_validate_json(t) for t in texts])
    assert "fast event validation unavailable" in caplog.text
    assert _trusted._validators == ()


def test_building_the_fast_path_leaves_adks_classes_as_they_were() -> None:
    _trusted._build(lean=True)
    _trusted._build(lean=False)
    for cls in (Event, EventActions, types.Part, types.Content, types.Blob):
        assert cls.__pydantic_complete__
    assert types.Part.model_validate({"text": "oi"}) == types.Part(text="oi")
    text = stored(corpus()[2])
    assert_same([Event.model_validate_json(text)], events_from_json([text]))


async def test_cold_and_warm_sessions_give_the_events_appended(astore: AsyncStateStore) -> None:
    warm = PostgresSessionService(store=astore)
    cold = PostgresSessionService(store=astore, event_cache_size=0)
    tiny = PostgresSessionService(store=astore, event_cache_size=2)  # a session longer than the cache
    session = await warm.create_session(app_name="shop", user_id="u1")
    events = corpus()
    for event in events:
        await warm.append_event(session, event)
    for service in (cold, warm, warm, tiny, tiny):
        got = await service.get_session(app_name="shop", user_id="u1", session_id=session.id)
        assert got is not None
        assert_same(got.events, [Event.model_validate_json(stored(e)) for e in events])
