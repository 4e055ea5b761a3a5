"""Reading requests at the seam, with no server: the ``ensemble`` front's TensorRT-LLM tensors
(renderer/trtllm_front.py), ``sampling_params`` (renderer/sampling.py), the tensors
``generation_params`` makes of them (renderer/engine_tensors.py), and an engine's reading of
``tensorrt_llm`` tensors (engines/trtllm_inputs.py)."""

from __future__ import annotations

import numpy as np
import pytest

from engines import trtllm_inputs
from renderer.engine_tensors import GenerationResolver, StopPolicy, decode_word_list
from renderer.errors import InvalidParamsError, TensorError, UnsupportedInputError
from renderer.sampling import SamplingParams
from renderer.trtllm_front import parse_front_request


def getter(**tensors):
    return lambda name: None if name not in tensors else np.asarray(tensors[name])


@pytest.mark.parametrize(
    "inputs, greedy",
    [
        ({}, True),
        ({"top_k": 1, "temperature": 0.7}, True),
        ({"top_k": 0, "top_p": 0.0}, True),
        ({"temperature": 0.0, "top_k": 50}, True),
        ({"top_k": 50}, False),
        ({"top_p": 0.9}, False),
    ],
)
def test_front_greedy_is_tensorrt_llms(inputs, greedy):
    req = parse_front_request(getter(max_tokens=[8], **inputs))
    assert req.sampling.greedy == greedy
    if not greedy:
        assert req.sampling.temperature == inputs.get("temperature", 1.0)


def test_front_reads_words_ids_and_flags():
    req = parse_front_request(
        getter(
            max_tokens=[8],
            stop_words=np.array([b"\n", b"", "é".encode()], object),
            bad_words=np.array([b"bad"], object),
            end_id=[7],
            pad_id=[0],
            stream=[True],
            exclude_input_in_output=[True],
            seed=[2**64 - 1],
            min_tokens=[3],
        )
    )
    assert req.sampling.stop == ("\n", "é") and req.bad_words == ("bad",)
    assert (req.end_id, req.pad_id, req.stream, req.exclude_input_in_output) == (7, 0, True, True)
    assert req.sampling.seed == 2**64 - 1 and req.sampling.min_tokens == 3


@pytest.mark.parametrize(
    "inputs, message",
    [
        (
            {"beam_width": [4]},
            "Input 'beam_width' is not supported by this server: beam search is not served; use 1 (got 4)",
        ),
        ({"lora_task_id": [3]}, "Input 'lora_task_id' is not supported"),
        ({"return_perf_metrics": [True]}, "Input 'return_perf_metrics' is not supported"),
        ({"max_tokens": [1, 2]}, "Input 'max_tokens' must hold exactly one element, got 2."),
        ({"stop_words": np.array([b"\xff"], object)}, "Input 'stop_words' is not valid UTF-8."),
        ({"repetition_penalty": [0.0]}, "repetition_penalty must be greater than zero, got 0.0."),
    ],
)
def test_front_refusals_are_named(inputs, message):
    with pytest.raises((UnsupportedInputError, TensorError, InvalidParamsError)) as e:
        parse_front_request(getter(**{"max_tokens": [8], **inputs}))
    assert message in str(e.value)


def test_front_accepts_no_op_values():
    req = parse_front_request(
        getter(max_tokens=[8], beam_width=[1], num_return_sequences=[1], return_log_probs=[False], length_penalty=[0.5])
    )
    assert req.max_tokens == 8


@pytest.mark.parametrize(
    "bag, message",
    [
        ({"temperature": 3}, "temperature must be in [0, 2], got 3.0."),
        ({"top_k": -2}, "top_k must be 0 (disable), or at least 1, got -2."),
        ({"top_k": 1.5}, "top_k must be an integer, got float"),
        ({"min_tokens": 9}, "min_tokens must be less than or equal to max_tokens=8, got 9."),
        ({"frequency_penalty": -3}, "frequency_penalty must be in [-2, 2], got -3.0."),
        ({"stop_token_ids": ["x"]}, "stop_token_ids must contain only integers, got ['x']."),
        ({"ignore_eos": "yes"}, "sampling_params.ignore_eos must be true or false"),
        ({"n": 2}, "Unknown field(s) in sampling_params: n."),
    ],
)
def test_sampling_params_refusals_use_vllms_words(bag, message):
    with pytest.raises(InvalidParamsError) as e:
        SamplingParams.from_request(bag, max_tokens=8)
    assert message in str(e.value)


def test_stop_policy_sends_every_other_eos_id_as_a_stop_word():
    s = SamplingParams(stop_token_ids=(9,))
    p = StopPolicy.resolve(s, tokenizer_eos=2, config_eos=[2, 5])
    assert (p.end_id, p.stop_token_ids, p.terminating_ids) == (2, (5, 9), (2, 5, 9))
    p = StopPolicy.resolve(SamplingParams(ignore_eos=True, stop_token_ids=(9,)), 2, [2, 5])
    assert (p.end_id, p.stop_token_ids) == (-1, (9,))


def test_generation_tensors(model_dir):
    r = GenerationResolver.from_model_dir(str(model_dir))
    t = r.tensors(SamplingParams(stop=("\n", "Paris"), seed=3), 16)
    assert t["runtime_top_k"].tolist() == [1] and t["temperature"].tolist() == [1.0]  # greedy, TensorRT-LLM's way
    assert t["seed"].dtype == np.uint64 and t["seed"].tolist() == [3]
    words = decode_word_list(t["stop_words_list"])
    assert (r.tokenizer.hf.encode("\n", add_special_tokens=False)[0],) in words
    assert [s.decode() for s in t["stop_strings"]] == ["\n", "Paris"]
    assert t["end_id"].tolist() == [r.tokenizer.eos_token_id] and t["stop_token_ids"].tolist() == [
        r.tokenizer.eos_token_id
    ]
    sampled = r.tensors(SamplingParams(temperature=0.5, top_k=3, top_p=0.8), 16)
    assert sampled["runtime_top_k"].tolist() == [3] and sampled["temperature"].tolist() == [0.5]


def test_engine_reads_tensorrt_llm_tensors():
    table = np.ones((2, 4), np.float16)
    req = trtllm_inputs.parse(
        getter(
            input_ids=[100, 101],
            input_lengths=[2],
            request_output_len=[5],
            prompt_embedding_table=table,
            prompt_vocab_size=[2],
            end_id=[2],
            stop_words_list=np.array([[4, 5, 6], [1, 3, -1]], np.int32),
            seed=[2**63 + 1],
            runtime_top_k=[1],
        ),
        vocab_size=100,
    )
    assert req.prompt_embeds.shape == (2, 4) and req.input_ids == [100, 101] and req.greedy
    assert req.stop_words == ((4,), (5, 6)) and req.seed == 2**63 + 1


def test_engine_refusals():
    base = dict(input_ids=[1, 2], input_lengths=[2], request_output_len=[5])
    with pytest.raises(
        UnsupportedInputError, match=r"Input 'beam_width' is not supported by this server: .* \(got 2\)"
    ) as e:
        trtllm_inputs.parse(getter(**base, beam_width=[2]), vocab_size=100)
    assert e.value.parameter == "beam_width"
    with pytest.raises(TensorError, match="input_lengths=3 does not match the 2 ids given"):
        trtllm_inputs.parse(getter(**{**base, "input_lengths": [3]}), vocab_size=100)
    with pytest.raises(TensorError, match=r"input_ids must be in \[0, 100\)"):
        trtllm_inputs.parse(getter(**{**base, "input_ids": [1, 100]}), vocab_size=100)
    with pytest.raises(InvalidParamsError, match="request_output_len must be at least 1"):
        trtllm_inputs.parse(getter(**{**base, "request_output_len": [0]}), vocab_size=100)


def test_a_plain_engine_refuses_streaming_in_tensorrt_llms_words():
    """TensorRT-LLM deployed without decoupled mode (``decoupled_mode: false``) refuses a streamed
    request; a decoupled one takes it, and a plain one takes a plain one."""
    from renderer.errors import EngineError

    streamed = getter(input_ids=[1, 2], request_output_len=[4], streaming=[True])
    with pytest.raises(EngineError) as e:
        trtllm_inputs.parse(streamed, 100, decoupled=False)
    assert str(e.value) == "Streaming is only supported if model is deployed using decoupled mode."
    assert trtllm_inputs.parse(streamed, 100).streaming
    plain = getter(input_ids=[1, 2], request_output_len=[4], streaming=[False])
    assert not trtllm_inputs.parse(plain, 100, decoupled=False).streaming


@pytest.mark.parametrize(
    "generated, ends",
    [
        ([5], False),  # min_tokens 2 not reached, even on end_id below
        ([9], False),
        ([5, 9], True),  # end_id
        ([5, 7], True),  # a one-id stop word, kept
        ([3, 4], False),  # a two-id word not yet complete
        ([3, 4, 5], True),  # ... complete
        ([4, 5], False),  # its tail alone is no stop word
        ([1, 2, 3], False),
    ],
)
def test_the_end_rule_is_tensorrt_llms(generated, ends):
    req = trtllm_inputs.EngineRequest(
        input_ids=[1], prompt_embeds=None, max_tokens=8, end_id=9, stop_words=((7,), (3, 4, 5)), min_tokens=2
    )
    assert req.ends(generated) is ends


def test_min_tokens_keeps_a_stop_word_that_completes_too_early():
    req = trtllm_inputs.EngineRequest(
        input_ids=[1], prompt_embeds=None, max_tokens=8, stop_words=((3, 4),), min_tokens=3
    )
    assert not req.ends([3, 4]) and req.ends([3, 4, 3, 4]) and not req.ends([3, 4, 3])
