"""The chat validation fast path (renderer/chat/fast_request.py) against the full, vLLM-shaped one.

``validate_chat_request`` hands plain chats and tool turns to the fast path; these tests hold it to
``_validate_full`` (vLLM's request model) exactly: same types, values and key order, or the same
error, on every chat the project has recorded or written, and on generated chats near the
boundary of what the fast path takes. They also check it is taken, so it cannot silently stop
applying.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest
from chat_cases import TIME_TOOL, WEATHER_TOOL
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from validation_oracle import CORPUS, outcome, same

from renderer.chat import request as request_mod
from renderer.chat.fast_request import fast_validate
from renderer.chat.request import _validate_full, validate_chat_request
from renderer.chat.tool_choice import UNSET


def _assert_same_as_full(args: tuple[Any, Any, Any, Any]) -> bool:
    """Whether the fast path took the request; either way, what validate_chat_request returns is
    exactly what the full path does."""
    took = fast_validate(*args) is not None
    dispatched, full = outcome(validate_chat_request, args), outcome(_validate_full, args)
    assert same(dispatched, full), f"fast path {dispatched!r} != full path {full!r}"
    return took


def test_same_as_full_path_on_the_whole_corpus():
    taken = [name for name, args in CORPUS if _assert_same_as_full(args)]
    # Most recorded plain chats take it (a test that would pass with the fast path never applying
    # would prove nothing): the short and multi-turn benchmark chats all do.
    assert {f"short:{i}" for i in range(64)} <= set(taken)
    assert {f"chat_multiturn:{i}" for i in range(64)} <= set(taken)
    assert sum(name.startswith("vllm:") for name in taken) >= 50, len(taken)
    # And nothing with tools, content parts or another role does.
    assert not any(name.startswith("chat_tools:") for name in taken)


def test_tool_chats_messages_take_the_fast_path_on_the_whole_corpus():
    """A tool chat's messages alone (its tools list validated before: known_tools.py) take the
    fast path, tool calls and tool results included, with exactly the full path's result."""
    taken = []
    for name, (messages, _, documents, _) in CORPUS:
        args = (messages, None, documents, UNSET)
        if _assert_same_as_full(args) and isinstance(messages, list):
            taken += [name] if _has_tool_turn(messages) else []
    # Every benchmark tool chat whose turns have string (or null) contents; content parts are
    # validated lazily by pydantic, so those take the full path.
    for name, (messages, _, _, _) in CORPUS:
        if name.startswith(("chat_tools:", "chat_mix:")) and name not in taken and _has_tool_turn(messages):
            assert any(isinstance(m.get("content"), list) for m in messages), name
    assert sum(name.startswith("chat_tools:") for name in taken) >= 40, len(taken)


def _has_tool_turn(messages: Any) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "tool" for m in messages)


PLAIN = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"}],
    [{"content": "Hi", "role": "user"}, {"role": "assistant", "content": ""}, {"role": "user", "content": "é👋"}],
    [{"role": "developer", "content": "d", "name": "ops"}, {"name": "bob", "content": "x", "role": "user"}],
    [{"role": "assistant", "content": "prefill", "name": "a"}],
    [],
]


@pytest.mark.parametrize("messages", PLAIN)
@pytest.mark.parametrize("tool_choice", [UNSET, "none", None])
def test_plain_chats_take_the_fast_path(messages, tool_choice, monkeypatch):
    expected = _validate_full(messages, None, None, tool_choice)

    def refuse(*_: Any) -> None:
        raise AssertionError("the full path ran for a plain chat")

    monkeypatch.setattr(request_mod, "_validate_full", refuse)
    got = validate_chat_request(messages, None, None, tool_choice)
    assert same(got.messages, expected.messages) and got.tool_choice == expected.tool_choice
    assert (got.tools, got.documents) == (None, None)
    # Fresh dicts, as the full path's copy gives: a caller's messages are never handed on.
    assert all(out is not sent for out, sent in zip(got.messages, messages))


class _Str(str):
    pass


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}

TOOL_TURNS = [
    [{"role": "assistant", "content": None, "tool_calls": [CALL]}],
    [
        {"role": "assistant", "tool_calls": [CALL, {**CALL, "id": "c2"}]},
        {"role": "tool", "content": "r", "tool_call_id": "c1"},
    ],
    [{"tool_calls": [CALL], "name": "n", "content": "x", "role": "assistant"}],
    [{"role": "assistant", "content": "x", "tool_calls": []}],
    [{"role": "assistant", "content": None}],
    [{"tool_call_id": "c1", "content": "", "role": "tool"}],
    [{"role": "tool", "content": "r", "tool_call_id": "c1", "name": "f"}],
    [
        {
            "role": "assistant",
            "content": "x",
            "tool_calls": [{**CALL, "function": {"arguments": "[[[[ not json", "name": ""}}],
        }
    ],
]


@pytest.mark.parametrize("messages", TOOL_TURNS, ids=range(len(TOOL_TURNS)))
def test_tool_turns_take_the_fast_path(messages, monkeypatch):
    expected = _validate_full(messages, None, None, UNSET)
    monkeypatch.setattr(request_mod, "_validate_full", lambda *_: pytest.fail("the full path ran"))
    got = validate_chat_request(messages, None, None, UNSET)
    assert same(got.messages, expected.messages) and got.tool_choice == expected.tool_choice
    # Fresh containers all the way down: nothing of the caller's is handed on to be changed.
    for out, sent in zip(got.messages, messages):
        assert out is not sent
        for call, sent_call in zip(out.get("tool_calls") or [], sent.get("tool_calls") or []):
            assert call is not sent_call and call["function"] is not sent_call["function"]


FALL_THROUGH = [
    ([{"role": "tool", "content": "x"}], None, None, UNSET),
    ([{"role": "tool", "content": "x", "tool_call_id": None}], None, None, UNSET),
    ([{"role": "tool", "content": ["x"], "tool_call_id": "a"}], None, None, UNSET),
    ([{"role": "tool", "content": "x", "tool_call_id": "a", "name": None}], None, None, UNSET),
    ([{"role": "robot", "content": "x"}], None, None, UNSET),
    ([{"role": "user", "content": "x", "extra": 1}], None, None, UNSET),
    ([{"role": "user", "content": "x", "name": None}], None, None, UNSET),
    ([{"role": "assistant"}], None, None, UNSET),
    ([{"role": "assistant", "content": "x", "tool_calls": None}], None, None, UNSET),
    ([{"role": "assistant", "content": "x", "tool_calls": ({**CALL},)}], None, None, UNSET),
    ([{"role": "assistant", "tool_calls": [{**CALL, "type": "custom"}]}], None, None, UNSET),
    ([{"role": "assistant", "tool_calls": [{**CALL, "extra": 1}]}], None, None, UNSET),
    ([{"role": "assistant", "tool_calls": [{"id": "c", "function": CALL["function"]}]}], None, None, UNSET),
    (
        [{"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {"x": 1}}}]}],
        None,
        None,
        UNSET,
    ),
    ([{"role": "assistant", "tool_calls": [{**CALL, "function": {**CALL["function"], "x": 1}}]}], None, None, UNSET),
    ([{"role": "assistant", "tool_calls": [{**CALL, "id": None}]}], None, None, UNSET),
    (
        [{"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "[" * 1000}}]}],
        None,
        None,
        UNSET,
    ),
    ([{"role": "assistant", "content": "x", "reasoning_content": "r"}], None, None, UNSET),
    ([{"role": "user", "content": [{"type": "text", "text": "x"}]}], None, None, UNSET),
    ([{"role": "user", "content": _Str("x")}], None, None, UNSET),  # pydantic makes it lazy parts
    ([{"role": _Str("user"), "content": "x"}], None, None, UNSET),
    ([OrderedDict(role="user", content="x")], None, None, UNSET),
    (({"role": "user", "content": "x"},), None, None, UNSET),
    ([{"role": "user", "content": "x"}], [WEATHER_TOOL], None, UNSET),
    ([{"role": "user", "content": "x"}], [], None, UNSET),
    ([{"role": "user", "content": "x"}], None, [{"title": "t", "text": "x"}], UNSET),
    ([{"role": "user", "content": "x"}], None, None, "auto"),
    ([{"role": "user", "content": "x"}], None, None, _Str("none")),
]


@pytest.mark.parametrize("args", FALL_THROUGH, ids=range(len(FALL_THROUGH)))
def test_anything_else_falls_through(args):
    assert fast_validate(*args) is None
    _assert_same_as_full(args)


# --- property: generated requests near the boundary --------------------------------------------

texts = st.text(max_size=12) | st.sampled_from(["", "\ud800", "a\udfffb", "\x00", "👨‍👩‍👧", "none"])
roles = st.sampled_from(
    ["tool", "function", "robot", "", "User", "user ", None, 3, _Str("user"), _Str("assistant"), b"user"]
)
contents = st.sampled_from(
    [None, 0, 1.5, True, _Str("x"), _Str(""), {"type": "text", "text": "x"}, b"x", [], ["x"]]
) | st.lists(texts | st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=2)
extra_keys = st.sampled_from(
    ["tool_calls", "tool_call_id", "reasoning", "reasoning_content", "refusal", "audio", "extra", "Role"]
)
extra_values = texts | st.sampled_from([None, 1, [], {}, _Str("n")])


@st.composite
def plain_message(draw: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "role": draw(st.sampled_from(["user", "assistant", "system", "developer"])),
        "content": draw(texts),
    }
    if draw(st.booleans()):
        msg["name"] = draw(texts)
    if draw(st.booleans()):  # the order keys are sent in must not matter
        msg = dict(draw(st.permutations(list(msg.items()))))
    return msg


def _changed(draw: Any, msg: dict[str, Any]) -> Any:
    """``msg`` with one change near the fast path's boundary."""
    msg = dict(msg)
    change = draw(st.integers(0, 6))
    if change == 0:
        msg["role"] = draw(roles)
    elif change == 1:
        msg["content"] = draw(contents)
    elif change == 2:
        msg["name"] = draw(extra_values)
    elif change == 3:
        msg[draw(extra_keys)] = draw(extra_values)
    elif change == 4:
        msg.pop(draw(st.sampled_from(["role", "content"])), None)
    elif change == 5:  # a str subclass where a str goes
        key = draw(st.sampled_from(sorted(msg)))
        msg[key] = _Str(msg[key])
    else:
        return draw(st.sampled_from([None, "hi", [], 1, OrderedDict(msg)]))
    return msg


@st.composite
def messages(draw: Any) -> Any:
    """A plain chat, mostly with one message changed."""
    msgs: list[Any] = draw(st.lists(plain_message(), max_size=3))
    if msgs and draw(st.integers(0, 3)):
        i = draw(st.integers(0, len(msgs) - 1))
        msgs[i] = _changed(draw, msgs[i])
    return msgs


call_texts = texts | st.sampled_from(["{}", '{"x": [1, {"y": null}]}', "[" * 996, "[" * 997 + "]" * 997])


@st.composite
def tool_call(draw: Any) -> Any:
    call: dict[str, Any] = {
        "id": draw(texts),
        "type": "function",
        "function": {"name": draw(texts), "arguments": draw(call_texts)},
    }
    if draw(st.integers(0, 3)):
        return call
    change = draw(st.integers(0, 5))  # one change near the boundary
    if change == 0:
        call[draw(st.sampled_from(["id", "type", "function", "extra"]))] = draw(extra_values)
    elif change == 1:
        call["function"][draw(st.sampled_from(["name", "arguments", "extra"]))] = draw(extra_values)
    elif change == 2:
        del call[draw(st.sampled_from(["id", "type", "function"]))]
    elif change == 3:
        del call["function"][draw(st.sampled_from(["name", "arguments"]))]
    elif change == 4:
        call["type"] = draw(st.sampled_from([_Str("function"), "Function", "custom"]))
    else:
        call = dict(draw(st.permutations(list(call.items()))))
    return call


@st.composite
def tool_turn(draw: Any) -> Any:
    """An assistant turn with tool calls or a tool result, mostly as clients send them."""
    if draw(st.booleans()):
        msg: dict[str, Any] = {"role": "assistant", "tool_calls": draw(st.lists(tool_call(), max_size=2))}
        if draw(st.booleans()):
            msg["content"] = draw(st.none() | texts)
    else:
        msg = {"role": "tool", "content": draw(texts), "tool_call_id": draw(texts)}
    if draw(st.booleans()):
        msg["name"] = draw(texts)
    if draw(st.booleans()):
        msg = dict(draw(st.permutations(list(msg.items()))))
    return _changed(draw, msg) if not draw(st.integers(0, 3)) else msg


tool_chats = st.lists(plain_message() | tool_turn(), max_size=4)

requests = st.tuples(
    messages() | tool_chats | st.sampled_from([None, "hi", {"role": "user", "content": "x"}]),
    st.sampled_from([None] * 8 + [[], [TIME_TOOL]]),
    st.sampled_from([None] * 8 + [[], [{"title": "t"}], [{"title": 1}]]),
    st.sampled_from([UNSET] * 4 + [None, "none", "auto", "required", _Str("none"), {"function": {"name": "get_time"}}]),
)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests)
def test_fast_path_matches_full_path_near_the_boundary(args):
    took = _assert_same_as_full(args)
    tool_turns = isinstance(args[0], list) and any(
        isinstance(m, dict) and ("tool_calls" in m or m.get("role") == "tool") for m in args[0]
    )
    event(("fast path" if took else "full path") + (", tool turns" if tool_turns else ""))


# --- the chat_params bag: an empty one is the defaults, without a copy (issue 26, lever 2) --------


def test_an_empty_chat_params_bag_is_the_defaults():
    from renderer.chat import ChatParams

    assert ChatParams.from_request({}) is ChatParams.from_request(None)  # the shortcut, taken
    assert ChatParams.from_request({}) == ChatParams()
    assert ChatParams().with_request({}) == ChatParams()


@pytest.mark.parametrize("bag", [[], "", 0, False, ()], ids=repr)
def test_an_empty_bag_that_is_not_an_object_is_still_refused(bag):
    from renderer.chat import ChatParams
    from renderer.errors import FieldTypeError

    with pytest.raises(FieldTypeError) as e:
        ChatParams.from_request(bag)
    assert str(e.value) == (
        f"request.chat_params must be a JSON object, got {type(bag).__name__} {bag!r}. (parameter=chat_params)"
    )


def test_media_kwargs_of_a_request_without_any_are_empty():
    from renderer.chat import ChatParams
    from renderer.chat_stage import MediaKwargs

    assert MediaKwargs.of(ChatParams()) == MediaKwargs()
    assert MediaKwargs.of(ChatParams()) is MediaKwargs.of(ChatParams())  # the shared empty one
    sent = ChatParams.from_request({"mm_processor_kwargs": {"max_pixels": 3136}})
    assert MediaKwargs.of(sent) == MediaKwargs({"max_pixels": 3136}, None)


# --- parsing: a plain message straight to what the template sees (issue 26) -------------------


def _parsed(parse: Any, msg: Any, fmt: str) -> Any:
    """``parse``'s result for one message, or the error it raised (type and words)."""
    from renderer.chat.messages import MultiModalItem

    items: list[MultiModalItem] = []
    try:
        return ("ok", parse(0, msg, fmt, items, "<image>"), items)
    except Exception as e:  # noqa: BLE001 (the error is the outcome compared)
        return ("raised", type(e), str(e))


def _assert_parsesame(msg: Any, fresh: Any = None) -> bool:
    """Whether the plain path took ``msg``; either way, the message parse gives exactly what the
    general parse does, in both content formats. ``fresh()`` makes the message anew for each parse
    (validated content parts are read once)."""
    from renderer.chat.messages import _parse_message, parse_message, plain_message

    fresh = fresh or (lambda: msg)
    took = [plain_message(fresh(), fmt) is not None for fmt in ("string", "openai")]
    assert took[0] == took[1]
    for fmt in ("string", "openai"):
        got, want = _parsed(_parse_message, fresh(), fmt), _parsed(parse_message, fresh(), fmt)
        assert same(got, want), f"{fmt}: plain path {got!r} != general parse {want!r}"
    return took[0]


def _validated(args: tuple[Any, Any, Any, Any]) -> list[Any]:
    """A request's messages as the template's parse receives them: validated (vLLM's request
    model), or as sent where validation refuses the request."""
    try:
        return validate_chat_request(*args).messages
    except Exception:  # noqa: BLE001 (refused: the message as sent still must parse the same)
        return args[0] if isinstance(args[0], list) else [args[0]]


def test_message_parse_same_as_general_parse_on_the_whole_corpus():
    taken, seen = set(), []
    for name, args in CORPUS:
        for i, msg in enumerate(_validated(args)):
            seen.append((f"{name}[{i}]", msg))
            if _assert_parsesame(msg, lambda: _validated(args)[i]):
                taken.add(f"{name}[{i}]")
    # Every message of the plain benchmark chats takes it (a path that never applied would prove
    # nothing) ...
    multiturn = {name for name, _ in seen if name.startswith("chat_multiturn:")}
    assert multiturn and multiturn <= taken
    # ... and no message with tool calls, a tool result or content parts does.
    for name, msg in seen:
        if isinstance(msg, dict) and ("tool_calls" in msg or not isinstance(msg.get("content"), str)):
            assert name not in taken, name


@pytest.mark.parametrize(
    "msg",
    [
        {"role": "system", "content": "x-anthropic-billing-header: cc\nBe terse."},
        {"role": "system", "content": "x-anthropic-billing-header: cc"},
        {"role": "tool", "content": "x", "tool_call_id": "a"},
        {"role": "assistant", "content": "x", "tool_calls": []},
        {"role": "user", "content": "x", "name": 3},
        {"role": "user", "content": "x", "task": "t"},
        {"role": "user", "content": _Str("x")},
        OrderedDict(role="user", content="x"),
    ],
    ids=range(8),
)
def test_a_message_that_is_not_plain_takes_the_general_parse(msg):
    assert not _assert_parsesame(msg)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_message_parse_matches_the_general_parse_near_the_boundary(data):
    msg = data.draw(plain_message())
    if data.draw(st.booleans()):  # one change near the boundary, as the validation property makes
        msg = _changed(data.draw, msg)
    event("plain path" if _assert_parsesame(msg) else "general parse")
