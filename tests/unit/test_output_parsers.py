"""The output parsers held to vLLM 0.32's own (``tests/fixtures/record_vllm_parsers.py`` recorded
them, whole and streamed token by token, in ``tests/fixtures/vllm/output_parsers.json``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from renderer.output_parsers import Delta, output_parser
from renderer.output_parsers.partial_json import MalformedJSONError, loads_prefix
from renderer.output_parsers.text import is_json

FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "output_parsers.json").read_text())
CASES = [(suite, case) for suite in FIXTURE["suites"] for case in suite["cases"]]
IDS = [f"{suite['id']}:{case['id']}" for suite, case in CASES]


def _parser(suite: dict):
    return output_parser(suite["tool_parser"], suite["reasoning_parser"], suite["special_ids"])


def _as_recorded(delta: Delta | None) -> dict | None:
    """A delta as the fixture holds vLLM's: random ids as "<id>", an empty one as None."""
    if delta is None:
        return None
    out = delta.to_json()
    for call in out.get("tool_calls", []):
        if "id" in call:
            assert call["id"].startswith("chatcmpl-tool-")
            call["id"] = "<id>"
    return out or None


def test_fixture_is_broad():
    assert FIXTURE["vllm"].startswith("0.32")
    parsers = {s["tool_parser"] or s["reasoning_parser"] for s in FIXTURE["suites"]}
    assert parsers == {"hermes", "llama3_json", "mistral", "deepseek_r1", "qwen3"}
    assert len(CASES) >= 60


@pytest.mark.parametrize(("suite", "case"), CASES, ids=IDS)
def test_whole_output_as_vllm(suite, case):
    got = _parser(suite).parse(case["text"])
    want = case["whole"]
    assert got.content == want["content"]
    assert got.reasoning == want["reasoning"]
    assert [{"name": c.name, "arguments": c.arguments} for c in got.tool_calls] == want["tool_calls"]


@pytest.mark.parametrize(("suite", "case"), CASES, ids=IDS)
def test_streamed_as_vllm(suite, case):
    stream = _parser(suite).stream()
    chunks = case["chunks"]
    got = [_as_recorded(stream.feed(text, ids, finished=i == len(chunks) - 1)) for i, (text, ids) in enumerate(chunks)]
    assert got == case["deltas"]


def test_streamed_tool_calls_add_up_to_the_whole():
    """Where vLLM finds the same calls whole and streamed, our streamed pieces join into them."""
    checked = 0
    for suite, case in CASES:
        want = case["whole"]["tool_calls"]
        if not suite["tool_parser"] or not want:
            continue
        stream = _parser(suite).stream()
        calls: dict[int, dict] = {}
        for i, (text, ids) in enumerate(case["chunks"]):
            for piece in (_as_recorded(stream.feed(text, ids, finished=i == len(case["chunks"]) - 1)) or {}).get(
                "tool_calls", []
            ):
                call = calls.setdefault(piece["index"], {"name": "", "arguments": ""})
                call["name"] += piece["function"].get("name", "")
                call["arguments"] += piece["function"].get("arguments", "")
        if [c["name"] for c in calls.values()] != [c["name"] for c in want]:
            continue  # vLLM itself streams these differently from its whole answer
        if not all(is_json(c["arguments"]) for c in calls.values()):
            continue  # a stream vLLM leaves incomplete (empty arguments, say)
        got = [json.loads(c["arguments"]) for c in calls.values()]
        assert got == [json.loads(c["arguments"]) for c in want], case["id"]
        checked += 1
    assert checked >= 15


def test_unknown_parsers_refused_with_vllm_words():
    with pytest.raises(
        ValueError, match=r"^invalid tool call parser: nope \(chose from \{ hermes,llama3_json,mistral \}\)$"
    ):
        output_parser("nope", None, {})
    with pytest.raises(ValueError, match="could not locate think start/end tokens"):
        output_parser(None, "qwen3", {})


@pytest.mark.parametrize(
    ("text", "strings", "value"),
    [
        ('{"a": "b', True, {"a": "b"}),
        ('{"a": "b', False, {}),
        ('{"a": [1, 2.', True, {"a": [1, 2]}),
        ('{"a": tr', True, {}),
        ('{"a', True, {}),
        ('{"a": "caf\\u00', True, {"a": "caf"}),
    ],
)
def test_partial_json(text, strings, value):
    assert loads_prefix(text, partial_strings=strings)[0] == value


def test_partial_json_refuses_what_cannot_be_json():
    with pytest.raises(MalformedJSONError):
        loads_prefix('{"a": }')
    assert loads_prefix('{"a": 1}; {"b"') == ({"a": 1}, 8)
