"""Tools and tool calls in a chat: tool call arguments parsed as vLLM parses them, tool calls
and tool definitions handed to the template in vLLM's field order and dump, and a tools list
validated once and kept (renderer/chat/known_tools.py): not validated again, a hit handing out
a copy of its own, and a key that tells apart what pydantic may. That the kept list answers
exactly as the full validation is tests/unit/test_lane_equivalence.py's."""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from chat_cases import TIME_TOOL, WEATHER_TOOL
from chat_rules import HI

from renderer.chat import (
    ChatParams,
    ChatRenderer,
    parse_messages,
    request as request_mod,
    validate_chat_request,
)
from renderer.chat.known_tools import MAX_KEY_BYTES, KnownTools, tools_key
from renderer.chat.request import KNOWN_TOOLS, _validate_full
from renderer.chat.tool_choice import UNSET
from renderer.errors import ChatRequestValidationError


def _parse(msgs, fmt="string", **kw):
    """Validate (vLLM's request models) then parse, as the renderer does."""
    return parse_messages(validate_chat_request(msgs).messages, fmt, **kw)


def test_tool_call_arguments_parsed_like_vllm():
    def args(raw):
        msgs = [
            {
                "role": "assistant",
                "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": raw}}],
            }
        ]
        return _parse(msgs).conversation[0]["tool_calls"][0]["function"]["arguments"]

    assert args('{"a": [1, 2]}') == {"a": [1, 2]}
    assert args("not json") == {}
    assert args("[1, 2]") == {}
    assert args("") == {}
    # vLLM's request model takes arguments as a JSON string only
    for raw in ({"b": 1}, None, 5):
        with pytest.raises(ChatRequestValidationError, match="ChatCompletionMessageFunctionToolCallParam.function"):
            args(raw)
    msgs = [{"role": "assistant", "content": "x", "tool_calls": []}]
    assert _parse(msgs).conversation == [{"role": "assistant", "content": "x"}]


ROOT = Path(__file__).resolve().parents[2]


VLLM_FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "vllm" / "chat.json").read_text())


ECHO = "{% for m in messages %}{{ m | tojson }}\n{% endfor %}"


def render_chat(renderer: ChatRenderer, messages, params: dict | None = None, **kw):
    return renderer.render_messages(copy.deepcopy(messages), ChatParams.from_request({**(params or {}), **kw}))


def test_tool_calls_come_out_in_vllms_field_order(trusted):
    call = {
        "type": "function",
        "extra": 1,
        "function": {"x": 2, "arguments": '{"b": 1, "a": 2}', "name": "f"},
        "id": "c1",
    }
    out = render_chat(
        trusted,
        [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call]}],
        chat_template="{{ messages[1].tool_calls | tojson }}",
    )
    # OpenAI's type declares id, function, type (function: arguments, name); other keys follow.
    assert out.prompt == (
        '[{"id": "c1", "function": {"arguments": {"b": 1, "a": 2}, "name": "f", "x": 2}, '
        '"type": "function", "extra": 1}]'
    )


def test_tools_dumped_as_vllm_dumps_them():
    request = validate_chat_request(
        HI,
        [
            {"extra": 1, "function": {"x": 1, "parameters": {"z": 1, "a": 2}, "name": "f", "strict": True}},
            {"type": "function", "defer_loading": True, "function": {"name": "g", "description": "d"}},
        ],
    )
    assert request.tools == [
        {
            "type": "function",
            "function": {"name": "f", "description": None, "parameters": {"z": 1, "a": 2}, "strict": True},
        },
        {
            "type": "function",
            "function": {"name": "g", "description": "d", "parameters": None, "defer_loading": True},
            "defer_loading": True,
        },
    ]


USER = [{"role": "user", "content": "What's the weather?"}]


@pytest.fixture(autouse=True)
def _empty_cache():
    KNOWN_TOOLS.clear()
    yield
    KNOWN_TOOLS.clear()


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
