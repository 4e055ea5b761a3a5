"""``completion`` generation end to end on the embedded SmolLM2, over HTTP and gRPC."""

from __future__ import annotations

import numpy as np
import pytest

from client import RequestError

# Every test here talks to a real tritonserver.
pytestmark = pytest.mark.live

PROMPT = "The capital of France is"


def generate(client, stream, **kw):
    kw.setdefault("max_tokens", 24)
    return list(client.generate("completion", prompt=PROMPT, stream=stream, **kw))


def test_streaming_equals_non_streaming_under_greedy(client, hf_tokenizer):
    [whole] = generate(client, stream=False)
    pieces = generate(client, stream=True)
    assert len(pieces) == len(whole.output_ids) == 24
    assert "".join(p.text for p in pieces) == whole.text
    assert [i for p in pieces for i in p.output_ids] == whole.output_ids
    assert whole.text == hf_tokenizer.decode(whole.output_ids, skip_special_tokens=True)
    assert whole.text.strip(), "the model produced no text"


def test_greedy_matches_transformers_generate(client, model_dir, hf_tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = hf_tokenizer(PROMPT, return_tensors="pt").input_ids
    ref = model.generate(ids, max_new_tokens=12, do_sample=False)[0, ids.shape[1] :].tolist()
    [whole] = generate(client, stream=False, max_tokens=12)
    assert whole.output_ids == ref


def test_stop_string_ends_generation_and_is_cut(client):
    [whole] = generate(client, stream=False)
    stop = whole.text.strip().split()[1]  # a word the model is known to produce
    [cut] = generate(client, stream=False, sampling_params={"stop": [stop]})
    assert stop not in cut.text and whole.text.startswith(cut.text)
    pieces = generate(client, stream=True, sampling_params={"stop": [stop]})
    assert "".join(p.text for p in pieces) == cut.text


def test_seeded_sampling_is_reproducible(client):
    sp = {"temperature": 1.0, "top_p": 0.9, "top_k": 50, "seed": 1234}
    a = generate(client, stream=False, sampling_params=sp)[0]
    b = generate(client, stream=False, sampling_params=sp)[0]
    assert a.output_ids == b.output_ids
    c = generate(client, stream=False, sampling_params={**sp, "seed": 99})[0]
    d = generate(client, stream=False, sampling_params={**sp, "seed": 100})[0]
    assert len({tuple(a.output_ids), tuple(c.output_ids), tuple(d.output_ids)}) > 1, "seeds do not change sampling"


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"max_tokens": 0}, "max_tokens must be at least 1"),
        ({"sampling_params": {"temprature": 1}}, "Unknown field(s) in sampling_params: temprature"),
        ({"sampling_params": {"top_p": 0}}, "top_p must be in (0, 1]"),
        ({"sampling_params": {"stop": 5}}, "sampling_params.stop must be"),
        (
            {"max_tokens": 8190},
            "This model's maximum context length is 8192 tokens. However, you requested 8190 output tokens",
        ),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_bad_generation_requests(client, kw, message, stream):
    with pytest.raises(RequestError) as e:
        generate(client, stream=stream, **kw)
    assert message in e.value.message
    # A message alone does not make a client error: a server fault carries one too.
    assert e.value.kind == "client", repr(e.value)
    # A gRPC stream brings a model's error without a code (no triton_grpc_error: it crashes 2.51);
    # client.stream_error_kind reads the message (test_model_refusals_on_a_stream_are_client_errors).
    assert e.value.status == ("400" if client.protocol == "http" else ""), repr(e.value)
    assert client.is_ready()


def test_generation_from_token_ids(client, hf_tokenizer):
    ids = hf_tokenizer(PROMPT).input_ids
    a = list(client.generate("completion", prompt_token_ids=ids, max_tokens=8))[0]
    b = generate(client, stream=False, max_tokens=8)[0]
    assert a.output_ids == b.output_ids


# Requests Triton itself refuses before any model runs. Its gRPC stream sends these without a
# status code, so the client recognises Triton's wording (client.triton_check_kind); a unary call
# of the same request carries the code, which pins each recognised message to a client error.
TRITON_REFUSALS = {
    "missing input": ("render_chat", {}),
    "unknown input": ("render_completion", {"prompt": b"hi", "bogus": b"x"}),
    "wrong dtype": ("render_completion", {"prompt": np.array([[1.5]], np.float32)}),
    "wrong shape": ("render_completion", {"prompt": np.array([[b"a", b"b"]], object)}),
    "byte size": (
        "render_completion",
        {"prompt_token_ids": np.zeros((1, 0), np.int32), "tokenize_params": np.zeros((1, 0), object)},
    ),
    "unknown model": ("no_such_model", {"prompt": b"hi"}),
}


@pytest.mark.parametrize("case", list(TRITON_REFUSALS))
def test_triton_refusals_on_a_stream_are_client_errors(server, case):
    from client import RendererClient

    model, raw = TRITON_REFUSALS[case]
    tensors = {k: v if isinstance(v, np.ndarray) else np.array([[v]], object) for k, v in raw.items()}
    with RendererClient(f"{server.host}:{server.grpc_port}", "grpc") as c:
        with pytest.raises(RequestError) as unary:
            c.infer(model, tensors)
        with pytest.raises(RequestError) as streamed:
            list(c.stream(model, tensors))
    assert unary.value.status in ("StatusCode.INVALID_ARGUMENT", "StatusCode.NOT_FOUND"), repr(unary.value)
    assert streamed.value.status == "", "Triton now sends a code on the stream: the message table is not needed"
    assert streamed.value.message.endswith(unary.value.message.split("] ", 1)[-1]), (streamed.value, unary.value)
    assert streamed.value.kind == unary.value.kind == "client", repr(streamed.value)


def test_a_request_missing_a_required_input_is_named_on_a_stream(server):
    """``ensemble`` without ``text_input`` but with as many inputs as it requires: Triton 2.51 runs
    it and answers nothing; through the edge (the front's stream proxy) it is refused, naming it."""
    from client import RendererClient
    from launcher import cli as launch

    pid = launch.running_pid(server)
    tensors = {
        "max_tokens": np.array([[4]], np.int32),
        "bad_words": np.array([[b""]], object),
        "stop_words": np.array([[b""]], object),
    }
    with RendererClient(f"{server.host}:{server.grpc_port}", "grpc") as c:
        with pytest.raises(RequestError) as e:
            list(c.stream("ensemble", tensors))
        assert "missing required input(s) ['text_input']" in e.value.message, repr(e.value)
        assert e.value.kind == "client", repr(e.value)
        out = list(c.stream("ensemble", {"text_input": np.array([[b"The capital of France is"]], object), **tensors}))
        assert out  # the stream still serves a whole request
    assert launch.running_pid(server) == pid


# Refusals by the models themselves: a generation stream brings them without a code (no
# triton_grpc_error, which crashes 2.51: client/triton_client.py), and client.stream_error_kind
# reads them as client errors. The same request's unary call, to the render ensemble or the stage
# that refuses it, carries INVALID_ARGUMENT and the same message: the reading holds on the server.
MODEL_REFUSALS = {
    "chat_render": ("chat", "render_chat", {"messages": b"[]"}),
    "tokenize": ("completion", "render_completion", {"prompt": b""}),
    "tokenize params": (
        "completion",
        "render_completion",
        {"prompt": b"hi", "tokenize_params": b'{"truncation_side": "middle"}'},
    ),
    "generation_params": (
        "completion",
        "generation_params",
        {"prompt": b"hi", "sampling_params": b'{"temperature": -1}', "input_lengths": np.array([[1]], np.int32)},
    ),
}


@pytest.mark.parametrize("case", list(MODEL_REFUSALS))
def test_model_refusals_on_a_stream_are_client_errors(server, case):
    from client import RendererClient

    generation, unary_model, raw = MODEL_REFUSALS[case]
    tensors = {k: v if isinstance(v, np.ndarray) else np.array([[v]], object) for k, v in raw.items()}
    generate_tensors = {k: v for k, v in tensors.items() if k != "input_lengths"}
    generate_tensors["max_tokens"] = np.array([[4]], np.int32)
    unary_tensors = {k: v for k, v in tensors.items() if k != "prompt" or unary_model != "generation_params"}
    if unary_model == "generation_params":
        unary_tensors["max_tokens"] = np.array([[4]], np.int32)
    with RendererClient(f"{server.host}:{server.grpc_port}", "grpc") as c:
        with pytest.raises(RequestError) as unary:
            c.infer(unary_model, unary_tensors)
        with pytest.raises(RequestError) as streamed:
            list(c.stream(generation, generate_tensors))
    assert unary.value.status == "StatusCode.INVALID_ARGUMENT", repr(unary.value)
    assert streamed.value.status == "", "Triton now sends a code on the stream: stream_error_kind is not needed"
    assert streamed.value.message.endswith(unary.value.message.split(", ")[-1]), (streamed.value, unary.value)
    assert streamed.value.kind == "client", repr(streamed.value)
