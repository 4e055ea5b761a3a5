"""The HTTP front's translation, with no server: OpenAI / vLLM request bodies -> ensemble inputs
with vLLM's defaults, refusals, and the HTTP status a failed Triton call maps to (4xx only for a
request's fault, 5xx for the server's, never the reverse)."""

from __future__ import annotations

import json

import grpc
import pytest
from tritonclient.utils import InferenceServerException

from serving.openai_front.requests import FrontError, ModelCard, completion_tensors, generation_plan
from serving.openai_front.responses import error_body
from serving.openai_front.triton import _error

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


@pytest.mark.parametrize(
    "prompt, name", [("hi", "prompt"), ([1, 2], "prompt_token_ids"), (["hi"], "prompt"), ([[1, 2]], "prompt_token_ids")]
)
def test_one_prompt_in_any_form(prompt, name):
    assert name in completion_tensors({"prompt": prompt})


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({"prompt": "a", "n": 3}, 400, "n must be 1"),
        ({"prompt": "a", "model": "other"}, 404, "The model `other` does not exist."),
        ({"prompt": ["a", "b"]}, 400, "one prompt per request"),
        ({"prompt": "a", "logit_bias": {"1": 2}}, 400, "logit_bias is not supported"),
        ({"prompt": "a", "max_tokens": "ten"}, 400, "max_tokens must be an integer"),
        ({"prompt": "a", "prompt_embeds": "AAAA"}, 400, "either prompt or prompt_embeds"),
        ({"prompt": "a", "stream_options": {"include_usage": True}}, 400, "only be defined when `stream=True`"),
    ],
)
def test_refusals(body, status, message):
    with pytest.raises(FrontError) as e:
        generation_plan(body, CARD, chat=False)
    assert e.value.status == status and message in e.value.message


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
        (_Rpc(grpc.StatusCode.UNAVAILABLE, "Stub process 'llm_0_0' is not healthy."), 500, "not healthy"),
        (InferenceServerException("bad", status="StatusCode.INVALID_ARGUMENT"), 400, "bad"),
        # A stream's error comes without a code (no triton_grpc_error): its wording decides.
        (InferenceServerException("in ensemble 'chat', max_tokens must be at least 1, got 0."), 400, "max_tokens"),
        (InferenceServerException("in ensemble 'chat', detokenize: internal error: E: x"), 500, "internal error"),
        (InferenceServerException("in ensemble 'chat', Stub process 'tokenize_0_0' is not healthy."), 503, "healthy"),
        (InferenceServerException(""), 500, ""),
        (RuntimeError("boom"), 500, "RuntimeError: boom"),
    ],
)
def test_triton_failures_map_to_the_right_status(error, status, message):
    e = _error(error)
    assert e.status == status and message in e.message


def test_error_body_is_openais():
    assert error_body("x", 400, "n") == {"error": {"message": "x", "type": "Bad Request", "param": "n", "code": 400}}
