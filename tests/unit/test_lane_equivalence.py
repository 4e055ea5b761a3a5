"""Every fast lane answers exactly as the full path it stands in for, and is taken where it should be.

The renderer serves the requests most clients send through shortcuts ("lanes"): the plain-chat
lane (renderer/chat/plain_lane.py), the chat validation fast path (renderer/chat/fast_request.py),
the plain message parse (``plain_message`` in renderer/chat/messages.py), the known-tools cache
(renderer/chat/known_tools.py), the model's template on minijinja
(renderer/chat/compiled_template.py), ``tokenize``'s text-only path
(model_repository/tokenize/1/model.py, ``Renderer.render_text_bytes``) and the text array lane
(``Renderer.render_text_array``). A lane that answered differently from the full path would be a
renderer that answers differently depending on how a request happens to be shaped.

``LANES`` is one table: each entry names a lane, how a request goes through it, how the same
request goes through the full path, and the cases it is held to: named corpora (the shared chat
corpus of tests/support/validation_oracle.py, vLLM's recorded chats in tests/fixtures/vllm/chat.json,
the hand-written boundary cases below) and a hypothesis strategy of generated requests near the
lane's boundary. Two parametrised tests hold every (lane, corpus) and every lane's generated
requests to the full path; each case may claim the route it takes (the lane, the full path, or
the lane tried and declined), and each corpus claims how much of it the lane serves, so a lane
that silently stopped applying fails here rather than passing by comparing the full path with
itself.

Below the harness: what each lane declines, where it is off, and what a served answer carries
beyond equality (fresh containers, the echoed prompt, a bug kept to its own request).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from chat_rules import minijinja_calls
from recorded_models import built
from chat_cases import PRINTS_MESSAGES, READS_TOOLS, STRICT_ROLES, TIME_TOOL, WEATHER_TOOL
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from validation_oracle import CORPUS, outcome, same

from renderer import Renderer, RendererConfig, TextPrompt, TokensPrompt
from renderer.chat import ChatParams
from renderer.chat import request as request_mod
from renderer.chat.fast_request import fast_validate
from renderer.chat.messages import MultiModalItem, _parse_message, parse_message, plain_message
from renderer.chat.params import DEFAULT_PARAMS
from renderer.chat.plain_lane import plain_conversation
from renderer.chat.renderer import ChatRenderer, RenderedChat
from renderer.chat.request import KNOWN_TOOLS, _validate_full, validate_chat_request
from renderer.chat.sandbox import TemplateLimits
from renderer.chat.template import ChatTemplateSource
from renderer.chat.tool_choice import UNSET, ToolChoicePolicy
from renderer.chat_stage import ChatStage
from renderer.errors import RenderError
from renderer.model_info import ModelInfo
from renderer.prompts import completion_prompt
from renderer.tokenizer import Tokenizer
from tests.support import fake_triton as ft

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "build" / "models" / "smollm2-135m-instruct"
VLLM_FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "vllm" / "chat.json").read_text())


# --- the harness ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One request a lane is held to the full path on."""

    name: str
    request: Any
    route: str | None = None
    """The route it must take: "lane" (served there), "full" (the lane never applied),
    "declined" (the lane tried and handed it on), "some" (a batch the lane served in part)."""
    check: Callable[[Any], bool] | None = None
    """What the full path's answer (and so the lane's) must satisfy: a recorded answer, say."""


@dataclass(frozen=True)
class Run:
    """What a request gave on the lane's side: every answer there (each must equal the full
    path's) and the route it took."""

    answers: tuple[Any, ...]
    route: str


@dataclass(frozen=True)
class Lane:
    """One lane: how a request goes through it and through the full path, and its cases."""

    name: str
    through_lane: Callable[[Env, Any], Run]
    through_full: Callable[[Env, Any], Any]
    corpora: Mapping[str, Callable[[Env], list[Case]]]
    claims: Mapping[str, Callable[[dict[str, str]], None]]
    """Per corpus, what the routes taken (by case name) must show: how much the lane served."""
    generated: st.SearchStrategy[Any]
    examples: int
    derandomize: bool = False
    equal: Callable[[Any, Any], bool] = same


def _hold(env: Env, lane: Lane, request: Any, name: str) -> tuple[str, Any]:
    """The route ``request`` took on ``lane`` and the full path's answer, once every answer on the
    lane's side is exactly the full path's."""
    run = lane.through_lane(env, request)
    full = lane.through_full(env, request)
    for answer in run.answers:
        assert lane.equal(answer, full), f"{lane.name} {name}: lane {answer!r} != full path {full!r}"
    return run.route, full


def _asked(calls: list[bool]) -> str:
    """The route from a spy's entries, one per time the lane was asked (True where it answered)."""
    return {(): "full", (True,): "lane", (False,): "declined"}.get(tuple(calls), repr(calls))


def _share(served: int, total: int) -> str:
    """The route of a batch from how many of its ``total`` requests the lane served."""
    return "full" if served == 0 else "lane" if served == total else "some"


class _Str(str):
    """A str subclass where a str goes: pydantic and the lanes must treat it as the full path does."""


def _taken(routes: dict[str, str], prefix: str) -> set[str]:
    return {name for name, route in routes.items() if route == "lane" and name.startswith(prefix)}


# --- the plain-chat lane -----------------------------------------------------------------------

# Templates the lane may serve (a role check that raises, names read) and one it must not
# (it reads content as parts: the "openai" content format).
PLAIN_STRICT_ROLES = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Unknown role: ' + message['role']) }}{% endif %}"
    "{{ message['role'] }}{% if message['name'] is defined %} ({{ message['name'] }}){% endif %}: "
    "{{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)
OPENAI_PARTS = (
    "{% for message in messages %}{{ message['role'] }}:"
    "{% for part in message['content'] %}{{ part['text'] }}{% endfor %}\n{% endfor %}"
)


def _warm(template: str | None = None, **kwargs: Any) -> ChatRenderer:
    if template is None:
        renderer = ChatRenderer.from_model_dir(DEFAULT_MODEL, **kwargs)
    else:
        source = ChatTemplateSource(tokenizer_template=template, special_tokens={"bos_token": "<s>"})
        renderer = ChatRenderer(source, **kwargs)
    renderer.warmup()
    return renderer


def _chat_answer(render: Callable[[], RenderedChat]) -> Any:
    """A render's every field a caller reads, or the error raised (type and words)."""
    try:
        r = render()
    except RenderError as e:
        return ("raised", type(e).__name__, str(e))
    return ("rendered", r.prompt, r.conversation, r.mm_items, r.content_format, r.output_parsing)


def _plain_through_lane(env: Env, request: tuple[str, Any]) -> Run:
    """The lane's own answer where it takes the chat, and ``render_messages`` under the default
    parameters (the object the lane is keyed on) either way."""
    renderer = env.plain[request[0]]
    lane = renderer._plain_lane
    assert lane is not None
    served = lane.render(request[1])
    answers = [] if served is None else [("rendered", served[0], served[1], (), "string", lane.output_parsing)]
    answers.append(_chat_answer(lambda: renderer.render_messages(request[1], DEFAULT_PARAMS)))
    return Run(tuple(answers), "full" if served is None else "lane")


def _plain_through_full(env: Env, request: tuple[str, Any]) -> Any:
    # ChatParams() equals the defaults but is not the lane's object: the full path.
    return _chat_answer(lambda: env.plain[request[0]].render_messages(request[1], ChatParams()))


def _plain_corpus(env: Env) -> list[Case]:
    return [
        Case(name, ("default", messages))
        for name, (messages, tools, documents, tool_choice) in CORPUS
        if tools is None and documents is None and tool_choice is UNSET
    ]


def _plain_corpus_claim(routes: dict[str, str]) -> None:
    # The benchmark's plain chats all take it, and many of vLLM's recorded ones.
    assert {f"short:{i}" for i in range(64)} <= _taken(routes, "short:")
    assert {f"chat_multiturn:{i}" for i in range(64)} <= _taken(routes, "chat_multiturn:")
    assert len(_taken(routes, "vllm:")) >= 20, len(_taken(routes, ""))
    assert not _taken(routes, "chat_tools:")


def _plain_names(env: Env) -> list[Case]:
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi", "name": "ana"}]
    return [
        Case("names on a template that reads them", ("strict", chat), "lane", lambda full: "user (ana): Hi" in full[1])
    ]


_PLAIN_ROLES = st.sampled_from(["system", "user", "assistant", "developer", "tool", "function", "narrator"])
# Any code point, surrogates included (JSON can carry a lone one; minijinja must not see it).
_ANY_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=16)
_PLAIN_VALUE = (
    st.none()
    | st.integers(-3, 3)
    | _ANY_TEXT
    | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _ANY_TEXT}), max_size=2)
)


@st.composite
def _near_plain_chats(draw: st.DrawFn) -> Any:
    """Mostly plain messages, each maybe bent: another role, a non-string value, a name, an extra
    key, the billing header, a lone surrogate; sometimes not a list of dicts at all."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.none() | st.just([]) | st.just({}) | _ANY_TEXT)
    chat: list[Any] = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 29)) == 0:
            chat.append(draw(_ANY_TEXT | st.none()))
            continue
        message: dict[str, Any] = {"role": draw(_PLAIN_ROLES), "content": draw(_ANY_TEXT)}
        bend = draw(st.integers(0, 9))
        if bend == 1:
            message["content"] = draw(_PLAIN_VALUE)
        elif bend == 2:
            message["role"] = draw(_PLAIN_VALUE)
        elif bend == 3:
            message[draw(st.sampled_from(["tool_calls", "tool_call_id", "extra", "reasoning"]))] = draw(_PLAIN_VALUE)
        elif bend == 4:
            message["content"] = "x-anthropic-billing-header" + draw(_ANY_TEXT)
        elif bend == 5:
            del message[draw(st.sampled_from(["role", "content"]))]
        if draw(st.booleans()):
            message["name"] = draw(_ANY_TEXT) if draw(st.integers(0, 3)) else draw(_PLAIN_VALUE)
        if draw(st.integers(0, 5)) == 0:  # keys in another order
            message = dict(reversed(list(message.items())))
        chat.append(message)
    return chat


PLAIN_LANE = Lane(
    name="plain_lane",
    through_lane=_plain_through_lane,
    through_full=_plain_through_full,
    corpora={"chat_corpus": _plain_corpus, "names": _plain_names},
    claims={"chat_corpus": _plain_corpus_claim},
    generated=st.tuples(st.sampled_from(["default", "strict"]), _near_plain_chats()),
    examples=400,
)


# --- the chat validation fast path ------------------------------------------------------------


def _fast_through_lane(env: Env, args: tuple[Any, Any, Any, Any]) -> Run:
    # validate_chat_request dispatches; fast_validate alone says whether the fast path took it.
    took = fast_validate(*args) is not None
    return Run((outcome(validate_chat_request, args),), "lane" if took else "full")


def _fast_through_full(env: Env, args: tuple[Any, Any, Any, Any]) -> Any:
    return outcome(_validate_full, args)


def _fast_corpus(env: Env) -> list[Case]:
    return [Case(name, args) for name, args in CORPUS]


def _fast_corpus_claim(routes: dict[str, str]) -> None:
    # Most recorded plain chats take it (a test that would pass with the fast path never applying
    # would prove nothing): the short and multi-turn benchmark chats all do.
    assert {f"short:{i}" for i in range(64)} <= _taken(routes, "short:")
    assert {f"chat_multiturn:{i}" for i in range(64)} <= _taken(routes, "chat_multiturn:")
    assert len(_taken(routes, "vllm:")) >= 50, len(_taken(routes, ""))
    # And nothing with tools, content parts or another role does.
    assert not _taken(routes, "chat_tools:")


def _has_tool_turn(messages: Any) -> bool:
    return isinstance(messages, list) and any(isinstance(m, dict) and m.get("role") == "tool" for m in messages)


def _fast_messages_alone(env: Env) -> list[Case]:
    """A tool chat's messages alone (its tools list validated before: known_tools.py) take the
    fast path, tool calls and tool results included: every benchmark tool chat whose turns have
    string (or null) contents; content parts are validated lazily by pydantic, so those take the
    full path."""
    cases = []
    for name, (messages, _, documents, _) in CORPUS:
        route = None
        if name.startswith(("chat_tools:", "chat_mix:")) and _has_tool_turn(messages):
            route = None if any(isinstance(m.get("content"), list) for m in messages) else "lane"
        cases.append(Case(name, (messages, None, documents, UNSET), route))
    return cases


def _fast_messages_alone_claim(routes: dict[str, str]) -> None:
    tool_chats = {name for name, (messages, _, _, _) in CORPUS if _has_tool_turn(messages)}
    assert len(_taken(routes, "chat_tools:") & tool_chats) >= 40, len(_taken(routes, "chat_tools:"))


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}

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


def _fast_falls_through(env: Env) -> list[Case]:
    return [Case(f"fall_through:{i}", args, "full") for i, args in enumerate(FALL_THROUGH)]


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
def plain_messages(draw: Any) -> dict[str, Any]:
    """A plain message (system, user, assistant or developer; a string content; maybe a name)."""
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
def near_plain_message_lists(draw: Any) -> Any:
    """A plain chat, mostly with one message changed."""
    msgs: list[Any] = draw(st.lists(plain_messages(), max_size=3))
    if msgs and draw(st.integers(0, 3)):
        i = draw(st.integers(0, len(msgs) - 1))
        msgs[i] = _changed(draw, msgs[i])
    return msgs


call_texts = texts | st.sampled_from(["{}", '{"x": [1, {"y": null}]}', "[" * 996, "[" * 997 + "]" * 997])


@st.composite
def tool_call(draw: Any) -> Any:
    """A tool call, mostly as clients send it, else with one change near the boundary."""
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


tool_chats = st.lists(plain_messages() | tool_turn(), max_size=4)

fast_requests = st.tuples(
    near_plain_message_lists() | tool_chats | st.sampled_from([None, "hi", {"role": "user", "content": "x"}]),
    st.sampled_from([None] * 8 + [[], [TIME_TOOL]]),
    st.sampled_from([None] * 8 + [[], [{"title": "t"}], [{"title": 1}]]),
    st.sampled_from([UNSET] * 4 + [None, "none", "auto", "required", _Str("none"), {"function": {"name": "get_time"}}]),
)

FAST_REQUEST = Lane(
    name="fast_request",
    through_lane=_fast_through_lane,
    through_full=_fast_through_full,
    corpora={
        "chat_corpus": _fast_corpus,
        "chat_corpus_messages_alone": _fast_messages_alone,
        "falls_through": _fast_falls_through,
    },
    claims={"chat_corpus": _fast_corpus_claim, "chat_corpus_messages_alone": _fast_messages_alone_claim},
    generated=fast_requests,
    examples=2000,
)


# --- the plain message parse: a plain message straight to what the template sees ----------------


@dataclass(frozen=True)
class Remade:
    """A message made anew for each parse (validated content parts are read once)."""

    make: Callable[[], Any]


def _message(request: Any) -> Any:
    return request.make() if isinstance(request, Remade) else request


def _parsed(parse: Any, msg: Any, fmt: str) -> Any:
    """``parse``'s result for one message, or the error it raised (type and words)."""
    items: list[MultiModalItem] = []
    try:
        return ("ok", parse(0, msg, fmt, items, "<image>"), items)
    except Exception as e:  # noqa: BLE001 (the error is the outcome compared)
        return ("raised", type(e), str(e))


def _parse_through_lane(env: Env, request: Any) -> Run:
    took = [plain_message(_message(request), fmt) is not None for fmt in ("string", "openai")]
    # The plain path takes a message in both content formats or in neither.
    assert took[0] == took[1]
    answer = tuple(_parsed(_parse_message, _message(request), fmt) for fmt in ("string", "openai"))
    return Run((answer,), "lane" if took[0] else "full")


def _parse_through_full(env: Env, request: Any) -> Any:
    return tuple(_parsed(parse_message, _message(request), fmt) for fmt in ("string", "openai"))


def _validated(args: tuple[Any, Any, Any, Any]) -> list[Any]:
    """A request's messages as the template's parse receives them: validated (vLLM's request
    model), or as sent where validation refuses the request."""
    try:
        return validate_chat_request(*args).messages
    except Exception:  # noqa: BLE001 (refused: the message as sent still must parse the same)
        return args[0] if isinstance(args[0], list) else [args[0]]


def _parse_corpus(env: Env) -> list[Case]:
    cases = []
    for name, args in CORPUS:
        for i, msg in enumerate(_validated(args)):
            # No message with tool calls, a tool result or content parts takes it.
            plain = not (isinstance(msg, dict) and ("tool_calls" in msg or not isinstance(msg.get("content"), str)))
            remade = Remade(functools.partial(lambda a, j: _validated(a)[j], args, i))
            cases.append(Case(f"{name}[{i}]", remade, None if plain else "full"))
    return cases


def _parse_corpus_claim(routes: dict[str, str]) -> None:
    # Every message of the plain benchmark chats takes it (a path that never applied would prove
    # nothing).
    multiturn = {name for name in routes if name.startswith("chat_multiturn:")}
    assert multiturn and multiturn <= _taken(routes, "chat_multiturn:")


NOT_PLAIN_MESSAGES = [
    {"role": "system", "content": "x-anthropic-billing-header: cc\nBe terse."},
    {"role": "system", "content": "x-anthropic-billing-header: cc"},
    {"role": "tool", "content": "x", "tool_call_id": "a"},
    {"role": "assistant", "content": "x", "tool_calls": []},
    {"role": "user", "content": "x", "name": 3},
    {"role": "user", "content": "x", "task": "t"},
    {"role": "user", "content": _Str("x")},
    OrderedDict(role="user", content="x"),
]


def _parse_not_plain(env: Env) -> list[Case]:
    return [Case(f"not_plain:{i}", msg, "full") for i, msg in enumerate(NOT_PLAIN_MESSAGES)]


@st.composite
def _near_plain_message(draw: Any) -> Any:
    msg = draw(plain_messages())
    if draw(st.booleans()):  # one change near the boundary, as the validation property makes
        msg = _changed(draw, msg)
    return msg


MESSAGE_PARSE = Lane(
    name="message_parse",
    through_lane=_parse_through_lane,
    through_full=_parse_through_full,
    corpora={"chat_corpus_messages": _parse_corpus, "not_plain": _parse_not_plain},
    claims={"chat_corpus_messages": _parse_corpus_claim},
    generated=_near_plain_message(),
    examples=1000,
)


# --- tool lists validated once and kept ----------------------------------------------------------

USER = [{"role": "user", "content": "What's the weather?"}]


def _tools_through_lane(env: Env, args: tuple[Any, Any, Any, Any]) -> Run:
    """A miss and then a hit (where the list is kept). The arguments are deep-copied per call, so
    no call can see what another changed."""
    before = KNOWN_TOOLS.info().hits
    answers = tuple(outcome(validate_chat_request, copy.deepcopy(args)) for _ in ("first", "second"))
    return Run(answers, "lane" if KNOWN_TOOLS.info().hits > before else "full")


def _tools_through_full(env: Env, args: tuple[Any, Any, Any, Any]) -> Any:
    return outcome(_validate_full, copy.deepcopy(args))


def _tools_corpus_claim(routes: dict[str, str]) -> None:
    # Every benchmark tool chat sends one of a few lists: after the first, each is a hit (a cache
    # that never applied would prove nothing).
    info = KNOWN_TOOLS.info()
    assert info.hits > info.misses > 0, info


def _tools_refusals(env: Env) -> list[Case]:
    """Refusals are worded by the full path on every call, the first and the one after it."""
    bad_tools = [{"type": "function", "function": {"description": "no name"}}]
    bad_messages = [{"role": "user", "content": 3}]
    requests = [
        (USER, bad_tools, None, UNSET),
        (bad_messages, [WEATHER_TOOL], None, UNSET),
        (bad_messages, bad_tools, None, UNSET),
        (USER, [WEATHER_TOOL], None, {"type": "function", "function": {"name": "nope"}}),
        (USER, [WEATHER_TOOL], [{"title": 1}], UNSET),
    ]
    return [Case(f"refusal:{i}", args, check=lambda full: full[0] == "raised") for i, args in enumerate(requests)]


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


tools_requests = st.tuples(
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

KNOWN_TOOLS_LANE = Lane(
    name="known_tools",
    through_lane=_tools_through_lane,
    through_full=_tools_through_full,
    corpora={"chat_corpus": _fast_corpus, "refusals": _tools_refusals},
    claims={"chat_corpus": _tools_corpus_claim},
    generated=tools_requests,
    examples=1000,
)


# --- the model's template on minijinja -----------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}


def untimed(limits: TemplateLimits | None) -> TemplateLimits:
    """``limits`` (or the defaults) without the rendering deadline: time is no part of a lane's
    answer, and the 2 s default fired on one side only while another test run shared the cores."""
    return replace(limits or TemplateLimits(), max_seconds=600.0)


@dataclass(frozen=True)
class TemplateRequest:
    """A chat, its parameters and the renderer it goes to: a template (None: the default model's),
    or a template vLLM recorded (tests/fixtures/vllm/chat.json), with template limits."""

    template: str | None
    messages: Any
    params: ChatParams
    limits: TemplateLimits | None = None
    recorded: str | None = None


def _template_outcome(env: Env, request: TemplateRequest, engine: str) -> tuple[str, str]:
    renderer = env.template_renderer(request, engine)
    try:
        return "prompt", renderer.render_messages(request.messages, request.params).prompt
    except RenderError as e:
        return type(e).__name__, str(e)


def _compiled_through_lane(env: Env, request: TemplateRequest) -> Run:
    """``CHAT_TEMPLATE_ENGINE=auto``; a spy records each time minijinja was asked, and whether it
    answered."""
    with minijinja_calls() as calls:
        answer = _template_outcome(env, request, "auto")
    return Run((answer,), _asked(calls))


def _compiled_through_full(env: Env, request: TemplateRequest) -> Any:
    return _template_outcome(env, request, "jinja2")


def _compiled_vllm_recorded(env: Env) -> list[Case]:
    """Every chat vLLM rendered or refused (tests/fixtures/vllm/chat.json), on each recorded
    model; the recorded prompt itself where vLLM rendered one (test_chat_templates holds every
    case to vLLM; image chats need their items here)."""
    cases = []
    for case in VLLM_FIXTURE["cases"]:
        if case["trust"] is not None:
            continue
        try:
            params = ChatParams.from_request(case["chat_params"])
        except RenderError:
            continue  # refused before any template: nothing of the template engines runs
        check = None
        if case["status"] == 200 and case.get("prompt") is not None:
            check = functools.partial(lambda p, full: full[0] != "prompt" or full == ("prompt", p), case["prompt"])
        cases.append(
            Case(case["id"], TemplateRequest(None, case["messages"], params, recorded=case["template"]), None, check)
        )
    return cases


def _compiled_vllm_claim(routes: dict[str, str]) -> None:
    assert len(_taken(routes, "")) >= 20, "plain chats on the default model's template must take minijinja"


def _p(bag: dict[str, Any]) -> ChatParams:
    return ChatParams.from_request(bag)


def _compiled_not_plain(env: Env) -> list[Case]:
    """Requests that are not plain render in Jinja: minijinja is never asked."""
    hi = [{"role": "user", "content": "hi"}]
    return [
        Case("lone_surrogate", TemplateRequest(None, [{"role": "user", "content": "a\ud800b"}], _p({})), "full"),
        Case("tools_read", TemplateRequest(READS_TOOLS, hi, _p({"tools": TOOLS})), "full"),
        Case("tools_printed", TemplateRequest(PRINTS_MESSAGES, hi, _p({"tools": TOOLS})), "full"),
        Case(
            "tool_calls_read",
            TemplateRequest(
                READS_TOOLS, [*hi, {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}], _p({})
            ),
            "full",
        ),
        Case(
            "continue_final_message",
            TemplateRequest(
                None,
                [*hi, {"role": "assistant", "content": "Hel"}],
                _p({"continue_final_message": True, "add_generation_prompt": False}),
            ),
            "full",
        ),
        Case(
            "content_parts_kept",
            TemplateRequest(
                None,
                [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                _p({"chat_template_content_format": "openai"}),
            ),
            "full",
        ),
        Case(
            "a_template_kwarg_the_template_reads",
            TemplateRequest(
                "{{ messages[0]['content'] }}|{{ x }}", hi, _p({"chat_template_kwargs": {"x": "from the request"}})
            ),
            "full",
            lambda full: full == ("prompt", "hi|from the request"),
        ),
    ]


def _compiled_served(env: Env) -> list[Case]:
    """Requests whose conversation the template reads only plainly: served on minijinja."""
    tool_chat = [
        {"role": "user", "content": "weather?", "name": "ann"},
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"t": 21}'},
    ]
    parts = [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]}]
    rendered = lambda full: full[0] == "prompt"  # noqa: E731 (a check, named for the message)
    return [
        # The default model's template reads each message's role and content only: a chat with
        # tools, tool calls and tool results renders on minijinja, cut to those keys.
        Case(
            "tool_chat_on_a_template_that_reads_neither",
            TemplateRequest(None, tool_chat, _p({"tools": TOOLS, "tool_choice": "auto"})),
            "lane",
            rendered,
        ),
        # The "string" content format joins text parts before the template: the conversation it
        # sees is plain.
        Case("content_parts_flattened_to_a_string", TemplateRequest(None, parts, ChatParams()), "lane", rendered),
    ]


def _compiled_declined(env: Env) -> list[Case]:
    """minijinja fails; the request is rendered in Jinja, whose error it gets."""
    return [
        Case(
            "a_template_error_keeps_jinjas_words",
            TemplateRequest(STRICT_ROLES, [{"role": "tool", "content": "x"}], ChatParams()),
            "declined",
            lambda full: full == ("ChatTemplateRenderError", "Unknown role: tool"),
        ),
        Case(
            "an_output_over_the_limit_keeps_jinjas_error",
            TemplateRequest(
                None, [{"role": "user", "content": "x" * 2_000}], ChatParams(), TemplateLimits(max_output_chars=1_000)
            ),
            "declined",
            lambda full: full[0] == "ChatTemplateBuildError",
        ),
    ]


_TEMPLATE_ROLES = st.sampled_from(["system", "user", "assistant", "developer", "tool", "narrator"])
_TEMPLATE_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=24)
_JSON_SCALAR = st.none() | st.booleans() | st.integers(-5, 5) | _TEMPLATE_TEXT


@st.composite
def _plain_template_chats(draw: st.DrawFn) -> TemplateRequest:
    """Plain chats near the edges (every code point, unknown roles, names)."""
    chat = []
    for _ in range(draw(st.integers(1, 5))):
        message = {"role": draw(_TEMPLATE_ROLES), "content": draw(_TEMPLATE_TEXT)}
        if draw(st.booleans()):
            message["name"] = draw(_TEMPLATE_TEXT)
        chat.append(message)
    template = draw(st.sampled_from([None, STRICT_ROLES, PRINTS_MESSAGES]))
    return TemplateRequest(template, chat, ChatParams(add_generation_prompt=draw(st.booleans())))


@st.composite
def _tool_template_chats(draw: st.DrawFn) -> TemplateRequest:
    """Chats with tool calls (arguments valid JSON or not), tool results, null or missing
    contents and keys vLLM keeps, sent with tools or without."""
    chat = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["plain", "calls", "result", "extra"]))
        role = draw(_TEMPLATE_ROLES)
        message: dict[str, Any] = {"role": role, "content": draw(_TEMPLATE_TEXT)}
        if kind == "calls":
            arguments = draw(st.sampled_from(['{"x": 1}', "{}", "not json", '{"nested": {"a": [1, null]}}']))
            call = {
                "id": draw(_TEMPLATE_TEXT),
                "type": "function",
                "function": {"name": draw(_TEMPLATE_TEXT), "arguments": arguments},
            }
            message = {"role": "assistant", "tool_calls": [call] * draw(st.integers(1, 2))}
            if draw(st.booleans()):
                message["content"] = draw(st.none() | _TEMPLATE_TEXT)
        elif kind == "result":
            message = {"role": "tool", "content": draw(_TEMPLATE_TEXT), "tool_call_id": draw(_TEMPLATE_TEXT)}
        elif kind == "extra":
            message[draw(st.sampled_from(["reasoning", "x_custom", "tool_call_id"]))] = draw(_JSON_SCALAR)
        if draw(st.booleans()):
            message["name"] = draw(_TEMPLATE_TEXT)
        chat.append(message)
    params: dict[str, Any] = {"add_generation_prompt": draw(st.booleans())}
    if draw(st.booleans()):
        params["tools"] = TOOLS
        params["tool_choice"] = draw(st.sampled_from(["none", "auto", "required"]))
    template = draw(st.sampled_from([None, STRICT_ROLES, READS_TOOLS]))
    return TemplateRequest(template, chat, ChatParams.from_request(params))


COMPILED_TEMPLATE = Lane(
    name="compiled_template",
    through_lane=_compiled_through_lane,
    through_full=_compiled_through_full,
    corpora={
        "vllm_recorded": _compiled_vllm_recorded,
        "not_plain": _compiled_not_plain,
        "served": _compiled_served,
        "declined": _compiled_declined,
    },
    claims={"vllm_recorded": _compiled_vllm_claim},
    generated=_plain_template_chats() | _tool_template_chats(),
    examples=600,
    equal=lambda a, b: a == b,
)


# --- tokenize's text-only path -------------------------------------------------------------------

TOKENIZE_CONTEXTS = {"model-context": 0, "context-16": 16}  # with 16, most texts fail the length check
ALL_OUTPUTS = ["input_ids", "input_lengths", "token_offsets", "rendered_prompt", "input_embeds", "length_limit"]
TOKENIZE_TEXTS = [
    "Hello",
    "a longer sentence with   spaces and\nnew lines\n\n",
    "中文 and 日本語, 🦩 emoji, e\u0301",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "",
    " ",
    "\x16",  # a byte fastokens has no token for: the lane declines, Hugging Face answers
    "word " * 12,
    "x" * 500,
]


@dataclass(frozen=True)
class TokenizeBatch:
    """One batch of tensors to the ``tokenize`` adapter (in process), and the outputs asked for."""

    context: str
    batch: list[dict[str, Any]]
    requested: list[str]


def summary(response: Any) -> Any:
    """What a client sees of a response: its error, or each output's dtype, shape and values."""
    if response.has_error():
        return ("error", response.error().code(), response.error().message())
    out = {}
    for t in response.output_tensors():
        arr = t.as_numpy()
        out[t.name()] = (arr.dtype.kind if arr.dtype.kind in "OSU" else str(arr.dtype), arr.shape, arr.tolist())
    return out


def tokenize_request(tensors: dict[str, Any], requested: list[str]) -> Any:
    return ft.Request([ft.Tensor(k, v) for k, v in tensors.items()], requested_output_names=requested)


def prompt(text: str | bytes, chat: bool | None = None) -> dict[str, Any]:
    raw = text.encode() if isinstance(text, str) else text
    tensors: dict[str, Any] = {"prompt": np.array([[raw]], dtype=np.object_)}
    if chat is not None:
        tensors["chat_template_applied"] = np.array([[chat]])
    return tensors


@contextlib.contextmanager
def full_path_only(model: Any) -> Iterator[None]:
    """The adapter with its text-only path switched off on the instance."""
    model._text_only = lambda request: None
    try:
        yield
    finally:
        del model._text_only


def _tokenize_through_lane(env: Env, request: TokenizeBatch) -> Run:
    """The adapter as it is; a spy counts the requests ``render_text_bytes`` answered (not None,
    no exception)."""
    model = env.tokenize[request.context]
    inner = model.renderer.render_text_bytes
    served = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal served
        res = inner(*args, **kwargs)
        served += res is not None
        return res

    with mock.patch.object(model.renderer, "render_text_bytes", counted):
        answer = [summary(r) for r in model.execute([tokenize_request(t, request.requested) for t in request.batch])]
    # What the path served is answered, never an error.
    assert served <= sum(not isinstance(a, tuple) for a in answer)
    return Run((answer,), _share(served, len(request.batch)))


def _tokenize_through_full(env: Env, request: TokenizeBatch) -> Any:
    model = env.tokenize[request.context]
    with full_path_only(model):
        return [summary(r) for r in model.execute([tokenize_request(t, request.requested) for t in request.batch])]


def _tokenize_texts(env: Env) -> list[Case]:
    # Some of each batch, never all: "\x16" at least goes to the full path.
    return [
        Case(f"{ctx}/chat={chat}", TokenizeBatch(ctx, [prompt(t, chat) for t in TOKENIZE_TEXTS], ALL_OUTPUTS), "some")
        for ctx in TOKENIZE_CONTEXTS
        for chat in (None, False, True)
    ]


BAD_TENSORS = {
    "invalid-utf8": prompt(b"caf\xc3 \xff"),
    "two-elements": {"prompt": np.array([[b"a", b"b"]], dtype=np.object_)},
    "batch-of-two": {"prompt": np.array([[b"a"], [b"b"]], dtype=np.object_)},
    "no-batch-dimension": {"prompt": np.array(b"a", dtype=np.object_)},
    "two-flags": {**prompt("hi"), "chat_template_applied": np.array([[True, False]])},
    "str-element": {"prompt": np.array([["hi"]], dtype=np.object_)},
    "no-prompt": {"chat_template_applied": np.array([[True]])},
}


def _tokenize_bad_tensors(env: Env) -> list[Case]:
    """Bad and unusual tensors get the full path's answer."""
    return [
        Case(f"{ctx}/{name}", TokenizeBatch(ctx, [tensors], ALL_OUTPUTS))
        for ctx in TOKENIZE_CONTEXTS
        for name, tensors in BAD_TENSORS.items()
    ]


def _tokenize_other_inputs(env: Env) -> list[Case]:
    """Requests with other inputs than the prompt and the chat flag take the full path."""
    others = [
        {**prompt("Hello"), "tokenize_params": np.array([[b'{"add_special_tokens": false}']], dtype=np.object_)},
        {**prompt("Hello"), "cache_salt": np.array([[b"salt"]], dtype=np.object_)},
        {**prompt("Hello", True), "max_tokens": np.array([[3]], dtype=np.int32)},
        {"prompt_token_ids": np.array([[1, 2, 3]], dtype=np.int32)},
    ]
    return [Case(ctx, TokenizeBatch(ctx, others, ALL_OUTPUTS), "full") for ctx in TOKENIZE_CONTEXTS]


def _tokenize_outputs_asked_for(env: Env) -> list[Case]:
    """Only the outputs asked for, and the two every step reads."""
    return [
        Case(
            f"{ctx}/{'+'.join(requested)}",
            TokenizeBatch(ctx, [prompt("Hello there", True)], requested),
            check=functools.partial(
                lambda want, full: set(full[0]) == want, {"input_ids", "input_lengths", *requested}
            ),
        )
        for ctx in TOKENIZE_CONTEXTS
        for requested in (["input_ids", "input_lengths"], ["rendered_prompt"], ALL_OUTPUTS)
    ]


TOKENIZE_TEXT_ONLY = Lane(
    name="tokenize_text_only",
    through_lane=_tokenize_through_lane,
    through_full=_tokenize_through_full,
    corpora={
        "texts": _tokenize_texts,
        "bad_tensors": _tokenize_bad_tensors,
        "other_inputs": _tokenize_other_inputs,
        "outputs_asked_for": _tokenize_outputs_asked_for,
    },
    claims={},
    generated=st.builds(
        lambda ctx, raws, chat: TokenizeBatch(ctx, [prompt(r, chat) for r in raws], ALL_OUTPUTS),
        st.sampled_from(list(TOKENIZE_CONTEXTS)),
        st.lists(st.text(max_size=60).map(str.encode) | st.binary(max_size=24), min_size=1, max_size=4),
        st.sampled_from([None, False, True]),
    ),
    examples=300,
    derandomize=True,
    equal=lambda a, b: a == b,
)


# --- the text array lane -------------------------------------------------------------------------

ARRAY_TOKENIZERS = ("smollm2", "qwen3", "mistral", "smollm2+bos")
ARRAY_TEXTS = [
    "Hello",
    "a longer sentence with   spaces and\nnew lines\n\n",
    "中文 and 日本語, 🦩 emoji, e\u0301",
    "HeLLo ÀÉÎ ß",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "",
    " ",
    "\x16",  # a byte fastokens has no token for: the full path answers from Hugging Face
    "word " * 3,
    "word " * 12,
    "word " * 40,
    "x" * 500,
]


@dataclass(frozen=True)
class ArrayBatch:
    """Text prompts (every other one salted) for one tokenizer, context length and lane params."""

    tokenizer: str
    max_model_len: int
    variant: int
    texts: list[str]


def renderer_for(tok: Tokenizer, model_dir: Path, max_model_len: int) -> Renderer:
    info = ModelInfo.from_model_dir(model_dir, max_model_len)
    return Renderer(tok, info, RendererConfig(model_dir=str(model_dir), max_model_len=max_model_len))


def params_variants(r: Renderer) -> list:
    """Chat and completion defaults, output tokens reserved, lower-casing: all lane params."""
    out = [r.default_completion_params, r.request_params(None, chat=True)]
    for n in (1, 5):
        if n < r.info.max_model_len:
            out.append(r.request_params(None, chat=True, max_output_tokens=n))
    out.append(r.request_params({"do_lower_case": True}))
    return out


def _array_answers(env: Env, request: ArrayBatch, ids_as_array: bool) -> tuple[list[Any], int]:
    """Each prompt's answer (its fields, or the error's type and words) and how many came as the
    lane's int32 arrays."""
    r = env.array_renderer(request.tokenizer, request.max_model_len)
    variants = params_variants(r)
    params = variants[request.variant % len(variants)]
    prompts = [
        r.render_prompt(completion_prompt(text=t, cache_salt="s" if i % 2 else None))
        for i, t in enumerate(request.texts)
    ]
    out, served = [], 0
    kwargs = {"ids_as_array": True} if ids_as_array else {}
    for res in r.render_batch(prompts, [params] * len(prompts), **kwargs):
        if isinstance(res, Exception):
            out.append(("raised", type(res), str(res)))
            continue
        ids = res.prompt_token_ids
        if isinstance(ids, np.ndarray):
            served += 1
            assert ids.dtype == np.int32
            ids = ids.tolist()
        out.append(("ok", ids, res.prompt, res.token_offsets, res.cache_salt, res.prompt_embeds))
    return out, served


def _array_through_lane(env: Env, request: ArrayBatch) -> Run:
    answer, served = _array_answers(env, request, ids_as_array=True)
    return Run((answer,), _share(served, len(request.texts)))


def _array_through_full(env: Env, request: ArrayBatch) -> Any:
    return _array_answers(env, request, ids_as_array=False)[0]


def _array_texts(env: Env) -> list[Case]:
    return [
        Case(f"{name}/{n}/{i}", ArrayBatch(name, n, i, ARRAY_TEXTS))
        for name in ARRAY_TOKENIZERS
        for n in (8, 16, 64, 8192)
        for i in range(len(params_variants(env.array_renderer(name, n))))
    ]


def _array_texts_claim(routes: dict[str, str]) -> None:
    # On every tokenizer and context length the lane served something: the comparison proved
    # something about it.
    for name in ARRAY_TOKENIZERS:
        for n in (8, 16, 64, 8192):
            assert any(r != "full" for c, r in routes.items() if c.startswith(f"{name}/{n}/")), (name, n)


TEXT_ARRAY = Lane(
    name="text_array",
    through_lane=_array_through_lane,
    through_full=_array_through_full,
    corpora={"texts": _array_texts},
    claims={"texts": _array_texts_claim},
    generated=st.builds(
        ArrayBatch,
        st.sampled_from(ARRAY_TOKENIZERS),
        st.sampled_from([24, 8192]),
        st.integers(0, 4),
        st.lists(st.text(max_size=80) | st.sampled_from(ARRAY_TEXTS), min_size=1, max_size=4),
    ),
    examples=500,
    derandomize=True,
    equal=lambda a, b: a == b,
)


LANES = [PLAIN_LANE, FAST_REQUEST, MESSAGE_PARSE, KNOWN_TOOLS_LANE, COMPILED_TEMPLATE, TOKENIZE_TEXT_ONLY, TEXT_ARRAY]


# --- what the lanes run on -----------------------------------------------------------------------


class Env:
    """What the lanes run on, each built the first time a test asks for it and kept for the module."""

    def __init__(self, model_dir: Path, hf_tokenizer: Any, tmp: pytest.TempPathFactory, stack: contextlib.ExitStack):
        self.model_dir, self.hf_tokenizer, self.tmp, self.stack = model_dir, hf_tokenizer, tmp, stack
        self._templates: dict[tuple[Any, ...], ChatRenderer] = {}
        self._arrays: dict[tuple[str, int], Renderer] = {}

    @cached_property
    def plain(self) -> dict[str, ChatRenderer]:
        return {"default": _warm(tool_choice_policy=ToolChoicePolicy()), "strict": _warm(PLAIN_STRICT_ROLES)}

    @cached_property
    def reference_dirs(self) -> dict[str, Path]:
        from model_builders.reference_tokenizers import build

        return build(ROOT / "build" / "models" / "tokenizers")  # the tokenizer folders the fixture names

    def template_renderer(self, request: TemplateRequest, engine: str) -> ChatRenderer:
        key = (request.template, request.recorded, request.limits, engine)
        if key not in self._templates:
            if request.recorded is not None:
                self.reference_dirs  # noqa: B018 (built on first use)
                path = built(VLLM_FIXTURE["templates"][request.recorded])
                served = ChatStage.from_model_dir(path).chat  # media rules as the server sets them
                media = {"image_placeholder": served.image_placeholder, "mm_limits": served.mm_limits}
                renderer = ChatRenderer.from_model_dir(path, template_engine=engine, limits=untimed(None), **media)
            elif request.template is None:
                renderer = ChatRenderer.from_model_dir(
                    DEFAULT_MODEL, template_engine=engine, limits=untimed(request.limits)
                )
            else:
                source = ChatTemplateSource(tokenizer_template=request.template, special_tokens={"bos_token": "<s>"})
                renderer = ChatRenderer(source, template_engine=engine, limits=untimed(request.limits))
            self._templates[key] = renderer
        return self._templates[key]

    @cached_property
    def tokenize(self) -> dict[str, Any]:
        """The ``tokenize`` adapter in process, per context length."""
        out = {}
        for name, max_model_len in TOKENIZE_CONTEXTS.items():
            repo = self.stack.enter_context(
                ft.rendered_repository(self.tmp.mktemp(f"text-only-{max_model_len}"), max_model_len=max_model_len)
            )
            out[name] = repo.model("tokenize")
        return out

    @cached_property
    def tokenizers(self) -> dict[str, Tokenizer]:
        from tokenizers.processors import TemplateProcessing

        bos = copy.deepcopy(self.hf_tokenizer)  # a post-processor that adds a BOS: special tokens count
        bos.backend_tokenizer.post_processor = TemplateProcessing(
            single="<|im_start|> $A", special_tokens=[("<|im_start|>", bos.convert_tokens_to_ids("<|im_start|>"))]
        )
        return {
            "smollm2": Tokenizer.from_pretrained(self.model_dir, backend="auto"),
            "qwen3": Tokenizer.from_pretrained(self.reference_dirs["qwen3"], backend="auto"),
            "mistral": Tokenizer.from_pretrained(self.reference_dirs["mistral"], backend="auto"),
            "smollm2+bos": Tokenizer(bos, "auto"),
        }

    def array_renderer(self, name: str, max_model_len: int) -> Renderer:
        if (name, max_model_len) not in self._arrays:
            self._arrays[name, max_model_len] = renderer_for(self.tokenizers[name], self.model_dir, max_model_len)
        return self._arrays[name, max_model_len]


@pytest.fixture(scope="module")
def env(model_dir: Path, hf_tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with contextlib.ExitStack() as stack:
        yield Env(model_dir, hf_tokenizer, tmp_path_factory, stack)


@pytest.fixture(autouse=True)
def _empty_known_tools() -> Iterator[None]:
    # The known-tools cache starts each test empty, so a corpus's first sight of a list is a miss.
    KNOWN_TOOLS.clear()
    yield
    KNOWN_TOOLS.clear()


# --- the two equivalence tests -------------------------------------------------------------------

CORPORA = [(lane, corpus) for lane in LANES for corpus in lane.corpora]


@pytest.mark.parametrize(("lane", "corpus"), CORPORA, ids=[f"{lane.name}:{corpus}" for lane, corpus in CORPORA])
def test_lane_answers_as_the_full_path(env: Env, lane: Lane, corpus: str) -> None:
    """Every case of the corpus gets exactly the full path's answer on the lane, takes the route
    it claims, satisfies its recorded check, and the corpus shows the lane served what it must."""
    cases = lane.corpora[corpus](env)
    assert cases, f"{lane.name}:{corpus} has no cases: it would prove nothing"
    routes: dict[str, str] = {}
    for case in cases:
        routes[case.name], full = _hold(env, lane, case.request, case.name)
        if case.route is not None:
            assert routes[case.name] == case.route, f"{lane.name} {case.name}: took {routes[case.name]!r}"
        if case.check is not None:
            assert case.check(full), f"{lane.name} {case.name}: {full!r}"
    if corpus in lane.claims:
        lane.claims[corpus](routes)


@pytest.mark.parametrize("lane", LANES, ids=[lane.name for lane in LANES])
def test_lane_answers_as_the_full_path_on_generated_requests(env: Env, lane: Lane) -> None:
    """Generated requests near the lane's boundary get exactly the full path's answer, whichever
    route they take."""

    @settings(
        max_examples=lane.examples,
        deadline=None,
        derandomize=lane.derandomize,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(request=lane.generated)
    def check(request: Any) -> None:
        route, _ = _hold(env, lane, request, "generated")
        event(route)

    check()


# --- the plain-chat lane: where it applies -------------------------------------------------------


def test_the_lane_is_off_where_the_full_path_would_not_render_on_minijinja():
    """The plain-chat lane is not built for the Jinja engine, a template reading content as
    parts, or before warmup: every chat then takes the full path."""
    # The Jinja engine by setting; a template reading content as parts ("openai" format).
    assert _warm(template_engine="jinja2")._plain_lane is None
    assert _warm(OPENAI_PARTS)._plain_lane is None
    # Before warmup nothing is built: every chat takes the full path.
    assert ChatRenderer.from_model_dir(DEFAULT_MODEL)._plain_lane is None


def test_a_bag_sent_takes_the_full_path_with_the_same_result(env: Env):
    """A chat_params bag, even one equal to the defaults, takes the full path: the same prompt
    as the lane's where it says the same, another where it does not."""
    stage = ChatStage(env.plain["default"], None)
    text = '[{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}, {"role": "user", "content": "?"}]'
    lane = stage.render(text, None).rendered
    # An explicit default is a bag: the full path, the same prompt.
    assert stage.render(text, {"add_generation_prompt": True}).rendered.prompt == lane.prompt
    assert stage.render(text, {}).rendered.prompt == lane.prompt
    assert stage.render(text, {"add_generation_prompt": False}).rendered.prompt != lane.prompt


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi", "name": "a", "x": 1}],
        [{"role": "developer", "content": "hi"}],
        [{"role": "user", "content": None}],
        [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        [{"role": "user", "content": "\ud800"}],
        [{"role": "user", "content": "hi", "name": "\udfff"}],
        [{"role": "system", "content": "x-anthropic-billing-header: cc"}],
        [{"role": "user"}],
        [],
        {"role": "user", "content": "hi"},
    ],
)
def test_what_the_lane_leaves_to_the_full_path(messages):
    """Chats the plain-chat lane declines: an extra key, another role, a non-string content, a
    lone surrogate, the billing header, a missing key, no messages, not a list."""
    assert plain_conversation(messages) is None


# --- the chat validation fast path: what it takes ------------------------------------------------

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
    """A plain chat is validated without the full path running, to the full path's result, in
    fresh dicts."""
    expected = _validate_full(messages, None, None, tool_choice)

    def refuse(*_: Any) -> None:
        raise AssertionError("the full path ran for a plain chat")

    monkeypatch.setattr(request_mod, "_validate_full", refuse)
    got = validate_chat_request(messages, None, None, tool_choice)
    assert same(got.messages, expected.messages) and got.tool_choice == expected.tool_choice
    assert (got.tools, got.documents) == (None, None)
    # Fresh dicts, as the full path's copy gives: a caller's messages are never handed on.
    assert all(out is not sent for out, sent in zip(got.messages, messages))


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
    """Tool calls and tool results are validated without the full path running, to its result,
    in fresh containers all the way down."""
    expected = _validate_full(messages, None, None, UNSET)
    monkeypatch.setattr(request_mod, "_validate_full", lambda *_: pytest.fail("the full path ran"))
    got = validate_chat_request(messages, None, None, UNSET)
    assert same(got.messages, expected.messages) and got.tool_choice == expected.tool_choice
    # Fresh containers all the way down: nothing of the caller's is handed on to be changed.
    for out, sent in zip(got.messages, messages):
        assert out is not sent
        for call, sent_call in zip(out.get("tool_calls") or [], sent.get("tool_calls") or []):
            assert call is not sent_call and call["function"] is not sent_call["function"]


# --- tokenize's text-only path: what a served request carries ------------------------------------


class Spy:
    """Counts the requests ``render_text_bytes`` answered (not None, no exception)."""

    def __init__(self, model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.served = 0
        inner = model.renderer.render_text_bytes

        def counted(*args: Any, **kwargs: Any) -> Any:
            res = inner(*args, **kwargs)
            self.served += res is not None
            return res

        monkeypatch.setattr(model.renderer, "render_text_bytes", counted)


def both_paths(model: Any, batch: list[dict[str, Any]], requested: list[str] = ALL_OUTPUTS) -> tuple[list, list]:
    """One batch through the adapter as it is, then through the full path alone."""
    fast = [summary(r) for r in model.execute([tokenize_request(t, requested) for t in batch])]
    with full_path_only(model):
        full = [summary(r) for r in model.execute([tokenize_request(t, requested) for t in batch])]
    return fast, full


@pytest.mark.parametrize("context", list(TOKENIZE_CONTEXTS))
def test_rendered_prompt_is_the_prompt_as_sent(env: Env, context: str, monkeypatch):
    """The text-only path echoes the prompt's bytes as ``rendered_prompt``, unnormalised."""
    tokenize = env.tokenize[context]
    spy = Spy(tokenize, monkeypatch)
    text = "e\u0301 🦩 and\r\n a\u00a0nbsp".encode()
    (response,) = tokenize.execute([tokenize_request(prompt(text), ["rendered_prompt", "input_ids"])])
    assert spy.served == 1
    assert summary(response)["rendered_prompt"][2] == [[text]]


@pytest.mark.parametrize("context", list(TOKENIZE_CONTEXTS))
def test_a_mixed_batch_keeps_each_answer_in_its_place(env: Env, context: str, monkeypatch):
    """A batch mixing requests the path serves and requests it leaves gets each request's own
    answer, the one it would get alone."""
    tokenize = env.tokenize[context]
    spy = Spy(tokenize, monkeypatch)
    batch = [
        prompt("Hello"),
        {"prompt_token_ids": np.array([[5, 6]], dtype=np.int32)},
        prompt(b"\xff"),
        prompt("word " * 12, True),
        {**prompt("Hi"), "cache_salt": np.array([[b"s"]], dtype=np.object_)},
        prompt("\x16"),
        prompt("last one"),
    ]
    fast, full = both_paths(tokenize, batch)
    assert fast == full
    alone = [both_paths(tokenize, [t])[1][0] for t in batch]
    assert fast == alone
    assert spy.served >= 2


@pytest.mark.parametrize("context", list(TOKENIZE_CONTEXTS))
def test_a_bug_on_the_path_is_that_requests_internal_error_alone(env: Env, context: str, monkeypatch):
    """A non-``RenderError`` is not a bad request to retry on the full path: it answers its own
    request as an internal error naming the stage, and the batch's other requests are answered."""
    tokenize = env.tokenize[context]
    inner = tokenize.renderer.render_text_bytes

    def broken(raw: bytes, p: Any) -> Any:
        if raw == b"boom":
            raise RuntimeError("a bug")
        return inner(raw, p)

    monkeypatch.setattr(tokenize.renderer, "render_text_bytes", broken)
    responses = tokenize.execute([tokenize_request(prompt(t), ALL_OUTPUTS) for t in ("Hello", "boom", "Hi")])
    bad = summary(responses[1])
    assert bad[:2] == ("error", ft.TritonError.INTERNAL)
    assert bad[2] == "tokenize: internal error: RuntimeError: a bug"
    for r in (responses[0], responses[2]):
        assert not r.has_error()


# --- the text array lane: where it applies -------------------------------------------------------


def test_lane_leaves_other_requests_to_the_full_path(env: Env):
    """Truncation, padding, offsets and token-id prompts take the full path's lists; callers that
    did not ask for arrays keep lists."""
    r = env.array_renderer("smollm2", 8192)
    text = TextPrompt("Hello there")
    for bag in ({"truncate_prompt_tokens": 2}, {"pad_prompt_tokens": 9}, {"return_token_offsets": True}):
        p = r.request_params(bag)
        assert r.render_text_array(text, p, 0.0) is None, bag
        (res,) = r.render_batch([text], [p], ids_as_array=True)
        assert isinstance(res.prompt_token_ids, list), bag
    p = r.default_completion_params
    assert r.render_text_array(TokensPrompt([1, 2]), p, 0.0) is None
    (res,) = r.render_batch([TextPrompt("Hello there")], [p], ids_as_array=True)
    assert isinstance(res.prompt_token_ids, np.ndarray)
    (res,) = r.render_batch([TextPrompt("Hello there")], [p])
    assert isinstance(res.prompt_token_ids, list)  # callers that did not ask keep lists


def test_lane_is_off_on_hugging_face(model_dir):
    """The array lane needs fastokens' flat buffer: a Hugging Face tokenizer never takes it."""
    r = renderer_for(Tokenizer.from_pretrained(model_dir, backend="huggingface"), model_dir, 8192)
    assert r.render_text_array(TextPrompt("Hello"), r.default_completion_params, 0.0) is None
