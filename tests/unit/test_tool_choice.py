"""``tool_choice`` as vLLM 0.32 takes it by default: defaulted and validated by its request model,
then refused by its online renderer without a tool-call parser (messages recorded from vLLM's
``ChatCompletionRequest`` and ``OnlineRenderer.render_chat`` in the peer environment)."""

from __future__ import annotations

import pytest

from launcher.repository import template_vars
from launcher.settings import Settings
from renderer.chat import ChatParams
from renderer.chat.tool_choice import UNSET, ToolChoicePolicy, effective_tool_choice
from renderer.chat_stage import ChatStage
from renderer.errors import (
    AutoToolChoiceDisabledError,
    AutoToolChoiceWithoutParserError,
    EmptyToolsError,
    InvalidToolChoiceError,
    RenderError,
    ToolChoiceWithoutToolsError,
    ToolParserRequiredError,
    UnknownToolChoiceError,
    UnknownToolParserError,
    parameter_of,
)

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
HI = '[{"role": "user", "content": "hi"}]'

AUTO_MESSAGE = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
# vLLM's answers, by default (no --enable-auto-tool-choice, no --tool-call-parser).
REFUSED_BY_DEFAULT = [
    ({"tools": TOOLS}, AutoToolChoiceDisabledError, AUTO_MESSAGE),
    ({"tools": TOOLS, "tool_choice": "auto"}, AutoToolChoiceDisabledError, AUTO_MESSAGE),
    (
        {"tools": TOOLS, "tool_choice": "required"},
        ToolParserRequiredError,
        'tool_choice="required" requires --tool-call-parser to be set',
    ),
    (
        {"tools": TOOLS, "tool_choice": NAMED},
        ToolParserRequiredError,
        'tool_choice=function "get_weather" requires --tool-call-parser to be set',
    ),
]
# vLLM's request model, whatever the server's settings.
REFUSED_BY_REQUEST_MODEL = [
    (
        {"tool_choice": "auto"},
        ToolChoiceWithoutToolsError,
        "When using `tool_choice`, `tools` must be set. (parameter=tool_choice)",
    ),
    (
        {"tools": TOOLS, "tool_choice": "sometimes"},
        InvalidToolChoiceError,
        'Invalid value for `tool_choice`: sometimes! Only named tools, "none", "auto" or "required" are '
        "supported. (parameter=tool_choice)",
    ),
    (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "x"}}},
        UnknownToolChoiceError,
        "The tool specified in `tool_choice` does not match any of the specified `tools` (parameter=tool_choice)",
    ),
    (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": "f"}},
        InvalidToolChoiceError,
        'Invalid value for `function`: `f` in `tool_choice`! Correct usage: `{"type": "function", "function": '
        '{"name": "my_function"}}` (parameter=tool_choice.function)',
    ),
    (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {}}},
        InvalidToolChoiceError,
        'Expected field `name` in `function` in `tool_choice`! Correct usage: `{"type": "function", "function": '
        '{"name": "my_function"}}` (parameter=tool_choice.function.name)',
    ),
    (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": ""}}},
        InvalidToolChoiceError,
        'Invalid `name` in `function`: `` in `tool_choice`! Correct usage: `{"type": "function", "function": '
        '{"name": "my_function"}}` (parameter=tool_choice.function.name)',
    ),
]
# vLLM renders these by default.
RENDERED_BY_DEFAULT = [
    {"tools": TOOLS, "tool_choice": "none"},
    {"tools": TOOLS, "tool_choice": None},
    {"tool_choice": "none"},
    {"tool_choice": None},
    {},
]


@pytest.fixture(scope="module")
def default_stage(model_dir) -> ChatStage:
    return ChatStage.from_model_dir(model_dir)


@pytest.fixture(scope="module")
def parsing_stage(model_dir) -> ChatStage:
    policy = ToolChoicePolicy(enable_auto_tool_choice=True, tool_call_parser="hermes")
    return ChatStage.from_model_dir(model_dir, tool_choice_policy=policy)


@pytest.mark.parametrize(("bag", "error", "message"), REFUSED_BY_DEFAULT)
def test_refused_by_default_in_vllm_words(default_stage, bag, error, message):
    with pytest.raises(error) as e:
        default_stage.render(HI, bag)
    assert str(e.value) == message
    # vLLM's online renderer answers param null: nothing in the message, the type still says it.
    assert parameter_of(str(e.value)) is None and e.value.parameter == "tool_choice"
    assert isinstance(e.value, RenderError)


@pytest.mark.parametrize(("bag", "error", "message"), REFUSED_BY_REQUEST_MODEL)
@pytest.mark.parametrize("stage_name", ["default_stage", "parsing_stage"])
def test_request_model_refusals(request, stage_name, bag, error, message):
    stage = request.getfixturevalue(stage_name)
    with pytest.raises(error) as e:
        stage.render(HI, bag)
    assert str(e.value) == message
    assert e.value.parameter.startswith("tool_choice")


@pytest.mark.parametrize("bag", RENDERED_BY_DEFAULT)
def test_rendered_by_default(default_stage, bag):
    assert default_stage.render(HI, bag).rendered.prompt


@pytest.mark.parametrize("bag", [b for b, _, _ in REFUSED_BY_DEFAULT] + RENDERED_BY_DEFAULT)
def test_rendered_with_a_parser(parsing_stage, default_stage, bag):
    """With auto tool choice and a parser, every choice renders, the tools as the template sees
    them (the same prompt as "none" gives)."""
    prompt = parsing_stage.render(HI, bag).rendered.prompt
    assert prompt == default_stage.render(HI, {**bag, "tool_choice": "none"}).rendered.prompt


def test_parser_without_auto_tool_choice_is_not_used(model_dir):
    """vLLM builds the parser only with --enable-auto-tool-choice: "required" is still refused."""
    stage = ChatStage.from_model_dir(model_dir, tool_choice_policy=ToolChoicePolicy(tool_call_parser="hermes"))
    with pytest.raises(ToolParserRequiredError):
        stage.render(HI, {"tools": TOOLS, "tool_choice": "required"})


def test_empty_tools_refused_before_tool_choice(default_stage):
    with pytest.raises(EmptyToolsError):
        default_stage.render(HI, {"tools": [], "tool_choice": "auto"})


def test_bad_tools_reported_before_the_parser_refusal(default_stage):
    with pytest.raises(RenderError, match="validation error"):
        default_stage.render(HI, {"tools": [{"type": "custom", "function": {"name": "f"}}]})


def test_library_renderer_does_not_check(model_dir):
    """vLLM's in-process renderer renders tools whatever the choice; so does ``ChatRenderer``."""
    from renderer.chat import ChatRenderer

    chat = ChatRenderer.from_model_dir(model_dir)
    chat.render_messages([{"role": "user", "content": "hi"}], ChatParams.from_request({"tools": TOOLS}))


def test_effective_tool_choice_defaults():
    assert effective_tool_choice(TOOLS, UNSET) == "auto"
    assert effective_tool_choice(None, UNSET) == "none"
    assert effective_tool_choice(None, None) is None
    assert effective_tool_choice(TOOLS, NAMED) == NAMED
    assert ChatParams.from_request({"tool_choice": None}).tool_choice is None
    assert ChatParams.from_request({}).tool_choice is UNSET


def test_policy_checked_at_start_up_as_vllm_checks_its_arguments():
    with pytest.raises(
        AutoToolChoiceWithoutParserError, match=r"^Error: --enable-auto-tool-choice requires --tool-call-parser$"
    ):
        ToolChoicePolicy(enable_auto_tool_choice=True)
    with pytest.raises(UnknownToolParserError, match=r"^invalid tool call parser: nope \(chose from \{ hermes,"):
        ToolChoicePolicy(enable_auto_tool_choice=True, tool_call_parser="nope")
    assert ToolChoicePolicy(tool_call_parser="nope").parser is None  # unused, as in vLLM


def test_settings_reach_chat_render(monkeypatch):
    monkeypatch.setenv("ENABLE_AUTO_TOOL_CHOICE", "true")
    monkeypatch.setenv("TOOL_CALL_PARSER", "hermes")
    s = Settings.from_env()
    v = template_vars(s)
    policy = ToolChoicePolicy.from_config(
        {"enable_auto_tool_choice": v["enable_auto_tool_choice"], "tool_call_parser": v["tool_call_parser"]}
    )
    assert policy.parser == "hermes"
    assert ToolChoicePolicy.from_config({}) == ToolChoicePolicy()


def test_named_choice_validated_by_vllm_models(default_stage):
    """A named choice of the wrong shape fails pydantic as vLLM's request model does: each union
    member's error, the named member located without its class (vLLM's wrapper segment dropped)."""
    with pytest.raises(RenderError) as e:
        default_stage.render(
            HI, {"tools": TOOLS, "tool_choice": {"type": "bogus", "function": {"name": "get_weather"}}}
        )
    lines = str(e.value).splitlines()
    assert lines[0] == "4 validation errors:"
    assert lines[4] == (
        "  {'type': 'literal_error', 'loc': 'body.tool_choice.type', 'msg': \"Input should be 'function'\", "
        "'input': 'bogus', 'ctx': {'expected': \"'function'\"}}"
    )
