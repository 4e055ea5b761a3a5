"""``parse_json`` parses with orjson where it can and is still exactly ``json.loads``
(``renderer/json_fields.py``): the same value (types, key order, a float's sign) for every text
``json`` accepts, the same error words for every text it refuses, and each case orjson handles
otherwise (integers past 64 bits, NaN, numbers past a double, lone surrogates, 1,000 to 1,024 levels)
taken by ``json``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from renderer.errors import InvalidJSONError, RequestNestingError
from renderer.json_fields import MAX_NESTING_DEPTH, _compiled_parse, _REFUSED, nesting_depth, parse_json

ROOT = Path(__file__).resolve().parents[2]


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values and as Python ones: type for type, key order, a zero's sign, NaN."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is float:
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


def outcome(text: str) -> tuple[str, Any]:
    try:
        return "value", parse_json(text, "messages")
    except InvalidJSONError as e:
        return "invalid", str(e)
    except RequestNestingError as e:
        return "deep", str(e)


def expected(text: str) -> tuple[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return "invalid", str(InvalidJSONError("messages", e.msg, e.lineno, e.colno))
    except RecursionError:
        return "deep", None
    return "value", value


def check(text: str) -> None:
    got, want = outcome(text), expected(text)
    # Over the limit is refused, as before, where json takes the value.
    over = want[0] == "value" and nesting_depth(want[1], MAX_NESTING_DEPTH) is not None
    assert got[0] == ("deep" if over else want[0]), (text[:80], got, want)
    if got[0] == want[0] == "value":
        assert same(got[1], want[1]), text[:200]
    elif got[0] == want[0] == "invalid":
        assert got[1] == want[1]


EDGES = [
    "18446744073709551615",
    "18446744073709551616",  # orjson: a float
    "-9223372036854775808",
    "-9223372036854775809",  # orjson: a float
    '{"n": [1, 123456789012345678901234567890]}',
    '[{"role": "user", "content": "x", "seed": 99999999999999999999999}]',
    "NaN",
    "[Infinity, -Infinity]",
    "1e400",
    "[1.7976931348623159e308]",
    "-0",
    "-0.0",
    "[0.1, 1e-400, 4.9e-324, 2.2250738585072011e-308]",
    '"\\ud800"',
    '["a\\udc00b", "\\ud83d\\ude00"]',
    '{"a": 1, "a": 2, "b": 3}',
    '{"b": 1, "a": 2, "b": 3}',
    "\ufeff[]",
    "[1,]",
    '{"a": 1,}',
    "[01]",
    "[.5]",
    '"\\x41"',
    '"a\x00"',
    "[1] x",
    "",
    "[" * 1024 + "]" * 1024,  # orjson's own limit
    "[" * 1025 + "]" * 1025,
    "[" * MAX_NESTING_DEPTH + "]" * MAX_NESTING_DEPTH,
    "[" * (MAX_NESTING_DEPTH + 1) + "]" * (MAX_NESTING_DEPTH + 1),
    '{"a": ' * 1010 + "1.5" + "}" * 1010,
]


@pytest.mark.parametrize("text", EDGES, ids=range(len(EDGES)))
def test_edges_parse_as_json_parses_them(text: str) -> None:
    check(text)


def test_integers_past_64_bits_stay_integers() -> None:
    assert parse_json("[18446744073709551616]", "messages") == [18446744073709551616]
    assert type(parse_json('{"x": -9223372036854775809}', "messages")["x"]) is int


def test_orjson_serves_the_plain_chats() -> None:
    """The fast parse is taken where it can be (else this change would be a no-op): a chat of
    strings, nested tool calls and all, is orjson's."""
    text = json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [{"id": "1"}]}])
    assert _compiled_parse(text) is not _REFUSED
    assert _compiled_parse('[{"temperature": 0.5}]') is _REFUSED  # a float: json parses it again


def test_every_committed_chat_parses_the_same() -> None:
    corpus = json.loads((ROOT / "benchmarks" / "inputs" / "chat_mix.json").read_text())["data"]
    texts = [r["messages"]["content"][0] for r in corpus]
    assert len(texts) >= 50
    for text in texts:
        check(text)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=1500, deadline=None)
@given(json_values)
def test_any_json_value_parses_the_same(value: Any) -> None:
    check(json.dumps(value, ensure_ascii=False))
    check(json.dumps(value))


@settings(max_examples=3000, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            list('[]{}",:0123456789-+.eE tfrunlasNI\\/\t\n\r\x0c\x00\x1f\x7f\ufeff\u2028é😀')
            + [
                "\\u00e9",
                "\\ud800",
                "\\udc00",
                "true",
                "null",
                '"a"',
                "1e999",
                "Infinity",
                "NaN",
                "99999999999999999999",
            ]
        ),
        max_size=14,
    ).map("".join)
)
def test_any_text_parses_or_fails_the_same(text: str) -> None:
    check(text)
