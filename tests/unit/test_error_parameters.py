"""An error names the request field it is about in vLLM's form (``<message> (parameter=NAME,
value=VALUE)``, as ``str(VLLMValidationError)`` prints it), which is the one form that crosses
Triton; the client reads it back, and the HTTP front fills OpenAI's ``param`` from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException

from client import RequestError
from openai_front.triton import _error
from renderer.chat.renderer import untrusted_mm_kwargs_message
from renderer.chat.request import EMPTY_TOOLS_MESSAGE
from renderer.errors import ContentPartError, InvalidParamsError, RenderError, parameter_of, parameter_suffix


def test_an_error_with_a_parameter_prints_it_as_vllm_does():
    e = InvalidParamsError("max_tokens must be at least 1, got 0.", parameter="max_tokens", value=0)
    assert str(e) == "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"
    assert e.parameter == "max_tokens"
    plain = RenderError("You must pass at least one prompt")
    assert str(plain) == "You must pass at least one prompt" and plain.parameter is None


@pytest.mark.parametrize(
    "message, parameter",
    [
        (EMPTY_TOOLS_MESSAGE, "tools"),
        (untrusted_mm_kwargs_message("mm_processor_kwargs", "processing"), "mm_processor_kwargs"),
        (str(ContentPartError("Missing 'type' field in multimodal part.", parameter="type")), "type"),
        (parameter_suffix("x", "messages[0].content", "a (b)"), "messages[0].content"),
        ("no parameter here", None),
        # Only a trailing suffix counts: a message quoting one in its middle names no parameter.
        ("got '(parameter=x)' in the text", None),
        ("", None),
    ],
)
def test_the_parameter_is_read_back_from_the_message(message, parameter):
    assert parameter_of(message) == parameter
    assert RequestError("400", message).parameter == parameter


def test_the_front_fills_param_from_a_stage_error():
    e = _error(
        InferenceServerException(f"in ensemble 'chat', {EMPTY_TOOLS_MESSAGE}", status="StatusCode.INVALID_ARGUMENT")
    )
    assert e.status == 400 and e.param == "tools"
    assert e.message == EMPTY_TOOLS_MESSAGE
    plain = _error(InferenceServerException("You must pass at least one prompt", status="StatusCode.INVALID_ARGUMENT"))
    assert plain.status == 400 and plain.param is None


def test_an_internal_error_names_no_parameter():
    """A server fault is not about a request field, whatever its text quotes."""
    e = _error(InferenceServerException("chat_render: internal error: (parameter=x)", status="StatusCode.INTERNAL"))
    assert e.status == 500 and e.param is None


def test_vllms_own_messages_name_their_parameter_to_the_same_reader():
    """vLLM's recorded refusals (``tests/fixtures/vllm/chat.json``, from vLLM itself) that name a
    parameter: the reader finds the one each names, so the form is vLLM's, not only ours."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "chat.json"
    named = {
        c["message"]: c["message"].rsplit("(parameter=", 1)[1].split(",")[0].rstrip(")")
        for c in json.loads(fixture.read_text())["cases"]
        if c.get("message") and "(parameter=" in c["message"]
    }
    assert len(set(named.values())) >= 3, named
    for message, parameter in named.items():
        assert parameter_of(message) == parameter, message
