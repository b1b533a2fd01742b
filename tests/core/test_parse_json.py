"""``codec.parse_json`` (orjson when installed) returns exactly what ``json.loads`` returns, including where
orjson alone would not: integers beyond 64 bits, NaN, escaped lone surrogates, bytes input."""

from __future__ import annotations

import json
import math

import pytest

from pgagentstate.codec import parse_json

SAME = [
    '{"a": 1, "b": [1.5, "x", null, true]}',
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "-9223372036854775809",  # orjson: a float
    "18446744073709551616",  # orjson: a float
    '[1, {"n": 123456789012345678901234567890}]',
    "0.12345678901234567890123",
    '"\\ud83d"',  # a lone surrogate, escaped: orjson refuses it
    '"caf\\u00e9 \\u00e7"',
    "1e308",
]


@pytest.mark.parametrize("text", SAME)
def test_parse_json_returns_what_json_loads_returns(text: str) -> None:
    got, want = parse_json(text), json.loads(text)
    assert got == want and repr(got) == repr(want)
    assert parse_json(text.encode()) == want


def test_nan_and_infinity_parse_as_json_loads_does() -> None:
    assert math.isnan(parse_json("NaN")) and parse_json("[Infinity]") == [math.inf]


def test_invalid_json_raises_as_json_loads_does() -> None:
    with pytest.raises(json.JSONDecodeError):
        parse_json('{"a": ')
