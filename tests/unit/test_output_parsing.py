"""Which requests' text is parsed, and how the split answer is reported (``renderer/output_parsers/
request.py`` and ``answer.py``): vLLM 0.32's chat-serving rules, held on the recorded corpus of
``tests/fixtures/vllm/output_parsers.json`` (the parsers themselves: ``test_output_parsers.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from renderer.chat.tool_choice import ToolChoicePolicy
from renderer.chat_stage import ChatStage
from renderer.errors import (
    ForcedToolChoiceUnavailableError,
    OutputParsingError,
    ReasoningMarkersError,
    RenderError,
    UnknownReasoningParserError,
)
from renderer.output_parsers.answer import AnswerParser
from renderer.output_parsers.request import OutputParsing, output_parsing_for

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "vllm" / "output_parsers.json").read_text())
SUITES = {s["id"]: s for s in FIXTURE["suites"]}
TOOLS = FIXTURE["tools"]
NAMED = {"type": "function", "function": {"name": "search"}}


@pytest.mark.parametrize(
    ("tools", "tool_choice", "parser", "reads_calls"),
    [
        (TOOLS, "auto", "hermes", True),
        (TOOLS, "required", "hermes", True),
        (TOOLS, NAMED, "hermes", True),
        (TOOLS, "none", "hermes", False),
        (TOOLS, None, "hermes", False),  # an explicit null: vLLM's whole answer carries no calls then
        (None, "none", "hermes", False),
        (TOOLS, "auto", None, False),  # no parser in use (auto tool choice off)
    ],
)
def test_calls_are_read_only_with_tools_a_parser_and_a_choice(tools, tool_choice, parser, reads_calls):
    p = output_parsing_for(parser, None, tools, tool_choice)
    assert (p.tool_call_parser is not None) == reads_calls
    assert p.keep_special_tokens == reads_calls  # hermes: its markers may be special tokens
    assert p.active == reads_calls


def test_special_tokens_are_kept_for_the_parsers_whose_markers_need_them():
    assert output_parsing_for("mistral", None, TOOLS, "auto").keep_special_tokens
    assert not output_parsing_for("llama3_json", None, TOOLS, "auto").keep_special_tokens
    # A reasoning parser alone changes no decoding (vLLM's reasoning parsers adjust nothing).
    assert not output_parsing_for(None, "qwen3", None, "none").keep_special_tokens


def test_reasoning_is_split_on_every_chat_with_a_reasoning_parser():
    p = output_parsing_for(None, "deepseek_r1", None, "none")
    assert p.active and p.reasoning_parser == "deepseek_r1" and p.tool_call_parser is None


@pytest.mark.parametrize(
    "parsing",
    [
        OutputParsing(),
        output_parsing_for("hermes", "qwen3", TOOLS, "auto"),
        output_parsing_for("mistral", None, TOOLS, NAMED),
    ],
)
def test_tensor_round_trip(parsing):
    assert OutputParsing.from_json(parsing.to_json()) == parsing
    assert (parsing.to_json() == "") == (not parsing.active)


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("{", "is not JSON"),
        ("[1]", "must be a JSON object"),
        ('{"tool_call_parser": "nope"}', "names no tool_call_parser this server has: 'nope'"),
        ('{"reasoning_parser": "nope"}', "names no reasoning_parser this server has: 'nope'"),
    ],
)
def test_a_malformed_output_parsing_tensor_is_refused_by_name(text, detail):
    with pytest.raises(OutputParsingError) as e:
        OutputParsing.from_json(text)
    assert detail in str(e.value) and e.value.parameter == "output_parsing"


@pytest.mark.parametrize(("tool_choice", "described"), [("required", '"required"'), (NAMED, 'function "search"')])
def test_a_forced_tool_choice_is_refused_before_generation(tool_choice, described):
    p = output_parsing_for("hermes", None, TOOLS, tool_choice)
    with pytest.raises(ForcedToolChoiceUnavailableError) as e:
        p.check_servable()
    assert str(e.value).startswith(f"tool_choice={described} is not served: vLLM forces the call")
    assert e.value.parameter == "tool_choice" and isinstance(e.value, RenderError)
    output_parsing_for("hermes", None, TOOLS, "auto").check_servable()  # auto is served


def _vocab(suite: dict) -> dict[str, int]:
    return dict(suite["special_ids"])


def _cases(*suites: str):
    return [pytest.param(SUITES[s], c, id=f"{s}:{c['id']}") for s in suites for c in SUITES[s]["cases"]]


@pytest.mark.parametrize(("suite", "case"), _cases("hermes@qwen3", "qwen3+hermes@qwen3", "qwen3@qwen3"))
def test_whole_answer_message_and_finish_reason(suite, case):
    """vLLM's ``ChatMessage`` fields, and "tool_calls" whenever calls were read (whatever ended
    generation: vLLM's full generator says so even after ``length``)."""
    parsing = output_parsing_for(suite["tool_parser"], suite["reasoning_parser"], TOOLS, "auto")
    for ended in ("stop", "length"):
        text, finish = AnswerParser(_vocab(suite)).whole(parsing, case["text"], ended)
        message = json.loads(text)
        want = case["whole"]
        assert message["role"] == "assistant"
        assert message["content"] == want.get("content") and message["reasoning"] == want.get("reasoning")
        calls = [
            {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in message.get("tool_calls", [])
        ]
        assert calls == want.get("tool_calls", [])
        assert all(
            c["id"].startswith("chatcmpl-tool-") and c["type"] == "function" for c in message.get("tool_calls", [])
        )
        assert finish == ("tool_calls" if calls else ended)


def test_nothing_parsed_leaves_the_answer_alone():
    assert AnswerParser({}).whole(OutputParsing(), "<tool_call>x", "stop") == ("", "stop")
    assert AnswerParser({}).stream(OutputParsing(), [1, 2]) is None


@pytest.mark.parametrize(("suite", "case"), _cases("hermes@qwen3", "qwen3+hermes@qwen3"))
def test_streamed_steps_and_finish_reason(suite, case):
    """Every step's delta as vLLM's ``parse_delta``; "null" where vLLM sends no chunk, "{}" on a
    last step with nothing; "tool_calls" at the end only when calls were streamed and generation
    stopped (vLLM's stream generator), the finish reason as it came otherwise."""
    parsing = output_parsing_for(suite["tool_parser"], suite["reasoning_parser"], TOOLS, "auto")
    called = any(d and d.get("tool_calls") for d in case["deltas"])
    for ended in ("stop", "length"):
        stream = AnswerParser(_vocab(suite)).stream(parsing, [])
        chunks = case["chunks"]
        steps = [stream.step(t, ids, ended if i == len(chunks) - 1 else None) for i, (t, ids) in enumerate(chunks)]
        for step, want in zip(steps[:-1], case["deltas"][:-1]):
            got = json.loads(step.delta)
            assert (got is None) == (want is None) and step.finish_reason is None
        last = json.loads(steps[-1].delta)
        assert last is not None  # the last step always sends a chunk
        assert steps[-1].finish_reason == ("tool_calls" if called and ended == "stop" else ended)


def test_a_prompt_that_closed_the_thinking_starts_in_the_answer():
    """vLLM checks the prompt (``is_reasoning_end``): a template that rendered an empty thinking
    block (Qwen3 with ``enable_thinking`` false) leaves nothing to split."""
    suite = SUITES["qwen3@qwen3"]
    ids = _vocab(suite)
    parsing = output_parsing_for(None, "qwen3", None, "none")
    closed = AnswerParser(ids).stream(parsing, [1, ids["<think>"], 2, ids["</think>"], 3])
    assert json.loads(closed.step("Hello", [5], None).delta) == {"content": "Hello"}
    still_open = AnswerParser(ids).stream(parsing, [1, ids["</think>"], ids["<think>"]])
    assert json.loads(still_open.step("Hmm", [5], None).delta) == {"reasoning": "Hmm"}


def test_reasoning_parser_setting_checked_at_start_up_in_vllms_words(model_dir):
    with pytest.raises(UnknownReasoningParserError, match=r"^reasoning_parser_name='nope' has not been registered$"):
        ToolChoicePolicy(reasoning_parser="nope")
    # The default model's vocabulary has no <think>: vLLM refuses to build the parser.
    with pytest.raises(ReasoningMarkersError, match=r"could not locate think start/end tokens in the tokenizer!$"):
        ChatStage.from_model_dir(model_dir, tool_choice_policy=ToolChoicePolicy(reasoning_parser="qwen3"))


def test_chat_stage_reports_the_parsing_of_each_request(model_dir):
    policy = ToolChoicePolicy(enable_auto_tool_choice=True, tool_call_parser="hermes")
    stage = ChatStage.from_model_dir(model_dir, tool_choice_policy=policy)
    hi = json.dumps([{"role": "user", "content": "Hi"}])
    assert stage.render(hi, {"tools": TOOLS}).rendered.output_parsing == output_parsing_for(
        "hermes", None, TOOLS, "auto"
    )
    assert not stage.render(hi, {"tools": TOOLS, "tool_choice": "none"}).rendered.output_parsing.active
    assert not stage.render(hi, None).rendered.output_parsing.active
