"""A chat's messages as the template sees them: parsed and normalised as vLLM does (content
parts joined or kept by content format, media items collected in order, roles and their fields
carried, ``reasoning_content`` renamed ``reasoning``, developer turns made system ones where the
template does not know the role, declared keys first), plain string chats passed through
unchanged, and the request never changed by validation."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from chat_cases import CASES, PNG_DATA_URL
from chat_rules import HI

from renderer.chat import (
    ChatParams,
    ChatRenderer,
    detect_content_format,
    developer_to_system,
    parse_messages,
    validate_chat_request,
)
from renderer.errors import MultiModalPlaceholderError


def _plain_string_chat(msgs: list) -> bool:
    return all(
        set(m) <= {"role", "content"} and isinstance(m["content"], str) and m["role"] != "developer" for m in msgs
    )


PLAIN_STRING_CASES = [c for c in CASES if _plain_string_chat(c["messages"])]


def test_the_corpus_holds_plain_string_chats():
    # The next test checks only the corpus's plain-string chats: it must have some to check.
    assert len(PLAIN_STRING_CASES) >= 5, [c["id"] for c in PLAIN_STRING_CASES]


@pytest.mark.parametrize("case", PLAIN_STRING_CASES, ids=lambda c: c["id"])
def test_plain_string_chats_are_passed_through_unchanged(case, smol):
    assert smol.render_messages(case["messages"], ChatParams()).conversation == case["messages"]


def test_detected_content_formats(renderers):
    formats = {n: r.render_messages(HI, ChatParams()).content_format for n, r in renderers.items()}
    assert formats == {"smollm2": "string", "qwen3": "string", "mistral": "openai"}
    assert detect_content_format("{% for m in messages %}{% for p in m.content %}{% endfor %}{% endfor %}") == "openai"
    assert (
        detect_content_format(
            "{% set msgs = messages[1:] %}{% for m in msgs %}{% for p in m['content'] | list %}{% endfor %}{% endfor %}"
        )
        == "openai"
    )
    assert detect_content_format("{% for m in messages %}{{ m.content }}{% endfor %}") == "string"
    assert detect_content_format("{% for x in content %}{% endfor %}") == "string"
    assert detect_content_format("{% bad syntax") == "string"


def test_forced_openai_format_keeps_parts(smol):
    template = "{% for m in messages %}{{ m.content | tojson }}{% endfor %}"
    msgs = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
                {"type": "image_url", "image_url": {"url": PNG_DATA_URL}, "uuid": "u1"},
            ],
        }
    ]
    out = smol.render_messages(msgs, ChatParams(chat_template=template, chat_template_content_format="openai"))
    assert json.loads(out.prompt) == [
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
        {"type": "image"},
    ]


def _parse(msgs, fmt="string", **kw):
    """Validate (vLLM's request models) then parse, as the renderer does."""
    return parse_messages(validate_chat_request(msgs).messages, fmt, **kw)


def test_mm_items_collected_in_order():
    msgs = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": PNG_DATA_URL}, "uuid": "a"},
                {"type": "text", "text": "x"},
                {"image_embeds": "QUJD"},
            ],
        },
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": None}, "uuid": "7"}]},
    ]
    parsed = _parse(msgs)
    got = [(i.modality, i.source, i.data, i.uuid, i.message_index, i.part_index) for i in parsed.mm_items]
    assert got == [
        ("image", "image_url", PNG_DATA_URL, "a", 0, 0),
        ("image", "image_embeds", "QUJD", None, 0, 2),
        ("image", "image_url", None, "7", 2, 0),
    ]
    assert parsed.conversation[0]["content"] == "x"


def test_string_format_image_placeholder():
    part = {"type": "image_url", "image_url": {"url": PNG_DATA_URL}}
    msgs = [{"role": "user", "content": [part, {"type": "text", "text": "what?"}, part]}]
    assert _parse(msgs, image_placeholder="<image>").conversation[0]["content"] == "<image>\n<image>\nwhat?"
    msgs = [{"role": "user", "content": [part, {"type": "text", "text": "<image> then"}]}]
    assert _parse(msgs, image_placeholder="<image>").conversation[0]["content"] == "<image> then"
    msgs = [{"role": "user", "content": [part, {"type": "text", "text": "<image><image>"}]}]
    with pytest.raises(MultiModalPlaceholderError) as e:
        _parse(msgs, image_placeholder="<image>")
    assert str(e.value) == (
        "Found more '<image>' placeholders in input prompt than actual multimodal data items. (parameter=messages)"
    )


def test_role_fields_carried():
    tool = {"type": "function", "function": {"name": "f"}}
    msgs = [
        {"role": "developer", "content": "d", "tools": [tool]},
        {"role": "assistant", "content": "a", "reasoning": "r", "name": "bot"},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [{"type": "text", "text": "1"}, {"type": "text", "text": "2"}],
        },
        {"role": "user", "content": "u", "task": "t", "name": "ann"},
        {"role": "assistant", "content": None},
    ]
    conv = _parse(msgs, "openai").conversation
    assert conv[0] == {
        "role": "developer",
        "content": [{"type": "text", "text": "d"}],
        "tools": [{"function": {"name": "f"}, "type": "function"}],
    }
    assert conv[1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "a"}],
        "reasoning": "r",
        "reasoning_content": "r",
        "name": "bot",
    }
    assert conv[2] == {"role": "tool", "content": "1\n2", "tool_call_id": "c1"}
    assert conv[3] == {"role": "user", "content": [{"type": "text", "text": "u"}], "name": "ann", "task": "t"}
    assert conv[4] == {"role": "assistant", "content": []}
    assert _parse(msgs).conversation[4] == {"role": "assistant", "content": ""}


def test_any_role_renders(smol):
    """vLLM's catch-all message type takes any role string."""
    out = smol.render_messages(
        [{"role": "robot", "content": "beep"}],
        ChatParams(chat_template="{{ messages[0].role }}:{{ messages[0].content }}"),
    )
    assert out.prompt == "robot:beep"


def test_text_parts_vllm_reads(smol):
    """Typed parts vLLM's own part types take (string parts and input_text fail OpenAI's lazily
    validated list, see the fixture), their unknown keys kept in "openai" format."""
    template = "{% for m in messages %}{{ m.content | tojson }}{% endfor %}"
    msgs = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "a", "cache_control": {"x": 1}},
                {"type": "refusal", "refusal": "r"},
                {"type": "thinking", "thinking": "t"},
            ],
        }
    ]
    out = smol.render_messages(msgs, ChatParams(chat_template=template, chat_template_content_format="openai"))
    assert json.loads(out.prompt) == [
        {"type": "text", "text": "a", "cache_control": {"x": 1}},
        {"type": "text", "text": "r"},
        {"type": "text", "text": "t"},
    ]
    assert _parse(msgs).conversation[0]["content"] == "a\nr\nt"


ROOT = Path(__file__).resolve().parents[2]


VLLM_FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "vllm" / "chat.json").read_text())


ECHO = "{% for m in messages %}{{ m | tojson }}\n{% endfor %}"


def render_chat(renderer: ChatRenderer, messages, params: dict | None = None, **kw):
    return renderer.render_messages(copy.deepcopy(messages), ChatParams.from_request({**(params or {}), **kw}))


def test_reasoning_content_is_renamed_reasoning(trusted):
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "r"}]
    out = render_chat(trusted, msgs, chat_template=ECHO)
    assert out.conversation[1] == {"role": "assistant", "content": "a", "reasoning": "r", "reasoning_content": "r"}
    # reasoning wins when both are set; a null reasoning_content is no reasoning
    msgs[1]["reasoning"] = "kept"
    assert render_chat(trusted, msgs, chat_template=ECHO).conversation[1]["reasoning"] == "kept"
    msgs[1] = {"role": "assistant", "content": "a", "reasoning_content": None}
    assert "reasoning" not in render_chat(trusted, msgs, chat_template=ECHO).conversation[1]


def test_reasoning_only_on_assistant_messages(trusted):
    out = render_chat(trusted, [{"role": "user", "content": "q", "reasoning_content": "r"}], chat_template=ECHO)
    assert out.conversation == [{"role": "user", "content": "q"}]


def test_qwen3_history_shows_its_reasoning(vllm_renderers):
    qwen = vllm_renderers["qwen3", False]
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "because"}]
    assert "<think>\nbecause\n</think>\n\na" in render_chat(qwen, msgs, add_generation_prompt=False).prompt


def test_messages_keep_declared_keys_first_then_extras():
    [msg] = validate_chat_request([{"extra": [1], "name": "ann", "role": "user", "content": "hi"}]).messages
    assert list(msg) == ["content", "role", "name", "extra"]


def test_validation_does_not_touch_the_request():
    msgs = [
        {
            "role": "assistant",
            "content": "a",
            "reasoning_content": "r",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        }
    ]
    before = copy.deepcopy(msgs)
    validate_chat_request(msgs)
    assert msgs == before


def test_developer_becomes_system_and_systems_merge():
    conv = [
        {"role": "user", "content": "u"},
        {"role": "system", "content": "s"},
        {"role": "developer", "content": "d", "tools": [{"x": 1}]},
        {"role": "system", "content": ""},
    ]
    assert developer_to_system(conv, "{{ messages }}") == [
        {"role": "system", "content": "s\n\nd"},
        {"role": "user", "content": "u"},
    ]
    # a template that names the role gets the messages unchanged
    assert developer_to_system(conv, "{% if m.role == 'developer' %}{% endif %}") is conv
    # without developer messages nothing merges, even scattered system messages
    plain = [{"role": "user", "content": "u"}, {"role": "system", "content": "s"}]
    assert developer_to_system(plain, "{{ messages }}") is plain


def test_developer_parts_merge_as_text():
    conv = parse_messages(
        validate_chat_request(
            [
                {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "user", "content": "u"},
            ]
        ).messages,
        "openai",
    ).conversation
    # a lone system message first stays as it is, parts and all
    assert developer_to_system(conv, "")[0] == {"role": "system", "content": conv[0]["content"]}
    merged = developer_to_system([*conv, {"role": "system", "content": [{"type": "text", "text": "c"}]}], "")
    assert merged[0] == {"role": "system", "content": "a\nb\n\nc"}


def test_developer_on_a_real_template(vllm_renderers):
    mistral = vllm_renderers["mistral", False]
    # Mistral's template refuses a leading developer message; vLLM hands it a system message.
    out = render_chat(mistral, [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert out.conversation[0] == {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}
    assert "Be brief." in out.prompt
