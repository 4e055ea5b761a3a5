"""The plain-chat lane (renderer/chat/plain_lane.py) against the full render path.

A warmed ``ChatRenderer`` renders a chat sent with no ``chat_params`` through the lane when every
message is plain. These tests hold what the lane returns to what ``render_messages`` returns for
the same chat on the full path (the same parameters as a different object, which the lane never
takes): the same prompt, conversation (types and key order), media items, content format and
output parsing, on every recorded chat and on generated chats near the lane's boundary, for the
default model and for templates that read more. They also check the lane is taken where it should
be, so it cannot silently stop applying, and that it is off where its start-up run says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from validation_oracle import CORPUS, same

from renderer.chat import ChatParams
from renderer.chat.params import DEFAULT_PARAMS
from renderer.chat.plain_lane import plain_conversation
from renderer.chat.renderer import ChatRenderer, RenderedChat
from renderer.chat.template import ChatTemplateSource
from renderer.chat.tool_choice import UNSET, ToolChoicePolicy
from renderer.chat_stage import ChatStage
from renderer.errors import RenderError

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "build" / "models" / "smollm2-135m-instruct"

# Templates the lane may serve (a role check that raises, names read) and one it must not
# (it reads content as parts: the "openai" content format).
STRICT_ROLES = (
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


@pytest.fixture(scope="module")
def default_renderer() -> ChatRenderer:
    return _warm(tool_choice_policy=ToolChoicePolicy())


def _full(renderer: ChatRenderer, messages: Any) -> Any:
    """The full path's outcome: ``ChatParams()`` equals the defaults but is not the lane's object."""
    try:
        return renderer.render_messages(messages, ChatParams())
    except RenderError as e:
        return ("raised", type(e).__name__, str(e))


def _lane(renderer: ChatRenderer, messages: Any) -> RenderedChat | None:
    """What the lane answers, or None where it leaves the chat to the full path."""
    lane = renderer._plain_lane
    assert lane is not None
    served = lane.render(messages)
    return None if served is None else RenderedChat(served[0], served[1], (), "string", lane.output_parsing)


def _assert_same(renderer: ChatRenderer, messages: Any) -> bool:
    """Whether the lane took the chat; where it did, its answer is exactly the full path's, and
    ``render_messages`` under the default parameters answers the same as the full path."""
    mine = _lane(renderer, messages)
    full = _full(renderer, messages)
    if mine is not None:
        assert isinstance(full, RenderedChat), f"lane rendered what the full path refuses: {full}"
        assert mine.prompt == full.prompt
        assert same(mine.conversation, full.conversation)
        assert (mine.mm_items, mine.content_format, mine.output_parsing) == (
            full.mm_items,
            full.content_format,
            full.output_parsing,
        )
    try:
        dispatched = renderer.render_messages(messages, DEFAULT_PARAMS)
    except RenderError as e:
        dispatched = ("raised", type(e).__name__, str(e))
    assert (dispatched.prompt if isinstance(dispatched, RenderedChat) else dispatched) == (
        full.prompt if isinstance(full, RenderedChat) else full
    )
    return mine is not None


def test_same_as_the_full_path_on_the_whole_corpus(default_renderer):
    taken = [
        name
        for name, (messages, tools, documents, tool_choice) in CORPUS
        if tools is None and documents is None and tool_choice is UNSET and _assert_same(default_renderer, messages)
    ]
    # The benchmark's plain chats all take it, and many of vLLM's recorded ones.
    assert {f"short:{i}" for i in range(64)} <= set(taken)
    assert {f"chat_multiturn:{i}" for i in range(64)} <= set(taken)
    assert sum(name.startswith("vllm:") for name in taken) >= 20, len(taken)
    assert not any(name.startswith("chat_tools:") for name in taken)


_ROLES = st.sampled_from(["system", "user", "assistant", "developer", "tool", "function", "narrator"])
# Any code point, surrogates included (JSON can carry a lone one; minijinja must not see it).
_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=16)
_VALUE = (
    st.none()
    | st.integers(-3, 3)
    | _TEXT
    | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT}), max_size=2)
)


@st.composite
def _near_plain_chats(draw: st.DrawFn) -> Any:
    """Mostly plain messages, each maybe bent: another role, a non-string value, a name, an extra
    key, the billing header, a lone surrogate; sometimes not a list of dicts at all."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.none() | st.just([]) | st.just({}) | _TEXT)
    chat: list[Any] = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 29)) == 0:
            chat.append(draw(_TEXT | st.none()))
            continue
        message: dict[str, Any] = {"role": draw(_ROLES), "content": draw(_TEXT)}
        bend = draw(st.integers(0, 9))
        if bend == 1:
            message["content"] = draw(_VALUE)
        elif bend == 2:
            message["role"] = draw(_VALUE)
        elif bend == 3:
            message[draw(st.sampled_from(["tool_calls", "tool_call_id", "extra", "reasoning"]))] = draw(_VALUE)
        elif bend == 4:
            message["content"] = "x-anthropic-billing-header" + draw(_TEXT)
        elif bend == 5:
            del message[draw(st.sampled_from(["role", "content"]))]
        if draw(st.booleans()):
            message["name"] = draw(_TEXT) if draw(st.integers(0, 3)) else draw(_VALUE)
        if draw(st.integers(0, 5)) == 0:  # keys in another order
            message = dict(reversed(list(message.items())))
        chat.append(message)
    return chat


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chat=_near_plain_chats(), which=st.sampled_from(["default", "strict"]))
def test_generated_chats_near_the_boundary_match_the_full_path(default_renderer, chat, which):
    renderer = default_renderer if which == "default" else _STRICT
    _assert_same(renderer, chat)


_STRICT = _warm(STRICT_ROLES)


def test_the_lane_is_taken_with_names_and_on_a_template_that_reads_them():
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi", "name": "ana"}]
    assert _assert_same(_STRICT, chat)
    assert "user (ana): Hi" in _STRICT.render_messages(chat, DEFAULT_PARAMS).prompt


def test_the_lane_is_off_where_the_full_path_would_not_render_on_minijinja():
    # The Jinja engine by setting; a template reading content as parts ("openai" format).
    assert _warm(template_engine="jinja2")._plain_lane is None
    assert _warm(OPENAI_PARTS)._plain_lane is None
    # Before warmup nothing is built: every chat takes the full path.
    assert ChatRenderer.from_model_dir(DEFAULT_MODEL)._plain_lane is None


def test_a_bag_sent_takes_the_full_path_with_the_same_result(default_renderer):
    stage = ChatStage(default_renderer, None)
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
    assert plain_conversation(messages) is None
