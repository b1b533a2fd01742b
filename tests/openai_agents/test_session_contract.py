"""The Session contract as the SDK's own sessions show it, run against SQLiteSession and PostgresSession.

Every test here must pass for SQLiteSession: that proves it tests the SDK's contract, not ours.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from agents import Runner, SessionSettings
from agents.memory import Session
from agents.testing import ScriptedModel, assistant_message, function_call
from oa_samples import ALL_ITEMS, ASSISTANT, USER_TEXT, SessionFactory, support_agents
from openai.types.responses.response_reasoning_item import ResponseReasoningItem, Summary


def _msg(i: int) -> dict[str, Any]:
    return {"role": "user", "content": f"message {i}"}


async def test_is_a_session(session_factory: SessionFactory) -> None:
    assert isinstance(session_factory("s1"), Session)


async def test_session_id_and_default_settings(session_factory: SessionFactory) -> None:
    s = session_factory("conv-1")
    assert s.session_id == "conv-1"
    assert isinstance(s.session_settings, SessionSettings)
    assert s.session_settings.limit is None


async def test_new_session_is_empty(session_factory: SessionFactory) -> None:
    s = session_factory("empty")
    assert await s.get_items() == []
    assert await s.get_items(limit=5) == []
    assert await s.pop_item() is None
    await s.clear_session()
    assert await s.get_items() == []


async def test_add_then_get_in_order(session_factory: SessionFactory) -> None:
    s = session_factory("order")
    await s.add_items([_msg(0), _msg(1)])
    await s.add_items([_msg(2)])
    await s.add_items([_msg(3), _msg(4), _msg(5)])
    assert await s.get_items() == [_msg(i) for i in range(6)]


async def test_many_single_adds_keep_order(session_factory: SessionFactory) -> None:
    # Rapid single-item appends land within one clock tick: order must come from the log, not time.
    s = session_factory("ticks")
    for i in range(30):
        await s.add_items([_msg(i)])
    assert await s.get_items() == [_msg(i) for i in range(30)]


async def test_add_empty_list_is_noop(session_factory: SessionFactory) -> None:
    s = session_factory("noop")
    await s.add_items([])
    assert await s.get_items() == []
    await s.add_items([_msg(0)])
    await s.add_items([])
    assert await s.get_items() == [_msg(0)]


@pytest.mark.parametrize(("limit", "expected"), [(1, [4]), (3, [2, 3, 4]), (5, [0, 1, 2, 3, 4]),
                                                 (50, [0, 1, 2, 3, 4]), (None, [0, 1, 2, 3, 4])])
async def test_get_items_limit_returns_latest_chronologically(
    session_factory: SessionFactory, limit: int | None, expected: list[int]
) -> None:
    s = session_factory("limit")
    await s.add_items([_msg(i) for i in range(5)])
    assert await s.get_items(limit=limit) == [_msg(i) for i in expected]
    assert await s.get_items(limit) == [_msg(i) for i in expected]


async def test_get_items_limit_zero_is_empty(session_factory: SessionFactory) -> None:
    s = session_factory("zero")
    await s.add_items([_msg(i) for i in range(3)])
    assert await s.get_items(limit=0) == []


async def test_session_settings_limit_is_the_default(session_factory: SessionFactory) -> None:
    s = session_factory("settings", session_settings=SessionSettings(limit=2))
    assert s.session_settings is not None and s.session_settings.limit == 2
    await s.add_items([_msg(i) for i in range(5)])
    assert await s.get_items() == [_msg(3), _msg(4)]
    # An explicit limit overrides the default in both directions.
    assert await s.get_items(limit=4) == [_msg(i) for i in range(1, 5)]
    assert await s.get_items(limit=1) == [_msg(4)]


async def test_session_settings_accepts_a_dict(session_factory: SessionFactory) -> None:
    s = session_factory("settings-dict", session_settings={"limit": 1})
    assert isinstance(s.session_settings, SessionSettings)
    await s.add_items([_msg(0), _msg(1)])
    assert await s.get_items() == [_msg(1)]


async def test_pop_item_removes_and_returns_the_last(session_factory: SessionFactory) -> None:
    s = session_factory("pop")
    await s.add_items([_msg(0), _msg(1)])
    await s.add_items([_msg(2)])
    assert await s.pop_item() == _msg(2)
    assert await s.get_items() == [_msg(0), _msg(1)]
    assert await s.pop_item() == _msg(1)
    assert await s.pop_item() == _msg(0)
    assert await s.pop_item() is None
    assert await s.get_items() == []


async def test_add_after_pop_continues_in_order(session_factory: SessionFactory) -> None:
    s = session_factory("pop-add")
    await s.add_items([_msg(0), _msg(1)])
    await s.pop_item()
    await s.add_items([_msg(2), _msg(3)])
    assert await s.get_items() == [_msg(0), _msg(2), _msg(3)]
    assert await s.get_items(limit=2) == [_msg(2), _msg(3)]


async def test_clear_session(session_factory: SessionFactory) -> None:
    s = session_factory("clear")
    await s.add_items([_msg(i) for i in range(4)])
    await s.clear_session()
    assert await s.get_items() == []
    assert await s.pop_item() is None
    await s.add_items([_msg(9)])
    assert await s.get_items() == [_msg(9)]
    await s.clear_session()
    await s.clear_session()
    assert await s.get_items() == []


async def test_sessions_are_isolated(session_factory: SessionFactory) -> None:
    a, b = session_factory("a"), session_factory("b")
    await a.add_items([_msg(1)])
    await b.add_items([_msg(2), _msg(3)])
    assert await a.get_items() == [_msg(1)]
    assert await b.get_items() == [_msg(2), _msg(3)]
    assert await a.pop_item() == _msg(1)
    assert await b.get_items() == [_msg(2), _msg(3)]
    await b.clear_session()
    await a.add_items([_msg(4)])
    assert await a.get_items() == [_msg(4)]
    assert await b.get_items() == []


async def test_history_is_shared_by_instances_with_the_same_id(session_factory: SessionFactory) -> None:
    first = session_factory("shared")
    await first.add_items([_msg(0)])
    second = session_factory("shared")
    assert await second.get_items() == [_msg(0)]
    await second.add_items([_msg(1)])
    assert await first.get_items() == [_msg(0), _msg(1)]
    assert await first.pop_item() == _msg(1)
    assert await second.get_items() == [_msg(0)]


async def test_every_item_type_round_trips_exactly(session_factory: SessionFactory) -> None:
    s = session_factory("roundtrip")
    items = copy.deepcopy(ALL_ITEMS)
    await s.add_items(items)  # type: ignore[arg-type]
    got = await s.get_items()
    assert got == ALL_ITEMS
    # Same JSON value, same Python types (an int must not come back as a float or the reverse).
    for want, have in zip(ALL_ITEMS, got, strict=True):
        assert json.dumps(want, sort_keys=True) == json.dumps(have, sort_keys=True)
    assert type(got[-1]["extra"]["float_int"]) is float  # type: ignore[index]
    assert type(got[-1]["extra"]["big"]) is int  # type: ignore[index]
    popped = await s.pop_item()
    assert popped == ALL_ITEMS[-1]


async def test_caller_mutation_does_not_change_the_history(session_factory: SessionFactory) -> None:
    s = session_factory("mutation")
    item = {"role": "user", "content": "original"}
    await s.add_items([item])  # type: ignore[list-item]
    item["content"] = "changed after add"
    got = await s.get_items()
    got[0]["content"] = "changed after get"  # type: ignore[index]
    assert await s.get_items() == [{"role": "user", "content": "original"}]


async def test_runner_stores_the_history_and_the_next_run_sees_it(session_factory: SessionFactory) -> None:
    session = session_factory("runner")
    model = ScriptedModel(
        [
            [
                ResponseReasoningItem(
                    id="rs_1", type="reasoning", summary=[Summary(text="check", type="summary_text")]
                ),
                function_call("lookup_order", {"order_id": "12345"}, call_id="call_1"),
            ],
            [assistant_message("Qual é seu email?", item_id="msg_1")],
        ]
    )
    agent = support_agents(model)
    result = await Runner.run(agent, "Oi, quero reembolso no pedido #12345", session=session)
    assert result.final_output == "Qual é seu email?"
    items = await session.get_items()
    assert [i.get("type") for i in items] == [None, "reasoning", "function_call", "function_call_output", "message"]
    assert items[0] == {"content": "Oi, quero reembolso no pedido #12345", "role": "user"}
    assert items[3]["output"] == "order 12345: delivered broken"  # type: ignore[typeddict-item]

    model.extend([[assistant_message("Obrigado!", item_id="msg_2")]])
    await Runner.run(agent, "meu@email.com", session=session)
    second_input = model.last_call.input if model.last_call else None
    assert isinstance(second_input, list)
    # The model saw the whole stored history, then the new input.
    assert second_input[0]["content"] == "Oi, quero reembolso no pedido #12345"
    assert second_input[-1] == {"content": "meu@email.com", "role": "user"}
    assert any(i.get("call_id") == "call_1" and i.get("type") == "function_call_output" for i in second_input)
    items = await session.get_items()
    assert len(items) == 7
    assert items[-1]["content"][0]["text"] == "Obrigado!"  # type: ignore[index, typeddict-item]
    model.assert_complete()


async def test_runner_stores_handoffs(session_factory: SessionFactory) -> None:
    session = session_factory("handoff")
    model = ScriptedModel(
        [[function_call("transfer_to_billing", {}, call_id="call_h")], [assistant_message("billing here")]]
    )
    result = await Runner.run(support_agents(model), "refund please", session=session)
    assert result.last_agent.name == "billing"
    items = await session.get_items()
    assert items[1]["type"] == "function_call" and items[1]["name"] == "transfer_to_billing"  # type: ignore[typeddict-item]
    assert items[2]["type"] == "function_call_output"  # type: ignore[typeddict-item]
    assert json.loads(items[2]["output"]) == {"assistant": "billing"}  # type: ignore[typeddict-item]
    assert items[3]["content"][0]["text"] == "billing here"  # type: ignore[index, typeddict-item]


async def test_runner_respects_session_settings_limit(session_factory: SessionFactory) -> None:
    session = session_factory("run-limit", session_settings=SessionSettings(limit=2))
    await session.add_items([_msg(0), USER_TEXT, ASSISTANT])  # type: ignore[list-item]
    model = ScriptedModel([[assistant_message("ok")]])
    await Runner.run(support_agents(model), "next", session=session)
    seen = model.last_call.input if model.last_call else None
    assert seen == [USER_TEXT, ASSISTANT, {"content": "next", "role": "user"}]


async def test_extreme_numbers_round_trip(session_factory: SessionFactory) -> None:
    # jsonb prints numerics without an exponent: a naive jsonb store returns 1e16 as an int and loses -0.0.
    s = session_factory("floats")
    numbers = [1e16, 1e300, 2.5e-300, 5e-324, 1.7976931348623157e308, -0.0, 12345678901234567890, -(2**63)]
    item = {"call_id": "c", "type": "function_call_output", "output": "x", "extra": numbers}
    await s.add_items([item])  # type: ignore[list-item]
    got = (await s.get_items())[0]["extra"]  # type: ignore[typeddict-item]
    assert [(type(v), repr(v)) for v in got] == [(type(v), repr(v)) for v in numbers]


async def test_streamed_runs_store_the_whole_turn(session_factory: SessionFactory) -> None:
    session = session_factory("streamed")
    model = ScriptedModel([
        [function_call("lookup_order", {"order_id": "12345"}, call_id="call_s")],
        [assistant_message("Chegou quebrado, vou reembolsar.")],
    ])
    result = Runner.run_streamed(support_agents(model), "pedido #12345?", session=session)
    async for _ in result.stream_events():
        pass
    assert result.final_output == "Chegou quebrado, vou reembolsar."
    items = await session.get_items()
    assert [i.get("type") for i in items] == [None, "function_call", "function_call_output", "message"]
    assert items[-1]["content"][0]["text"] == "Chegou quebrado, vou reembolsar."  # type: ignore[index, typeddict-item]
