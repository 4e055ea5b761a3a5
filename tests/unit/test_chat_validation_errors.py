"""Chats refused with a named 400 and vLLM's words: bad messages, bad ``chat_params``, tools and
documents refused as vLLM refuses them, ``continue_final_message`` misuse, and input nested past
the limits on every field (never a 500, a crash or a recursion error), on the default path and
for in-process callers alike."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from chat_cases import PNG_DATA_URL
from chat_rules import BAD_MESSAGES, BAD_PARAMS, HI

from renderer.chat import ChatParams, ChatRenderer, validate_chat_request
from renderer.errors import (
    ChatRequestValidationError,
    ContentPartError,
    ContinueFinalMessageError,
    EmptyToolsError,
    GenerationPromptConflictError,
    InvalidMessagesError,
    InvalidParamsError,
    ParamsNestingError,
    RenderError,
    RequestNestingError,
    ToolCallError,
)
from renderer.json_fields import MAX_NESTING_DEPTH, json_text_depth, nesting_depth, parse_json
from renderer.params import TokenizeParams


@pytest.mark.parametrize("messages,error,message", BAD_MESSAGES, ids=[m.split("\n")[0] for _, _, m in BAD_MESSAGES])
def test_message_validation_errors(messages, error, message, smol):
    with pytest.raises(error) as e:
        smol.render_messages(messages, ChatParams())
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("bag,error,message", BAD_PARAMS, ids=[m for _, _, m in BAD_PARAMS])
def test_chat_params_errors(bag, error, message):
    with pytest.raises(error) as e:
        ChatParams.from_request(bag)
    parameter = e.value.parameter
    if parameter is None:  # vLLM's pydantic validators name none (the two-field conflicts)
        assert isinstance(e.value, GenerationPromptConflictError) and str(e.value) == message
    else:  # the message, then the field it is about in vLLM's form: the parameter crosses Triton in it
        assert str(e.value) == f"{message} (parameter={parameter})"
        assert parameter in (bag if isinstance(bag, dict) else {}) or parameter == "chat_params"
    assert isinstance(e.value, InvalidParamsError)


# chat_params fields vLLM's request model validates with the messages: refused when rendered.
BAD_RENDER_PARAMS = [
    (
        {"documents": {"a": 1}},
        "1 validation error:\n  {'type': 'list_type', 'loc': 'body.documents', "
        "'msg': 'Input should be a valid list', 'input': '<dict of 1 items>'}",
    ),
    (
        {"tools": {}},
        "1 validation error:\n  {'type': 'list_type', 'loc': 'body.tools', "
        "'msg': 'Input should be a valid list', 'input': '<dict of 0 items>'}",
    ),
    (
        {"tools": [1]},
        "1 validation error:\n  {'type': 'model_attributes_type', 'loc': 'body.tools.0', "
        "'msg': 'Input should be a valid dictionary or object to extract fields from', 'input': '1'}",
    ),
    (
        {"tools": [{"type": "custom", "function": {"name": "f"}}]},
        "1 validation error:\n  {'type': 'literal_error', "
        "'loc': 'body.tools.0.type', 'msg': \"Input should be 'function'\", 'input': 'custom', "
        "'ctx': {'expected': \"'function'\"}}",
    ),
    (
        {"tools": [{"function": {"name": 1}}]},
        "1 validation error:\n  {'type': 'string_type', "
        "'loc': 'body.tools.0.function.name', 'msg': 'Input should be a valid string', 'input': '1'}",
    ),
]


@pytest.mark.parametrize("bag,message", BAD_RENDER_PARAMS, ids=[m.split("\n")[1][:60] for _, m in BAD_RENDER_PARAMS])
def test_tools_and_documents_refused_when_rendered(bag, message, smol):
    params = ChatParams.from_request(bag)
    with pytest.raises(ChatRequestValidationError) as e:
        smol.render_messages(HI, params)
    assert str(e.value) == message


def test_continue_final_message_errors(smol):
    prefill = dict(add_generation_prompt=False, continue_final_message=True)
    with pytest.raises(ContinueFinalMessageError) as e:
        smol.render_messages(HI, ChatParams(chat_template="{{ 'nothing' }}{# content #}", **prefill))
    assert str(e.value).startswith("continue_final_message is set but the final message does not appear in the chat")
    msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG_DATA_URL}}]}]
    with pytest.raises(ContinueFinalMessageError) as e:
        smol.render_messages(
            msgs,
            ChatParams(chat_template="{{ messages[0].content }}", chat_template_content_format="openai", **prefill),
        )
    assert (
        str(e.value) == "continue_final_message is set but we could not find any text to continue in the final message!"
    )


ROOT = Path(__file__).resolve().parents[2]


VLLM_FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "vllm" / "chat.json").read_text())


ECHO = "{% for m in messages %}{{ m | tojson }}\n{% endfor %}"


def render_chat(renderer: ChatRenderer, messages, params: dict | None = None, **kw):
    return renderer.render_messages(copy.deepcopy(messages), ChatParams.from_request({**(params or {}), **kw}))


@pytest.mark.parametrize(
    "messages, error, start",
    [
        (
            [{"role": "user", "content": None}],
            ChatRequestValidationError,
            "19 validation errors:\n  {'type': 'string_type', "
            "'loc': 'body.messages.0.ChatCompletionDeveloperMessageParam.content'",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}],
                },
            ],
            ChatRequestValidationError,
            "3 validation errors:\n  {'type': 'string_type', "
            "'loc': 'body.0.ChatCompletionMessageFunctionToolCallParam.function', 'msg': 'Input should be a valid string', "
            "'input': '<dict of 1 items>'}",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": 5}]}],
            ChatRequestValidationError,
            "7 validation errors for ValidatorIterator\n0.ChatCompletionContentPartTextParam.text\n"
            "  Input should be a valid string [type=string_type, input_value=5, input_type=int]",
        ),
        ([{"role": "assistant", "tool_calls": 5}], ChatRequestValidationError, "'int' object is not iterable"),
        ([{"author": {"role": "user"}}], ChatRequestValidationError, "'Message' object is not subscriptable"),
        (
            "not a list",
            ChatRequestValidationError,
            "1 validation error:\n  {'type': 'list_type', 'loc': 'body.messages'",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": "x", "uuid": "u"}]}],
            ContentPartError,
            "Missing 'type' field in multimodal part. (parameter=type)",
        ),
        (
            [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "f", "input": "x"}}],
                }
            ],
            ToolCallError,
            "chat completions only support assistant tool_calls of type 'function'. (parameter=tool_calls)",
        ),
        (
            [],
            InvalidMessagesError,
            "Cannot apply chat template to an empty conversation. Provide at least one message.",
        ),
    ],
)
def test_refused_as_vllm_refuses(messages, error, start, trusted):
    with pytest.raises(error) as e:
        trusted.render_messages(messages, ChatParams(chat_template=ECHO))
    assert str(e.value).startswith(start)


@pytest.mark.parametrize(
    "params, error, message",
    [
        (
            {"tools": []},
            EmptyToolsError,
            "`tools` must not be an empty array. Either provide at least one tool or omit "
            "the field entirely. (parameter=tools)",
        ),
        (
            {"tools": [{"function": {"description": "d"}}]},
            ChatRequestValidationError,
            "1 validation error:\n  {'type': 'missing', 'loc': 'body.tools.0.function.name', 'msg': 'Field required', "
            "'input': '<dict of 1 items>'}",
        ),
        (
            {"documents": [{"title": "A", "text": 1}]},
            ChatRequestValidationError,
            "1 validation error:\n  {'type': 'string_type', 'loc': 'body.documents.0.text', 'msg': 'Input should be a valid "
            "string', 'input': '1'}",
        ),
        (
            {"documents": ["plain"]},
            ChatRequestValidationError,
            "1 validation error:\n  {'type': 'dict_type', 'loc': 'body.documents.0', 'msg': 'Input should be a valid "
            "dictionary', 'input': 'plain'}",
        ),
    ],
)
def test_tools_and_documents_validated(params, error, message, trusted):
    with pytest.raises(error) as e:
        render_chat(trusted, HI, params, chat_template=ECHO)
    assert str(e.value) == message


def _nested(depth: int) -> dict:
    value: object = "x"
    for _ in range(depth):
        value = {"a": value}
    return value  # type: ignore[return-value]


@pytest.mark.parametrize(
    "messages, tools",
    [
        (
            [{"role": "user", "content": "hi"}],
            [{"type": "function", "function": {"name": "f", "parameters": _nested(5000)}}],
        ),
        ([{"role": "user", "content": [{"type": "text", "text": "a", "extra": _nested(5000)}]}], None),
    ],
    ids=["tools", "content_part"],
)
def test_input_nested_past_the_recursion_limit_is_a_named_400(messages, tools):
    from renderer.errors import RequestNestingError

    with pytest.raises(RequestNestingError, match=r"(tools|messages\[0\]) is nested more than 1000 levels deep") as e:
        validate_chat_request(messages, tools)
    assert isinstance(e.value, RenderError)


@pytest.mark.parametrize("bag", [[], "", 0, False, ()], ids=repr)
def test_an_empty_bag_that_is_not_an_object_is_still_refused(bag):
    from renderer.chat import ChatParams
    from renderer.errors import FieldTypeError

    with pytest.raises(FieldTypeError) as e:
        ChatParams.from_request(bag)
    assert str(e.value) == (
        f"request.chat_params must be a JSON object, got {type(bag).__name__} {bag!r}. (parameter=chat_params)"
    )


LOWER_HI = [{"role": "user", "content": "hi"}]


LIMIT_MESSAGE = f"is nested more than {MAX_NESTING_DEPTH} levels deep"


def nested(levels: int, leaf: object = "x") -> object:
    """``levels`` objects inside each other around ``leaf``."""
    value = leaf
    for _ in range(levels):
        value = {"a": value}
    return value


def deep_requests(levels: int) -> dict[str, tuple[list, dict | None]]:
    """(messages, chat_params) with one field nested ``levels`` deep inside the request."""
    call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": _dumps(nested(levels))}}
    tool = {"type": "function", "function": {"name": "f", "parameters": nested(levels)}}
    return {
        "tools": (LOWER_HI, {"tools": [tool], "tool_choice": "none"}),  # vLLM refuses its default "auto" by default
        "documents": (LOWER_HI, {"documents": [nested(levels)]}),
        "tool_call_arguments": (
            [*LOWER_HI, {"role": "assistant", "content": "x", "tool_calls": [call]}],
            {"continue_final_message": True, "add_generation_prompt": False},  # deep-copies the chat
        ),
        "chat_template_kwargs_tools": (LOWER_HI, {"chat_template_kwargs": {"tools": [nested(levels)]}}),
        "chat_template_kwargs_documents": (LOWER_HI, {"chat_template_kwargs": {"documents": [nested(levels)]}}),
        "content_part": ([{"role": "user", "content": [{"type": "text", "text": "hi", "x": nested(levels)}]}], None),
        "message_key": ([{"role": "user", "content": "hi", "x": nested(levels)}], None),
    }


DEEP_FIELDS = {
    "tools": (ParamsNestingError, "chat_params.tools"),
    "documents": (ParamsNestingError, "chat_params.documents"),
    "tool_call_arguments": (RequestNestingError, "messages[1].tool_calls[0].function.arguments"),
    "chat_template_kwargs_tools": (ParamsNestingError, "chat_params.chat_template_kwargs"),
    "chat_template_kwargs_documents": (ParamsNestingError, "chat_params.chat_template_kwargs"),
    "content_part": (RequestNestingError, "messages"),
    "message_key": (RequestNestingError, "messages"),
}


@pytest.mark.parametrize("field", list(DEEP_FIELDS))
def test_deep_fields_are_named_400s_on_the_default_path(field, stage):
    """Just past the limit (the issue's case was 600 deep: tools, documents and arguments reached
    copy.deepcopy outside the render guard, a RecursionError and a 500) and 100,000 deep: a named
    error naming the field. ``messages`` as its tensor's text, ``chat_params`` as a parsed bag (the bag's tensor
    has its own check, below)."""
    error, name = DEEP_FIELDS[field]
    for levels in (MAX_NESTING_DEPTH + 1, 100_000):
        messages, bag = deep_requests(levels)[field]
        with pytest.raises(error) as e:
            stage.render(_dumps(messages), bag)
        assert str(e.value).startswith(f"{name} {LIMIT_MESSAGE}")
        if field != "tool_call_arguments" and bag is not None:  # the bag as its tensor: refused by its parse
            with pytest.raises(ParamsNestingError, match=f"^chat_params {LIMIT_MESSAGE}"):
                parse_json(_dumps(bag), "chat_params")


@pytest.mark.parametrize("field", [f for f in DEEP_FIELDS if f != "documents"])  # documents: strings
def test_depth_at_the_limit_renders(field, stage):
    """A depth within the limit renders (vLLM accepts these: its request models take any depth,
    its body parse a body 963 deep), copies and all; the issue's 600 among them."""
    assert MAX_NESTING_DEPTH >= 963  # vLLM 0.32's deepest accepted body (measured with its render app)
    for levels in (600, MAX_NESTING_DEPTH - 10):
        messages, bag = deep_requests(levels)[field]
        assert stage.render(_dumps(messages), bag).rendered.prompt


def test_in_process_callers_get_the_same_limits(stage):

    with pytest.raises(RequestNestingError, match=rf"^tools is nested more than {MAX_NESTING_DEPTH}"):
        validate_chat_request(LOWER_HI, [nested(MAX_NESTING_DEPTH + 1)])
    with pytest.raises(RequestNestingError, match=rf"^documents is nested more than {MAX_NESTING_DEPTH}"):
        validate_chat_request(LOWER_HI, None, [nested(MAX_NESTING_DEPTH + 1)])
    with pytest.raises(RequestNestingError, match=rf"^messages\[0\] is nested more than {MAX_NESTING_DEPTH}"):
        validate_chat_request([{"role": "user", "content": "x", "y": nested(MAX_NESTING_DEPTH)}])
    for field in ("chat_template_kwargs", "media_io_kwargs", "mm_processor_kwargs"):
        with pytest.raises(ParamsNestingError, match=rf"^chat_params\.{field} is nested more than {MAX_NESTING_DEPTH}"):
            ChatParams.from_request({field: nested(MAX_NESTING_DEPTH)})


@pytest.mark.parametrize("name", ["messages", "chat_params", "tokenize_params", "sampling_params"])
def test_json_tensors_refuse_deep_nesting(name):
    """The tensors' own parse: json.loads of 100,000 brackets raises RecursionError; the limit + 1 levels
    parse (past the limit) but are refused before anything walks them recursively."""
    error = RequestNestingError if name == "messages" else ParamsNestingError
    message = f"{name} {LIMIT_MESSAGE}"
    for text in ("[" * 100_000 + "]" * 100_000, '{"a": ' * 100_000 + "1" + "}" * 100_000):
        with pytest.raises(error, match=message):
            parse_json(text, name)
    with pytest.raises(error, match=message):
        parse_json("[" * (MAX_NESTING_DEPTH + 1) + "]" * (MAX_NESTING_DEPTH + 1), name)
    assert parse_json("[" * MAX_NESTING_DEPTH + "]" * MAX_NESTING_DEPTH, name)
    # Brackets inside strings are text, not nesting.
    assert parse_json(json.dumps(["[" * 100_000]), name) == ["[" * 100_000]


def test_completion_params_refuse_deep_nesting():
    # A type error's message repr()s the value: 100,000 deep would be a RecursionError there.
    with pytest.raises(ParamsNestingError, match=f"^tokenize_params {LIMIT_MESSAGE}"):
        TokenizeParams(max_total_tokens=10).with_request({"truncate_prompt_tokens": nested(100_000)}, max_model_len=10)


def test_depth_walks_are_iterative_and_exact():
    assert nesting_depth(nested(100_000), 1000) == 1001
    assert nesting_depth(nested(5), 6) is None and nesting_depth(nested(6), 5) == 6
    assert nesting_depth([[], [[[]]]], 3) == 4 and nesting_depth([[], [[[]]]], 4) is None
    assert json_text_depth("[" * 10 + '"]]]]"' + "]" * 10, 10) is None
    assert json_text_depth('{"a": "\\"[[[["}', 1) is None
    assert json_text_depth("[[[", 2) == 3


def _dumps(value: object) -> str:
    # json.dumps recurses: deeper than its limit, build the text by hand.
    return json.dumps(value) if nesting_depth(value, 200) is None else _dumps_deep(value)


def _dumps_deep(value: object) -> str:
    out: list[str] = []
    stack: list[object] = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, _Raw):
            out.append(v.text)
        elif isinstance(v, dict):
            stack.append(_Raw("}"))
            for i, (k, x) in reversed(list(enumerate(v.items()))):
                stack.append(x)
                stack.append(_Raw(("," if i else "") + json.dumps(k) + ":"))
            stack.append(_Raw("{"))
        elif isinstance(v, list):
            stack.append(_Raw("]"))
            for i, x in reversed(list(enumerate(v))):
                stack.append(x)
                if i:
                    stack.append(_Raw(","))
            stack.append(_Raw("["))
        else:
            out.append(json.dumps(v))
    return "".join(out)


class _Raw:
    def __init__(self, text: str) -> None:
        self.text = text
