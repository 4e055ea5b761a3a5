"""The TensorRT-LLM-compatible front (``ensemble``) and vLLM's output rules in the generation
ensembles, live over HTTP and gRPC."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from client import RequestError

pytestmark = pytest.mark.live

PROMPT = "The capital of France is"


FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "trtllm" / "interface.json").read_text())
# Each input typed as TensorRT-LLM's ensemble declares it.
TYPES = {
    t["name"]: {
        "TYPE_INT32": np.int32,
        "TYPE_FP32": np.float32,
        "TYPE_BOOL": np.bool_,
        "TYPE_UINT64": np.uint64,
        "TYPE_STRING": object,
    }[t["data_type"]]
    for t in FIXTURE["ensemble"]["inputs"]
    if t["data_type"] != "TYPE_FP16"
}


def front(client, stream=False, **inputs):
    """One request to ``ensemble`` in TensorRT-LLM's own tensor form; its responses."""
    inputs = {"text_input": [PROMPT], "max_tokens": 12, **inputs}
    if stream:
        inputs["stream"] = True
    t = {}
    for name, v in inputs.items():
        values = [x.encode() for x in v] if isinstance(v, list) else [v]
        t[name] = np.array([values], dtype=TYPES[name])
    return list(client.stream("ensemble", t))


@pytest.fixture(scope="module")
def whole(server):
    from client import RendererClient

    with RendererClient(f"{server.host}:{server.grpc_port}", "grpc") as c:
        [w] = list(c.generate("completion", prompt=PROMPT, max_tokens=12))
    return w


def test_greedy_text_equals_completions(client, whole):
    [out] = front(client, exclude_input_in_output=True)
    assert out.text == whole.text and whole.text.strip()


def test_without_exclude_the_prompt_comes_first_as_tensorrt_llm_does(client, whole):
    [out] = front(client)
    assert out.text == PROMPT + whole.text


def test_streaming_pieces_concatenate_and_never_carry_the_prompt(client, whole):
    pieces = front(client, stream=True)
    assert len(pieces) == 12 and "".join(p.text for p in pieces) == whole.text


def test_stop_words_are_cut_like_vllm_stop_strings(client, whole):
    word = whole.text.split()[1]
    [out] = front(client, exclude_input_in_output=True, stop_words=[word, "never-generated"])
    assert out.text == whole.text[: whole.text.index(word)]
    pieces = front(client, stream=True, stop_words=[word])
    assert "".join(p.text for p in pieces) == out.text


def test_end_id_replaces_the_models_eos(client, whole, hf_tokenizer):
    ids = hf_tokenizer(whole.text, add_special_tokens=False).input_ids
    [out] = front(client, exclude_input_in_output=True, end_id=ids[2])
    assert out.text == hf_tokenizer.decode(ids[:2])


def test_bad_words_change_the_answer(client, whole):
    first = whole.text.split()[0]
    [out] = front(client, exclude_input_in_output=True, bad_words=[" " + first])
    assert not out.text.startswith(" " + first)


def test_sampling_inputs_are_honoured(client):
    a = front(client, exclude_input_in_output=True, top_k=40, temperature=1.0, seed=7)
    b = front(client, exclude_input_in_output=True, top_k=40, temperature=1.0, seed=7)
    c = [front(client, exclude_input_in_output=True, top_k=40, temperature=1.0, seed=s)[0].text for s in (8, 9)]
    assert a == b and len({a[0].text, *c}) > 1


@pytest.mark.parametrize(
    "inputs, message",
    [
        ({"beam_width": 2}, "Input 'beam_width' is not supported by this server: beam search is not served"),
        ({"num_return_sequences": 3}, "Input 'num_return_sequences' is not supported"),
        ({"return_log_probs": True}, "Input 'return_log_probs' is not supported"),
        ({"return_generation_logits": True}, "Input 'return_generation_logits' is not supported"),
        ({"lora_task_id": 1}, "Input 'lora_task_id' is not supported by this server: LoRA adapters are not served"),
        ({"guided_decoding_guide": ["{}"]}, "Input 'guided_decoding_guide' is not supported"),
        ({"decoder_text_input": ["x"]}, "Input 'decoder_text_input' is not supported"),
        ({"temperature": -1.0, "top_k": 5}, "temperature must be non-negative, got -1.0."),
        ({"presence_penalty": 3.0}, "presence_penalty must be in [-2, 2], got 3.0."),
        ({"min_tokens": 40}, "min_tokens must be less than or equal to max_tokens=12, got 40."),
    ],
)
def test_what_the_front_cannot_honour_is_a_400(client, inputs, message):
    with pytest.raises(RequestError) as e:
        front(client, **inputs)
    assert message in e.value.message
    assert e.value.is_client_error, e.value.status  # HTTP 400 / gRPC INVALID_ARGUMENT, on streams too
    assert client.is_ready()


def test_no_op_values_are_accepted(client, whole):
    [out] = front(
        client,
        exclude_input_in_output=True,
        beam_width=1,
        num_return_sequences=1,
        return_log_probs=False,
        length_penalty=1.0,
        repetition_penalty=1.0,
    )
    assert out.text == whole.text


# --- vLLM's output rules in completion / chat ----------------------------------------------------


def gen(client, stream=False, **sp):
    return list(client.generate("completion", prompt=PROMPT, max_tokens=12, stream=stream, sampling_params=sp))


def test_include_stop_str_in_output(client, whole):
    word = whole.text.split()[1]
    [out] = gen(client, stop=[word], include_stop_str_in_output=True)
    assert out.text == whole.text[: whole.text.index(word) + len(word)]
    assert "".join(p.text for p in gen(client, True, stop=[word], include_stop_str_in_output=True)) == out.text


def test_stop_token_ids_end_generation_and_leave_their_text_out(client, whole):
    k = next(k for k in range(3, 12) if whole.output_ids[k] not in whole.output_ids[:k])  # its first occurrence
    [out] = gen(client, stop_token_ids=[whole.output_ids[k]])
    assert out.output_ids == whole.output_ids[: k + 1]
    [inc] = gen(client, stop_token_ids=[whole.output_ids[k]], include_stop_str_in_output=True)
    assert inc.output_ids == out.output_ids and len(inc.text) > len(out.text) and inc.text.startswith(out.text)


def test_min_tokens_holds_off_a_stop_string(client, whole):
    word = whole.text.split()[0]
    [early] = gen(client, stop=[word])
    assert early.text == whole.text[: whole.text.index(word)]
    [held] = gen(client, stop=[word], min_tokens=6)
    assert len(held.output_ids) >= 6


def test_ignore_eos_generates_past_the_end(client):
    messages = [{"role": "user", "content": "Say hi."}]
    [short] = list(client.generate("chat", messages=messages, max_tokens=64))
    assert len(short.output_ids) < 64, "the model must end this answer by itself for the test to mean anything"
    [long] = list(client.generate("chat", messages=messages, max_tokens=64, sampling_params={"ignore_eos": True}))
    assert len(long.output_ids) == 64


def test_penalties_change_a_repetitive_answer(client):
    prompt = "one one one one one one"
    [plain] = list(client.generate("completion", prompt=prompt, max_tokens=8))
    [pen] = list(
        client.generate(
            "completion",
            prompt=prompt,
            max_tokens=8,
            sampling_params={"repetition_penalty": 2.0, "frequency_penalty": 2.0},
        )
    )
    assert plain.output_ids != pen.output_ids
