"""The engine seam, live: the stand-in behaves as TensorRT-LLM's ``tensorrt_llm``, and a model
folder built from the upstream listing takes its place with nothing else changed.

Talks to the ``llm`` model itself over a gRPC stream (it is decoupled, as TensorRT-LLM's is when
it streams) and to the ensembles, with ``tritonclient``.
"""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import ports

from client import RendererClient, RequestError
from renderer.engine_tensors import ENGINE_INPUTS, encode_word_list
from tests.support.trtllm_engine import engine_folder

pytestmark = pytest.mark.live

PROMPT = "The capital of France is"
ROOT = Path(__file__).resolve().parents[2]


def engine_call(url: str, model: str, inputs: dict[str, np.ndarray], request_id: str = "", timeout: float = 120):
    """One request to a decoupled model: [(output_ids [beams, tokens], sequence_length [beams], final)]."""
    import tritonclient.grpc as grpcclient

    q: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(url)
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    try:
        tensors = []
        for name, arr in inputs.items():
            arr = np.asarray(arr)[np.newaxis, ...]
            from tritonclient.utils import np_to_triton_dtype

            t = grpcclient.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
            t.set_data_from_numpy(arr)
            tensors.append(t)
        c.async_stream_infer(model, tensors, request_id=request_id, enable_empty_final_response=True)
        out = []
        while True:
            result, error = q.get(timeout=timeout)
            if error is not None:
                raise RequestError(str(error.status()), error.message())
            final = result.get_response().parameters["triton_final_response"].bool_param
            ids = result.as_numpy("output_ids")
            n = result.as_numpy("sequence_length")
            out.append((None if ids is None else ids[0], None if n is None else n[0], final))
            if final:
                return out
    finally:
        c.stop_stream()
        c.close()


def prompt_ids(hf_tokenizer, text: str = PROMPT) -> np.ndarray:
    return np.asarray(hf_tokenizer(text).input_ids, np.int32)


def request(ids: np.ndarray, max_tokens: int = 8, **extra) -> dict[str, np.ndarray]:
    t = {
        "input_ids": ids,
        "input_lengths": np.array([len(ids)], np.int32),
        "request_output_len": np.array([max_tokens], np.int32),
        "runtime_top_k": np.array([1], np.int32),
    }
    for k, v in extra.items():  # typed as TensorRT-LLM types them
        t[k] = np.asarray([v] if np.isscalar(v) else v, dtype=ENGINE_INPUTS[k].np_dtype)
    return t


@pytest.fixture(scope="module")
def grpc_url(server):
    return f"{server.host}:{server.grpc_port}"


@pytest.fixture(scope="module")
def greedy(grpc_url, hf_tokenizer):
    """The stand-in's greedy ids for PROMPT, streamed."""
    responses = engine_call(grpc_url, "llm", request(prompt_ids(hf_tokenizer), 16, streaming=True))
    return [int(i) for ids, n, _ in responses if ids is not None for i in ids[0][: n[0]]]


def test_streaming_sends_deltas_and_the_final_flag_on_the_last(grpc_url, hf_tokenizer, greedy):
    responses = engine_call(grpc_url, "llm", request(prompt_ids(hf_tokenizer), 16, streaming=True))
    assert len(responses) == 16
    for ids, n, final in responses:
        assert ids.shape == (1, 1) and n.tolist() == [1]  # [beams, tokens], [beams]: only the new id
    assert [f for _, _, f in responses] == [False] * 15 + [True]  # the end is the flag, not a tensor
    assert len(greedy) == 16


def test_non_streamed_output_includes_the_prompt_unless_excluded(grpc_url, hf_tokenizer, greedy):
    ids = prompt_ids(hf_tokenizer)
    [(with_prompt, n, final)] = engine_call(grpc_url, "llm", request(ids, 16))
    assert final and with_prompt.shape == (1, len(ids) + 16) and n.tolist() == [len(ids) + 16]
    assert with_prompt[0].tolist() == ids.tolist() + greedy
    [(without, n, _)] = engine_call(grpc_url, "llm", request(ids, 16, exclude_input_in_output=True))
    assert without[0].tolist() == greedy and n.tolist() == [16]


def test_end_id_and_stop_words_end_generation(grpc_url, hf_tokenizer, greedy):
    ids = prompt_ids(hf_tokenizer)
    [(out, _, _)] = engine_call(grpc_url, "llm", request(ids, 16, exclude_input_in_output=True, end_id=greedy[5]))
    assert out[0].tolist() == greedy[: greedy.index(greedy[5]) + 1]
    words = encode_word_list([[999999], greedy[6:8]])  # a word never generated, then a two-id word
    [(out, _, _)] = engine_call(grpc_url, "llm", request(ids, 16, exclude_input_in_output=True, stop_words_list=words))
    assert out[0].tolist() == greedy[:8]  # the stop word's ids stay in the output, as TensorRT-LLM's do
    # Before min_tokens neither the end id nor a one-id stop word may end it.
    words = encode_word_list([[greedy[2]]])
    [(out, _, _)] = engine_call(
        grpc_url, "llm", request(ids, 16, exclude_input_in_output=True, stop_words_list=words, min_tokens=4)
    )
    assert len(out[0]) > 3 and greedy[2] not in out[0][:4].tolist()


def test_bad_words_are_never_generated(grpc_url, hf_tokenizer, greedy):
    words = encode_word_list([[greedy[0]]])
    [(out, _, _)] = engine_call(
        grpc_url, "llm", request(prompt_ids(hf_tokenizer), 6, exclude_input_in_output=True, bad_words_list=words)
    )
    assert out[0][0] != greedy[0]


def test_seed_makes_sampling_reproducible(grpc_url, hf_tokenizer):
    ids = prompt_ids(hf_tokenizer)

    def sample(seed):
        [(out, _, _)] = engine_call(
            grpc_url,
            "llm",
            {
                **request(ids, 12, exclude_input_in_output=True),
                "runtime_top_k": np.array([50], np.int32),
                "temperature": np.array([1.0], np.float32),
                "seed": np.array([seed], np.uint64),
            },
        )
        return out[0].tolist()

    assert sample(2**63 + 5) == sample(2**63 + 5)  # UINT64, the whole range
    assert len({tuple(sample(s)) for s in (1, 2, 3)}) > 1


def test_prompt_table_rows_generate_what_the_ids_generate(grpc_url, hf_tokenizer, model_dir, greedy):
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        table = f.get_tensor(next(k for k in f.keys() if k.endswith("embed_tokens.weight")))
    ids = prompt_ids(hf_tokenizer)
    rows = table[ids.tolist()].float().numpy().astype(np.float16)
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    fake = np.arange(vocab, vocab + len(ids), dtype=np.int32)
    [(out, _, _)] = engine_call(
        grpc_url,
        "llm",
        request(fake, 16, exclude_input_in_output=True, prompt_embedding_table=rows, prompt_vocab_size=len(ids)),
    )
    assert out[0].tolist() == greedy


def test_stop_request_cancels_by_request_id(grpc_url, hf_tokenizer):
    """TensorRT-LLM's cancellation: a second request with ``stop`` = true and the same id."""
    got: list = []
    t = threading.Thread(
        target=lambda: got.extend(
            engine_call(
                grpc_url,
                "llm",
                request(prompt_ids(hf_tokenizer), 400, streaming=True, min_tokens=400),
                request_id="long-1",
            )
        )
    )
    t.start()
    import time

    time.sleep(3)
    [(ids, _, final)] = engine_call(
        grpc_url, "llm", request(np.array([1], np.int32), 1, stop=True), request_id="long-1"
    )
    assert final and ids is None  # an empty final response, as TensorRT-LLM answers a stop
    t.join(timeout=60)
    assert not t.is_alive() and got and got[-1][2]
    assert sum(1 for ids, _, _ in got if ids is not None) < 400


@pytest.mark.parametrize("name, value", [("beam_width", 2), ("num_return_sequences", 2), ("return_log_probs", True)])
def test_inputs_it_cannot_honour_are_refused_by_name(grpc_url, hf_tokenizer, name, value):
    with pytest.raises(RequestError) as e:
        engine_call(grpc_url, "llm", request(prompt_ids(hf_tokenizer), 4, **{name: value}))
    assert f"Input '{name}'" in e.value.message and "not supported" in e.value.message


# --- multi-byte text through the generation ensembles ------------------------------------------


@pytest.mark.parametrize("prompt", ["日本の首都は", "中文：你好，世界！我们", "Emoji story: 😀😃😄"])
def test_streamed_multibyte_text_equals_the_non_streamed(client, hf_tokenizer, prompt):
    [whole] = client.generate("completion", prompt=prompt, max_tokens=24)
    pieces = list(client.generate("completion", prompt=prompt, max_tokens=24, stream=True))
    assert "".join(p.text for p in pieces) == whole.text
    assert all("\ufffd" not in p.text for p in pieces)
    assert [i for p in pieces for i in p.output_ids] == whole.output_ids
    # The case is only worth having if some character is split over several ids.
    assert any("\ufffd" in hf_tokenizer.decode([i]) for i in whole.output_ids), whole.text


# --- a tensorrt_llm folder from the upstream listing, and a model with two EOS ids --------------


@pytest.fixture(scope="module")
def two_eos(model_dir, hf_tokenizer, greedy, tmp_path_factory):
    """The default model, with a generation config that lists a second EOS id: the id greedy
    decoding of PROMPT reaches at step 5 (" answer"; the tokenizer's EOS stays the first)."""
    d = tmp_path_factory.mktemp("two-eos") / "model"
    d.mkdir()
    for f in model_dir.iterdir():
        (d / f.name).symlink_to(f)
    (d / "generation_config.json").unlink()
    gen = json.loads((model_dir / "generation_config.json").read_text())
    gen["eos_token_id"] = [hf_tokenizer.eos_token_id, greedy[5]]
    (d / "generation_config.json").write_text(json.dumps(gen))
    return d


@pytest.fixture(scope="module")
def trtllm_server(server_settings, two_eos, tmp_path_factory):
    from launcher import cli as launch

    engine = engine_folder(
        tmp_path_factory.mktemp("engine"), two_eos, ROOT / "model_repository" / "llm" / "1" / "model.py"
    )
    port = ports.port("engine")
    s = replace(
        server_settings,
        openai_port=0,
        model_dir=str(two_eos),
        engine_model_dir=str(engine),
        build_dir=str(tmp_path_factory.mktemp("trtllm-build")),
        models="completion,chat,ensemble",
        http_port=port,
        grpc_port=port + 1,
        metrics_port=port + 2,
    )
    launch.stop(s)
    if launch.start(s) != 0:
        pytest.fail(f"tritonserver did not load the ensembles against tensorrt_llm; see {s.log_file}")
    yield s
    launch.stop(s)


def test_ensembles_load_against_the_upstream_engine_config(trtllm_server):
    """Triton's load-time validation passed (start() waited for readiness of every model), and
    the ensembles call the engine by its folder name."""
    import tritonclient.http as httpclient

    c = httpclient.InferenceServerClient(f"{trtllm_server.host}:{trtllm_server.http_port}")
    for m in ("tensorrt_llm", "completion", "chat", "ensemble", "detokenize"):
        assert c.is_model_ready(m), m
    assert not c.is_model_ready("llm")
    cfg = c.get_model_config("tensorrt_llm")
    assert len(cfg["input"]) == 60 and len(cfg["output"]) == 19


def test_every_ensemble_generates_through_tensorrt_llm(trtllm_server, server, greedy):
    """Same ids through the upstream-declared engine folder as through ``llm`` (every BLS tensor
    passed Triton's request checks against the upstream config)."""
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    with (
        RendererClient(f"{trtllm_server.host}:{trtllm_server.grpc_port}", "grpc") as there,
        RendererClient(f"{server.host}:{server.grpc_port}", "grpc") as here,
    ):
        for kw in ({"prompt": "Once upon a time"}, {"messages": messages}):
            model = "chat" if "messages" in kw else "completion"
            a = list(there.generate(model, max_tokens=6, **kw))
            b = list(here.generate(model, max_tokens=6, **kw))
            assert greedy[5] not in b[0].output_ids, "pick another second EOS id for this comparison"
            assert a == b
        [out] = list(
            there.stream(
                "ensemble",
                {
                    "text_input": np.array([[b"Once upon a time"]], dtype=object),
                    "max_tokens": np.array([[6]], np.int32),
                    "exclude_input_in_output": np.array([[True]]),
                },
            )
        )
        [whole] = list(here.generate("completion", prompt="Once upon a time", max_tokens=6))
        assert out.text == whole.text


def test_a_second_eos_id_ends_generation_as_vllm_does(trtllm_server, server, greedy, hf_tokenizer):
    """The engine stops on one end id; the model's other EOS ids reach it as stop words. As in
    vLLM, the EOS id stays in the ids and its text is not in the output."""
    with RendererClient(f"{trtllm_server.host}:{trtllm_server.grpc_port}", "grpc") as c:
        [whole] = list(c.generate("completion", prompt=PROMPT, max_tokens=16))
        pieces = list(c.generate("completion", prompt=PROMPT, max_tokens=16, stream=True))
    assert whole.output_ids == greedy[: greedy.index(greedy[5]) + 1]
    assert whole.text == hf_tokenizer.decode(whole.output_ids[:-1])
    assert "".join(p.text for p in pieces) == whole.text
