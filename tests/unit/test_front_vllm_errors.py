"""The HTTP front answers a bad request as vLLM 0.32's own server does.

Every case of ``tests/fixtures/vllm/front_errors.json`` (recorded from vLLM's OpenAI server by
``tests/fixtures/vllm/make_front_errors.py``: a request body, vLLM's status and its whole error
object) is sent to the front's app over the launcher's ensembles run in process
(``tests/support/fake_triton.py``: the stages' own rules, the stand-in engine, no Triton), and our
status, ``type``, ``param`` and message are held to vLLM's. A stage's refusal reaches the front as
Triton's gRPC stream brings it (its message, the ensemble named before it) and is mapped by the
front's own ``openai_front.triton._error``.

Where our answer differs, the case is in ``OURS`` with our answer and why; every other case must
equal vLLM's answer in all four.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterator, Mapping

import fake_triton
import numpy as np
import pytest
from fastapi.testclient import TestClient
from tritonclient.utils import InferenceServerException

from openai_front.api_router import create_app
from openai_front.protocol import ModelCard
from openai_front.triton import Piece, _error
from renderer.sampling import SAMPLING_FIELDS

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "front_errors.json"
RECORDED = json.loads(FIXTURE.read_text())
CASES = {c["name"]: c for c in RECORDED["cases"]}


@dataclass(frozen=True)
class Ours:
    """Our answer to a recorded case where it is not vLLM's (its message is not compared)."""

    why: str
    """Why it differs."""

    param: str | None
    """Our ``param``."""

    status: int = 400
    """Our status."""

    error_type: str = "BadRequestError"
    """Our ``type``."""


NOT_SERVED = "vLLM serves it; this server refuses it, naming the field (openai_front/protocol.py UNSUPPORTED)"
ONE_CHOICE = "vLLM returns n choices; this server returns one per request and refuses n > 1"
ONE_PROMPT = "vLLM takes a batch of prompts; this server takes one per request"
# The tokenize stage's context rule is an earlier vLLM's (renderer/params.py, pinned by
# tests/unit/test_tokenize_params.py and the live tests): the prompt's room is the context less
# max_tokens, and it says so in that vLLM's words, naming no parameter. vLLM 0.32 checks the prompt
# against the whole context (naming input_tokens), clamps max_tokens to what is left, and does not
# check /tokenize at all.
CONTEXT_RULE = "the tokenize stage keeps an earlier vLLM's context rule and wording"
# The engines take a uint64 seed (renderer/engine_tensors.py); the generation stage refuses a
# negative one, which vLLM takes.
NEGATIVE_SEED = "the generation stage refuses a negative seed (the engines take uint64 seeds)"

OURS = {
    "/v1/completions:n=2": Ours(ONE_CHOICE, "n"),
    "/v1/chat/completions:n=2": Ours(ONE_CHOICE, "n"),
    "/v1/completions:logprobs=2": Ours(NOT_SERVED, "logprobs"),
    "/v1/chat/completions:logprobs=true": Ours(NOT_SERVED, "logprobs"),
    "/v1/completions:prompt_logprobs=1": Ours(NOT_SERVED, "prompt_logprobs"),
    "/v1/chat/completions:prompt_logprobs=1": Ours(NOT_SERVED, "prompt_logprobs"),
    '/v1/completions:logit_bias={"1": 2}': Ours(NOT_SERVED, "logit_bias"),
    '/v1/chat/completions:logit_bias={"1": 2}': Ours(NOT_SERVED, "logit_bias"),
    "/v1/completions:echo=true": Ours(NOT_SERVED, "echo"),
    "/v1/completions:prompt=two prompts": Ours(ONE_PROMPT, "prompt"),
    "/v1/completions/render:prompt=two prompts": Ours(ONE_PROMPT, "prompt"),
    "/v1/completions:seed=-1": Ours(NEGATIVE_SEED, "seed"),
    "/v1/chat/completions:seed=-1": Ours(NEGATIVE_SEED, "seed"),
    "/v1/completions:max_tokens=512": Ours(CONTEXT_RULE, None),
    "/v1/chat/completions:max_tokens=512": Ours(CONTEXT_RULE, None),
    "/v1/completions:prompt=over context": Ours(CONTEXT_RULE, None),
    "/v1/completions/render:prompt=over context": Ours(CONTEXT_RULE, None),
    "/v1/chat/completions:messages=over context": Ours(CONTEXT_RULE, None),
    "/v1/chat/completions/render:messages=over context": Ours(CONTEXT_RULE, None),
    "/tokenize:prompt=over context": Ours(CONTEXT_RULE, None),
    "/tokenize:messages=over context": Ours(CONTEXT_RULE, None),
}


class InProcessEnsembles:
    """The front's ``EnsemblesClient`` over the ensembles run in process. A stage's refusal comes
    as Triton's stream brings it: a message alone, the ensemble named before it."""

    def __init__(self, repo: fake_triton.InProcessRepository) -> None:
        self.repo = repo

    async def ready(self) -> bool:
        return True

    async def close(self) -> None:
        pass

    def _run(self, model: str, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        inputs = {k: np.asarray(v)[0] for k, v in tensors.items()}  # the repository adds the batch dimension
        try:
            return self.repo.infer(model, inputs)
        except fake_triton.ContractError as e:
            _, refused, message = str(e).partition(": error response: ")
            if not refused:
                raise  # the ensembles broke their own contract: the test's failure, not an answer
            raise _error(InferenceServerException(f"in ensemble '{model}', {message}")) from None

    async def infer(self, model: str, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._run(model, tensors)

    def generate(self, model: str, tensors: Mapping[str, np.ndarray]) -> AsyncIterator[Piece]:
        async def pieces() -> AsyncIterator[Piece]:
            out = self._run(model, tensors)
            yield Piece(
                out["text_output"].reshape(-1)[0].decode(),
                out["output_ids"].reshape(-1).tolist(),
                out["finish_reason"].reshape(-1)[0].decode(),
                int(out["input_lengths"].reshape(-1)[0]),
            )

        return pieces()


@pytest.fixture(scope="module")
def http(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The front's app as the recording's server was: the default model, its context."""
    limit = RECORDED["max_model_len"]
    card = ModelCard.from_model_dir(str(model_dir), RECORDED["model"], limit)
    with fake_triton.rendered_repository(tmp_path_factory.mktemp("front-errors"), max_model_len=limit) as repo:
        app = create_app(card, "unused", connect=lambda: InProcessEnsembles(repo))
        with TestClient(app) as client:
            yield client


def answer(http: TestClient, case: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    r = http.post(case["endpoint"], json=case["body"])
    return r.status_code, (r.json()["error"] if r.status_code >= 400 else {})


@pytest.mark.parametrize("name", [n for n in CASES if n not in OURS])
def test_the_front_answers_as_vllm(http, name):
    case = CASES[name]
    status, error = answer(http, case)
    assert status == case["status"], error
    if status >= 400:
        assert error == case["error"]


@pytest.mark.parametrize("name", list(OURS))
def test_where_the_front_differs_it_answers_as_listed(http, name):
    ours = OURS[name]
    status, error = answer(http, CASES[name])
    assert (status, error.get("type"), error.get("param")) == (ours.status, ours.error_type, ours.param), error
    assert error["code"] == status and error["message"]


def test_every_difference_is_a_recorded_case():
    assert set(OURS) <= set(CASES), set(OURS) - set(CASES)


def test_the_recording_refuses_every_field_the_front_forwards():
    """Each sampling field the front forwards, and max_tokens in both names, has a case vLLM refused."""
    refused = {c["name"].split(":", 1)[1].split("=")[0] for c in RECORDED["cases"] if c["status"] >= 400}
    forwarded = {*SAMPLING_FIELDS, "max_tokens", "max_completion_tokens", "min_p", "n", "truncate_prompt_tokens"}
    assert forwarded <= refused, forwarded - refused
    assert RECORDED["source"].startswith("recorded from vLLM's own OpenAI server")


@pytest.mark.parametrize("value", [-1, 0])
@pytest.mark.parametrize("endpoint", ["/v1/completions", "/v1/chat/completions"])
def test_max_tokens_is_the_fronts_refusal_in_vllms_words(http, endpoint, value):
    """No stage sees a max_tokens below one: the answer names max_tokens, never the tokenize
    stage's max_output_tokens (what a client was told before)."""
    body = {"prompt": "hi"} if endpoint == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]}
    status, error = answer(http, {"endpoint": endpoint, "body": {**body, "max_tokens": value}})
    assert status == 400 and error == {
        "message": f"max_tokens must be at least 1, got {value}. (parameter=max_tokens, value={value})",
        "type": "BadRequestError",
        "param": "max_tokens",
        "code": 400,
    }
