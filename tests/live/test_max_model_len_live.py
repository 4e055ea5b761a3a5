"""``MAX_MODEL_LEN`` on a live server reaches every stage that checks a length.

One server on the tiny Qwen2-VL model (its context is 4096) with ``max_model_len`` = 64: a prompt
over 64 tokens is refused with vLLM's wording on the text path (``tokenize``), on the image path
(``mm_process``, which checks the ids after placeholder expansion against the limit ``tokenize``
resolved, ``max_tokens`` included) and on the encoder-decoder path (``tokenize_enc_dec``; the
tiny BART's own context is 512). Prompts at the limit pass, so each refusal is the setting's.

Ports: the ``max_model_len`` block of ``tests/support/ports.py`` (HTTP; gRPC and metrics the next two); the
build folder ``TEST_MAX_MODEL_LEN_BUILD_DIR``, a temporary one unless set.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace

import numpy as np
import pytest
import ports

from client import RendererClient, RequestError
from tests.support.mm_images import data_url, rgb

pytestmark = pytest.mark.live

LIMIT = 64
SMALL_IMAGE = data_url(rgb(56, 56))  # Qwen2-VL: 4 x 4 patches, merged 2 x 2 -> 4 tokens
LARGE_IMAGE = data_url(rgb(224, 224))  # 16 x 16 patches -> 64 tokens: over the limit by itself
LARGE_MINUS_SMALL = 64 - 4


def too_long(out: int, n: int, at_least: bool = False) -> str:
    """vLLM's length error for this server's limit (REFERENCE.md)."""
    a = "at least " if at_least else ""
    return (
        f"This model's maximum context length is {LIMIT} tokens. However, you requested {out} output tokens "
        f"and your prompt contains {a}{n} input tokens, for a total of {a}{n + out} tokens. Please reduce the "
        "length of the input prompt or the number of requested output tokens."
    )


def image_chat(url: str, text: str = "What is it?") -> list[dict]:
    return [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]}
    ]


@pytest.fixture(scope="module")
def small_server(server_settings, tmp_path_factory):
    from launcher import cli as launch

    port = ports.port("max_model_len")
    build = os.environ.get("TEST_MAX_MODEL_LEN_BUILD_DIR") or str(tmp_path_factory.mktemp("max-model-len"))
    s = replace(
        server_settings,
        model_dir="",
        model="qwen2-vl",
        max_model_len=LIMIT,
        openai_port=0,
        models="render_completion,render_chat,chat,render_encoder_decoder",
        build_dir=build,
        http_port=port,
        grpc_port=port + 1,
        metrics_port=port + 2,
    )
    launch.stop(s)
    assert launch.start(s) == 0, f"server did not start; see {s.log_file}"
    yield s
    launch.stop(s)


@pytest.fixture(params=["http", "grpc"])
def client(request, small_server):
    port = small_server.http_port if request.param == "http" else small_server.grpc_port
    with RendererClient(f"{small_server.host}:{port}", request.param) as c:
        yield c


def refused(call, *args, **kwargs) -> str:
    """The error message of a refused request, without the "in ensemble 'name', " Triton adds."""
    with pytest.raises(RequestError) as e:
        call(*args, **kwargs)
    assert e.value.is_client_error, e.value.message
    return re.sub(r"^in ensemble '[^']+', ", "", e.value.message)


def test_text_path(client):
    assert len(client.render_completion(prompt_token_ids=list(range(100, 100 + LIMIT))).input_ids) == LIMIT
    assert refused(client.render_completion, prompt_token_ids=list(range(100, 101 + LIMIT))) == too_long(0, LIMIT + 1)
    # Tokenized only up to the limit + 1, so the count is "at least".
    assert refused(client.render_completion, "hello " * 80) == too_long(0, LIMIT + 1, at_least=True)
    assert refused(client.render_chat, [{"role": "user", "content": "hello " * 80}]) == too_long(
        0, LIMIT + 1, at_least=True
    )
    # The field it is about named after the message, vLLM's form (how the parameter crosses Triton).
    assert refused(client.render_completion, "hi", tokenize_params={"max_total_tokens": LIMIT + 1}) == (
        f"max_total_tokens={LIMIT + 1} cannot be greater than the model's maximum context length of {LIMIT} tokens. "
        f"(parameter=max_total_tokens, value={LIMIT + 1})"
    )


def test_image_path(client):
    """The text alone fits; the expanded image does not, and mm_process says so with the count."""
    ok = client.render_chat(image_chat(SMALL_IMAGE))
    n_small = len(ok.input_ids)
    assert n_small < LIMIT and int(ok.outputs["input_lengths"][0]) == n_small
    assert refused(client.render_chat, image_chat(LARGE_IMAGE)) == too_long(0, n_small + LARGE_MINUS_SMALL)
    # A request's own smaller limit travels the same way.
    assert refused(client.render_chat, image_chat(SMALL_IMAGE), tokenize_params={"max_total_tokens": n_small - 1}) == (
        f"This model's maximum context length is {n_small - 1} tokens. However, you requested 0 output tokens and "
        f"your prompt contains {n_small} input tokens, for a total of {n_small} tokens. Please reduce the length of "
        "the input prompt or the number of requested output tokens."
    )


def test_image_path_reserves_max_tokens(client):
    """``max_tokens`` reaches mm_process through tokenize: the unexpanded text plus max_tokens fits
    (tokenize lets it through), the expanded ids plus max_tokens do not."""
    n_small = len(client.render_chat(image_chat(SMALL_IMAGE)).input_ids)
    fits = LIMIT - n_small
    out = list(client.generate("chat", max_tokens=fits, messages=image_chat(SMALL_IMAGE)))
    assert out, "no response"
    over = fits + 1
    message = refused(lambda: list(client.generate("chat", max_tokens=over, messages=image_chat(SMALL_IMAGE))))
    assert message == too_long(over, n_small)


def encdec(client: RendererClient, ids: list[int]) -> dict[str, np.ndarray]:
    return client.infer("render_encoder_decoder", {"encoder_prompt_token_ids": np.asarray([ids], np.int32)})


def test_encoder_decoder_path(client):
    out = encdec(client, list(range(5, 5 + LIMIT)))
    assert int(out["encoder_input_lengths"][0]) == LIMIT
    assert refused(encdec, client, list(range(5, 6 + LIMIT))) == too_long(0, LIMIT + 1)
