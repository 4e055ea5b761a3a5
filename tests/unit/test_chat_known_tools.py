"""Tool lists validated once and kept (renderer/chat/known_tools.py) against the full validation.

``validate_chat_request`` serves a request whose ``tools`` list it validated before from
``KNOWN_TOOLS``; these tests hold every result to ``_validate_full`` (vLLM's request model)
exactly, on a miss and on the hit after it, over the whole chat corpus and generated requests near
the boundary of what the cache takes; they check that it is taken, that the key tells apart what
pydantic tells apart, and that a hit hands out a copy nobody else holds.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

import pytest
from chat_cases import TIME_TOOL, WEATHER_TOOL
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from validation_oracle import CORPUS, outcome, same

from renderer.chat import request as request_mod
from renderer.chat.known_tools import MAX_KEY_BYTES, KnownTools, tools_key
from renderer.chat.request import KNOWN_TOOLS, _validate_full, validate_chat_request
from renderer.chat.tool_choice import UNSET

USER = [{"role": "user", "content": "What's the weather?"}]


@pytest.fixture(autouse=True)
def _empty_cache():
    KNOWN_TOOLS.clear()
    yield
    KNOWN_TOOLS.clear()


def _assert_same_twice(args: tuple[Any, Any, Any, Any]) -> None:
    """A miss and then a hit (where the list is kept) each give exactly what the full path does.
    The arguments are deep-copied per call, so no call can see what another changed."""
    full = outcome(_validate_full, copy.deepcopy(args))
    for attempt in ("first", "second"):
        got = outcome(validate_chat_request, copy.deepcopy(args))
        assert same(got, full), f"{attempt} call {got!r} != full path {full!r}"


def test_same_as_full_path_on_the_whole_corpus_and_taken():
    for _, args in CORPUS:
        _assert_same_twice(args)
    # Every benchmark tool chat sends one of a few lists: after the first, each is a hit (a cache
    # that never applied would prove nothing above).
    info = KNOWN_TOOLS.info()
    assert info.hits > info.misses > 0, info


def test_a_known_list_is_not_validated_again(monkeypatch):
    seen: list[Any] = []
    known = KnownTools(lambda tools: seen.append(tools) or request_mod._validate_tools_alone(tools))
    monkeypatch.setattr(request_mod, "KNOWN_TOOLS", known)
    tools = [WEATHER_TOOL, TIME_TOOL]
    first = validate_chat_request(USER, tools, None, UNSET)
    again = validate_chat_request(USER + [{"role": "assistant", "content": "Sunny."}], copy.deepcopy(tools))
    assert len(seen) == 1 and seen[0] == tools
    assert first.tools == again.tools == _validate_full(USER, tools).tools
    assert first.tool_choice == again.tool_choice == "auto"


def test_a_hit_hands_out_a_copy_of_its_own():
    first = validate_chat_request(USER, [WEATHER_TOOL])
    first.tools[0]["function"]["name"] = "changed"
    first.tools[0]["function"]["parameters"]["properties"].clear()
    again = validate_chat_request(USER, [WEATHER_TOOL])
    assert again.tools == _validate_full(USER, [WEATHER_TOOL]).tools
    assert again.tools[0]["function"]["name"] == "get_weather"


def test_refusals_are_worded_by_the_full_path_on_every_call():
    bad_tools = [{"type": "function", "function": {"description": "no name"}}]
    bad_messages = [{"role": "user", "content": 3}]
    for args in (
        (USER, bad_tools, None, UNSET),
        (bad_messages, [WEATHER_TOOL], None, UNSET),
        (bad_messages, bad_tools, None, UNSET),
        (USER, [WEATHER_TOOL], None, {"type": "function", "function": {"name": "nope"}}),
        (USER, [WEATHER_TOOL], [{"title": 1}], UNSET),
    ):
        full = outcome(_validate_full, args)
        assert full[0] == "raised", full
        for _ in range(2):
            assert same(outcome(validate_chat_request, args), full)


class _Str(str):
    pass


@pytest.mark.parametrize(
    "a, b",
    [
        ([{"x": 1}], [{"x": 1.0}]),
        ([{"x": 1}], [{"x": True}]),
        ([{"x": [1]}], [{"x": (1,)}]),
        ([{"x": None}], [{"x": "None"}]),
        ([{"a": 1, "b": 2}], [{"b": 2, "a": 1}]),
        ([{"x": "é"}], [{"x": "e\u0301"}]),
        ([{1: "a"}], [{"1": "a"}]),
    ],
    ids=range(7),
)
def test_the_key_tells_apart_what_pydantic_may(a, b):
    assert tools_key(a) is not None and tools_key(b) is not None
    assert tools_key(a) != tools_key(b)


@pytest.mark.parametrize(
    "tools",
    [
        None,
        [],
        (WEATHER_TOOL,),
        {"0": WEATHER_TOOL},
        [_Str("x")],
        [{"function": {"name": _Str("f")}}],
        [OrderedDict(type="function", function={"name": "f"})],
        [{"function": {"name": "f", "description": "x" * MAX_KEY_BYTES}}],
    ],
    ids=range(8),
)
def test_no_key_for_what_the_full_path_must_see(tools):
    assert tools_key(tools) is None


def test_no_key_for_a_list_too_deep_to_serialise():
    deep: Any = "leaf"
    for _ in range(3000):
        deep = [deep]
    assert tools_key([{"type": "function", "function": {"name": "f", "parameters": {"x": deep}}}]) is None


# --- property: generated requests near the boundary --------------------------------------------

leaves = st.sampled_from([None, True, False, 0, 1, -1, 1.0, 0.5, float("nan"), float("inf"), "", "x", "é", "\ud800"])
values = st.recursive(
    leaves | st.sampled_from([_Str("s"), (1, 2)]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "type"]), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def tool(draw: Any) -> Any:
    """A tool definition, mostly valid, with one field near what validation or the key decide on."""
    function: dict[str, Any] = {"name": draw(st.sampled_from(["get_weather", "get_time", "f", ""]))}
    for key in draw(st.lists(st.sampled_from(["description", "parameters", "strict", "defer_loading", "extra"]))):
        function[key] = draw(values)
    definition: dict[str, Any] = {
        "type": draw(st.sampled_from(["function"] * 6 + ["tool", None])),
        "function": function,
    }
    change = draw(st.integers(0, 7))
    if change == 0:
        definition["defer_loading"] = draw(values)
    elif change == 1:
        definition[draw(st.sampled_from(["extra", "Function"]))] = draw(values)
    elif change == 2:
        del definition["function"]["name"]
    elif change == 3:
        definition["function"] = draw(values)
    elif change == 4:
        return draw(values)
    return definition


requests = st.tuples(
    st.sampled_from(
        [
            USER,
            USER
            + [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c", "content": "12:00"},
            ],
            [{"role": "user", "content": 3}],
            [{"role": "user", "content": [{"type": "text", "text": "parts"}]}],
        ]
    ),
    st.lists(tool(), max_size=3) | st.sampled_from([[WEATHER_TOOL], [TIME_TOOL, WEATHER_TOOL], (TIME_TOOL,)]),
    st.sampled_from([None] * 6 + [[{"title": "t", "text": "x"}], [{"title": 1}]]),
    st.sampled_from(
        [UNSET] * 4
        + [
            None,
            "none",
            "auto",
            "required",
            "other",
            _Str("auto"),
            {"type": "function", "function": {"name": "get_time"}},
        ]
    ),
)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests)
def test_known_tools_match_the_full_path_near_the_boundary(args):
    before = KNOWN_TOOLS.info().hits
    _assert_same_twice(args)
    event("hit" if KNOWN_TOOLS.info().hits > before else "no hit")
