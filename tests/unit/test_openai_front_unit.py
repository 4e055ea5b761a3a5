"""The HTTP front's translation, with no server: OpenAI / vLLM request bodies -> ensemble inputs
with vLLM's defaults, refusals, and the HTTP status a failed Triton call maps to (4xx only for a
request's fault, 5xx for the server's, never the reverse)."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from tritonclient.utils import InferenceServerException

from openai_front.protocol import FrontError, ModelCard, completion_tensors, generation_plan
from openai_front.responses import error_body
from openai_front.triton import _error
from renderer.chat.params import REQUEST_FIELDS
from openai_front.errors import FrontRequestError
from renderer.errors import RenderError

ROOT = Path(__file__).resolve().parents[2]

CARD = ModelCard(name="m", max_model_len=2048, sampling_defaults={"top_k": 20, "temperature": 0.6})


def sp(plan) -> dict:
    return json.loads(plan.tensors["sampling_params"][0, 0])


def test_sampling_defaults_are_vllms():
    plan = generation_plan({"messages": [{"role": "user", "content": "hi"}]}, CARD, chat=True)
    assert sp(plan) == {"temperature": 0.6, "top_k": 20}  # the model's generation config
    plan = generation_plan({"messages": [], "temperature": 0, "stop": "x", "seed": 3}, CARD, chat=True)
    assert sp(plan) == {"temperature": 0, "top_k": 20, "stop": "x", "seed": 3}
    plain = ModelCard(name="m", max_model_len=2048)
    assert sp(generation_plan({"prompt": "a"}, plain, chat=False)) == {"temperature": 1.0}  # OpenAI's default


def test_chat_fields_and_tokenize_fields_reach_their_bags():
    plan = generation_plan(
        {
            "messages": [],
            "add_generation_prompt": False,
            "continue_final_message": True,
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "truncate_prompt_tokens": 9,
            "max_completion_tokens": 7,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        CARD,
        chat=True,
    )
    chat = json.loads(plan.tensors["chat_params"][0, 0])
    assert chat["continue_final_message"] and not chat["add_generation_prompt"] and chat["tools"]
    assert json.loads(plan.tensors["tokenize_params"][0, 0]) == {"truncate_prompt_tokens": 9}
    assert (plan.max_tokens, plan.stream, plan.include_usage) == (7, True, True)


# A value of each field the renderer's chat_params takes (renderer/chat/params.py).
CHAT_FIELD_VALUES = {
    "chat_template": "{{ messages[0].content }}",
    "chat_template_content_format": "openai",
    "chat_template_kwargs": {"enable_thinking": False},
    "add_generation_prompt": False,
    "continue_final_message": True,
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "tool_choice": "none",
    "documents": [{"title": "t", "text": "x"}],
    "media_io_kwargs": {"image": {}},
    "mm_processor_kwargs": {"max_pixels": 1000},
}


@pytest.mark.parametrize("field", REQUEST_FIELDS)
def test_every_chat_field_the_renderer_takes_reaches_chat_params(field):
    plan = generation_plan({"messages": [], field: CHAT_FIELD_VALUES[field]}, CARD, chat=True)
    assert json.loads(plan.tensors["chat_params"][0, 0]) == {field: CHAT_FIELD_VALUES[field]}


@pytest.mark.parametrize(
    "prompt, name", [("hi", "prompt"), ([1, 2], "prompt_token_ids"), (["hi"], "prompt"), ([[1, 2]], "prompt_token_ids")]
)
def test_one_prompt_in_any_form(prompt, name):
    assert name in completion_tensors({"prompt": prompt})


@pytest.mark.parametrize(
    "body, status, error_type, message",
    [
        ({"prompt": "a", "n": 3}, 400, "BadRequestError", "n must be 1"),
        (
            {"prompt": "a", "model": "other"},
            404,
            "NotFoundError",
            "The model `other` does not exist. Valid aliases: m.",
        ),
        ({"prompt": ["a", "b"]}, 400, "BadRequestError", "one prompt per request"),
        ({"prompt": "a", "logit_bias": {"1": 2}}, 400, "BadRequestError", "logit_bias is not supported"),
        ({"prompt": "a", "prompt_embeds": "AAAA"}, 400, "BadRequestError", "either prompt or prompt_embeds"),
        # vLLM's request-model refusal (pydantic's words): the status phrase as type, the location as param.
        ({"prompt": "a", "max_tokens": "ten"}, 400, "Bad Request", "Input should be a valid integer"),
    ],
)
def test_refusals(body, status, error_type, message):
    with pytest.raises(FrontRequestError) as e:
        generation_plan(body, CARD, chat=False)
    assert e.value.status == status and message in e.value.message
    answer = FrontError.of(e.value)  # as the router answers it: the field named beside the text
    assert (answer.status, answer.message, answer.param) == (status, str(e.value), e.value.parameter)
    assert answer.error_type == error_type
    assert answer.param is not None and "(parameter=" not in answer.message


@pytest.mark.parametrize(
    "body, param, message",
    [
        # vLLM's own checks print the parameter after the message, as its VLLMValidationError does.
        (
            {"prompt": "a", "max_tokens": 10**30},
            "max_tokens",
            f"max_tokens={10**30} cannot be greater than max_model_len=2048. Please request fewer output tokens."
            f" (parameter=max_tokens, value={10**30})",
        ),
        (
            {"prompt": "a", "max_tokens": 0},
            "max_tokens",
            "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
        ),
        (
            {"prompt": "a", "stream_options": {"include_usage": True}},
            "stream_options",
            "Stream options can only be defined when `stream=True`. (parameter=stream_options)",
        ),
        (
            {"prompt": "a", "truncate_prompt_tokens": 2049},
            "truncate_prompt_tokens",
            "truncate_prompt_tokens=2049 cannot be greater than max_model_len = 2048. Please request a smaller"
            " truncation size. (parameter=truncate_prompt_tokens, value=2049)",
        ),
        # vLLM's SamplingParams checks that name no parameter: param null.
        ({"prompt": "a", "top_k": -2}, None, "top_k must be 0 (disable), or at least 1, got -2."),
        ({"prompt": "a", "min_p": 1.5}, None, "min_p must be in [0, 1], got 1.5."),
        ({"prompt": "a", "n": 0}, None, "n must be at least 1, got 0."),
        ({"prompt": "a", "stop": ["x", ""]}, None, "stop cannot contain an empty string."),
    ],
)
def test_vllms_value_refusals_are_its_words_before_any_stage(body, param, message):
    with pytest.raises(RenderError) as e:
        generation_plan(body, CARD, chat=False)
    answer = FrontError.of(e.value)
    assert (answer.status, answer.error_type, answer.param, answer.message) == (400, "BadRequestError", param, message)


def test_request_model_refusals_are_pydantics_as_vllm_lists_them():
    """A field of the wrong type: vLLM's FastAPI answer, pydantic's errors listed, the first's place as param."""
    with pytest.raises(FrontRequestError) as e:
        generation_plan({"messages": [], "temperature": "hot", "seed": 2**64}, CARD, chat=True)
    answer = FrontError.of(e.value)
    assert (answer.status, answer.error_type, answer.param) == (400, "Bad Request", "body.seed")
    assert answer.message == (
        "2 validation errors:\n"
        "  {'type': 'less_than_equal', 'loc': 'body.seed', 'msg': 'Input should be less than or equal to"
        " 9223372036854775807', 'input': '18446744073709551616', 'ctx': {'le': 9223372036854775807}}\n"
        "  {'type': 'float_parsing', 'loc': 'body.temperature', 'msg': 'Input should be a valid number, unable to"
        " parse string as a number', 'input': 'hot'}"
    )


def test_fields_are_forwarded_as_vllm_reads_them():
    """pydantic's lax reading, as vLLM's: a numeric string is a number, true is the integer 1."""
    plan = generation_plan({"prompt": "a", "temperature": "0.5", "max_tokens": True}, CARD, chat=False)
    assert sp(plan)["temperature"] == 0.5 and plan.max_tokens == 1


def test_a_stage_refusal_in_vllms_request_model_form_is_typed_and_located_as_vllms():
    """The chat stage refuses bad messages with vLLM's own pydantic answer; its first location is
    the param, and the type the status phrase, as vLLM's FastAPI handler answers it."""
    message = (
        "1 validation error:\n  {'type': 'missing', 'loc': 'body.messages.0.role', 'msg': 'Field required',"
        " 'input': '<dict of 1 items>'}"
    )
    e = FrontError(message, 400)
    assert (e.error_type, e.param) == ("Bad Request", "body.messages.0.role")
    assert (FrontError("x", 400).error_type, FrontError("x", 400).param) == ("BadRequestError", None)
    assert FrontError(message, 500).error_type == "InternalServerError"  # only a refusal is read so


class _Rpc(grpc.RpcError):
    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


@pytest.mark.parametrize(
    "error, status, message",
    [
        (
            _Rpc(grpc.StatusCode.INVALID_ARGUMENT, "in ensemble 'chat', top_p must be in (0, 1], got 0.0."),
            400,
            "top_p must be in (0, 1], got 0.0.",
        ),
        (
            _Rpc(grpc.StatusCode.INTERNAL, "in ensemble 'chat', tokenize: internal error: KeyError: 'x'"),
            500,
            "tokenize: internal error",
        ),
        # Triton not reachable (starting, restarting): a 503 the client may retry.
        (_Rpc(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses"), 503, "not reachable now"),
        # The call failed in grpc's own transport with no status from Triton (killed mid-call): away.
        (_Rpc(grpc.StatusCode.INTERNAL, "Internal error from Core"), 503, "not reachable now"),
        (InferenceServerException("Internal error from Core", status="StatusCode.INTERNAL"), 503, "not reachable"),
        # Triton's own INTERNAL with other wording stays a 500.
        (InferenceServerException("Internal error from Core: x", status="StatusCode.INTERNAL"), 500, "x"),
        (InferenceServerException("bad", status="StatusCode.INVALID_ARGUMENT"), 400, "bad"),
        # A stream's error comes without a code (no triton_grpc_error): its wording decides.
        (InferenceServerException("in ensemble 'chat', max_tokens must be at least 1, got 0."), 400, "max_tokens"),
        (InferenceServerException("in ensemble 'chat', detokenize: internal error: E: x"), 500, "internal error"),
        (InferenceServerException("in ensemble 'chat', Stub process 'tokenize_0_0' is not healthy."), 503, "healthy"),
        (InferenceServerException(""), 500, ""),
        # One of the front's own ensembles not loaded (yet): Triton is starting or reloading.
        (InferenceServerException("Request for unknown model: 'chat' has no available versions"), 503, "chat"),
        (RuntimeError("boom"), 500, "RuntimeError: boom"),
    ],
)
def test_triton_failures_map_to_the_right_status(error, status, message):
    e = _error(error)
    assert e.status == status and message in e.message


def test_error_body_is_openais():
    # Without a type: the status phrase, vLLM's type for FastAPI's own refusals.
    assert error_body("x", 400, "n") == {"error": {"message": "x", "type": "Bad Request", "param": "n", "code": 400}}
    assert error_body("x", 404, None, "NotFoundError")["error"]["type"] == "NotFoundError"
    assert error_body("x", 499)["error"]["type"] == "Client Closed Request"


@pytest.mark.parametrize(
    "status, error_type",
    [
        (400, "BadRequestError"),
        (404, "NotFoundError"),
        (500, "InternalServerError"),
        (503, "ServiceUnavailableError"),
        (413, "Request Entity Too Large"),
    ],
)
def test_a_front_errors_type_is_vllms_for_its_status(status, error_type):
    assert FrontError("x", status).error_type == error_type


# --- the request body (openai_front/body.py) ---------------------------------------------


async def _chunks(*parts: bytes):
    for p in parts:
        yield p


def _read(raw: bytes, declared: str | None = None, limit: int = 1000) -> dict:
    import asyncio

    from openai_front.body import read_body

    return asyncio.run(read_body(_chunks(raw[:7], raw[7:]), declared, limit))


@pytest.mark.parametrize(
    "raw, error, message",
    [
        (b"{", "BodyNotJSONError", "is not valid JSON: Expecting property name"),
        (b"\xff{}", "BodyNotJSONError", "is not valid UTF-8"),
        (b'{"temperature": NaN}', "BodyNotJSONError", "NaN is not a JSON value."),
        (b'{"t": -Infinity}', "BodyNotJSONError", "-Infinity is not a JSON value."),
        (b'{"prompt": "a\\ud800b"}', "BodyNotJSONError", "lone UTF-16 surrogate (\\ud800)"),
        (b'{"prompt": "\\udfff"}', "BodyNotJSONError", "lone UTF-16 surrogate (\\udfff)"),
        (b"[" * 5000 + b"]" * 5000, "BodyNestingError", "too deeply"),
        (b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}", "BodyNestingError", "too deeply"),
        (b"[1]", "BodyNotObjectError", "must be a JSON object, got list"),
        (b'"x"', "BodyNotObjectError", "got str"),
    ],
)
def test_body_refusals_are_named_400s(raw, error, message):
    from openai_front import errors

    with pytest.raises(getattr(errors, error)) as e:
        _read(raw, limit=10**6)
    assert e.value.status == 400 and message in e.value.message, e.value.message


def test_body_size_limit_is_a_413_naming_both_sizes():
    from openai_front.errors import BodyTooLargeError

    with pytest.raises(BodyTooLargeError) as e:
        _read(b"{}", declared="5000", limit=1000)  # refused on its header, before any byte is read
    assert e.value.status == 413 and e.value.message == (
        "The request body declares 5000 bytes, more than the limit of 1000 bytes."
    )
    with pytest.raises(BodyTooLargeError, match="has at least 1003 bytes, more than the limit of 1000"):
        _read(b'{"prompt": "' + b"x" * 989 + b'"}', declared=None, limit=1000)


def test_body_valid_json_passes():
    assert _read('{"prompt": "caf\\u00e9 \\ud83d\\ude00", "n": 1}'.encode()) == {"prompt": "café 😀", "n": 1}
    assert _read(b'{"prompt": "x"}', declared="15", limit=15) == {"prompt": "x"}


@pytest.mark.parametrize(
    "field, value, param, message",
    [
        ("temperature", [1], "body.temperature", "'msg': 'Input should be a valid number'"),
        ("stop", 5, "body.stop", "'msg': 'Input should be a valid string'"),
        ("top_p", 2.0, "top_p", "top_p must be in (0, 1], got 2.0. (parameter=top_p, value=2.0)"),
        ("min_p", "x", "body.min_p", "unable to parse string as a number"),
        ("min_p", 1.5, None, "min_p must be in [0, 1], got 1.5."),
    ],
)
def test_render_endpoints_check_sampling_fields(field, value, param, message):
    """A render request's sampling fields are checked as generation checks them (a wrong type was a
    500 from the render response's float())."""
    from openai_front.protocol import render_plan

    with pytest.raises(RenderError) as e:
        render_plan({"prompt": "hi", field: value}, CARD, chat=False)
    answer = FrontError.of(e.value)
    assert answer.status == 400 and answer.param == param and message in answer.message
    assert render_plan({"prompt": "hi", "temperature": 0.5, "stop": ["a"]}, CARD, chat=False)[1] is None
    # A render echoes n (vLLM's render takes it); generation refuses it.
    assert render_plan({"prompt": "hi", "n": 2}, CARD, chat=False)[2]["n"] == 2


def test_the_front_starts_without_the_chat_request_model(model_dir) -> None:
    """The front's app, built as ``python -m openai_front`` builds it, leaves the ``openai``
    package (the chat request model's types, ~40 MB of the front's memory), torch and transformers
    unimported: a render pod's front holds what it uses. The one refusal that needs the chat request
    model (``tokenize_chat_refusal``) imports it then."""
    import subprocess
    import sys

    script = f"""
import sys
from openai_front.api_router import create_app
from openai_front.body import DEFAULT_MAX_BODY_BYTES
from openai_front.protocol import ModelCard
card = ModelCard.from_model_dir({str(model_dir)!r}, "", 0)
create_app(card, "127.0.0.1:1", {str(model_dir)!r}, DEFAULT_MAX_BODY_BYTES, infer_check_path="")
print(sorted(m for m in ("openai", "torch", "transformers") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_the_chat_packages_lazy_names_are_its_exports() -> None:
    """``renderer.chat`` loads each exported name from the module ``_HOME`` names, on first use:
    every export has a home, and each home really defines it."""
    import importlib

    import renderer.chat as chat

    assert set(chat._HOME) == set(chat.__all__)
    for name, module in chat._HOME.items():
        assert hasattr(importlib.import_module(f"renderer.chat.{module}"), name), (name, module)
