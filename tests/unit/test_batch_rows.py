"""The rows of a batched request to the TensorRT-LLM front (renderer/batch_rows.py), with no
server: each row read as that prompt's request alone, stacked with padding into one batch and
taken apart again to exactly each row's tensors, a refused row named, and the refusal of a batch
by an engine deployed without decoupled mode in TensorRT-LLM's words."""

from __future__ import annotations

import numpy as np
import pytest

from renderer import batch_rows
from renderer.engine_tensors import GenerationResolver, decode_word_list
from renderer.errors import (
    BatchNeedsDecoupledEngineError,
    BatchRowError,
    MaxTokensError,
    RenderError,
    UnsupportedInputError,
    parameter_of,
)
from renderer.sampling import SamplingParams
from renderer.trtllm_front import parse_front_request


def batch(**columns):
    """TensorRT-LLM's batched form: each input [rows, ...], as --batch-inputs stacks them."""
    return {name: np.asarray(values) for name, values in columns.items()}


def test_each_row_is_read_as_that_row_alone():
    arrays = batch(
        max_tokens=[[8], [3]],
        top_k=[[1], [40]],
        stop_words=np.array([[b"Paris", b""], [b"dog", b"cat"]], dtype=object),
    )
    rows = batch_rows.each_row(
        batch_rows.rows_in(arrays), lambda row: parse_front_request(batch_rows.row_getter(arrays, row))
    )
    assert [r.max_tokens for r in rows] == [8, 3]
    assert [r.sampling.greedy for r in rows] == [True, False]
    assert [r.sampling.stop for r in rows] == [("Paris",), ("dog", "cat")]  # "" pads a row, as upstream skips it
    alone = parse_front_request(batch_rows.row_getter(batch(max_tokens=[[3]], top_k=[[40]]), 0))
    assert rows[1].sampling.top_k == alone.sampling.top_k == 40


def test_a_refused_row_names_the_row_and_keeps_its_own_message_and_parameter():
    arrays = batch(max_tokens=[[8], [8], [8]], beam_width=[[1], [1], [2]])
    with pytest.raises(BatchRowError) as e:
        batch_rows.each_row(3, lambda row: parse_front_request(batch_rows.row_getter(arrays, row)))
    alone = UnsupportedInputError("beam_width", "beam search is not served; use 1", 2)
    assert str(e.value) == f"Row 2 of the batch of 3 (batch_index 2): {alone}"
    assert e.value.row == 2 and isinstance(e.value.cause, UnsupportedInputError)
    assert e.value.parameter == "beam_width" == parameter_of(str(e.value))
    assert isinstance(e.value, RenderError)  # a client error (400 / INVALID_ARGUMENT)


def test_a_request_of_one_row_gets_the_rows_own_error():
    with pytest.raises(MaxTokensError):
        batch_rows.each_row(1, lambda row: (_ for _ in ()).throw(MaxTokensError(0)))


def test_a_fault_in_a_row_is_not_taken_for_a_refusal():
    with pytest.raises(ZeroDivisionError):
        batch_rows.each_row(2, lambda row: 1 // 0)


def test_unless_refused_raises_a_rows_error_in_place():
    assert batch_rows.unless_refused(5) == 5
    with pytest.raises(MaxTokensError):
        batch_rows.unless_refused(MaxTokensError(0))


def rows_like_ensemble_params(model_dir, specs):
    resolver = GenerationResolver.from_model_dir(str(model_dir))
    out = []
    for stop, bad, stop_ids in specs:
        sampling = SamplingParams(temperature=0.0, stop=stop, stop_token_ids=tuple(stop_ids))
        out.append(resolver.tensors(sampling, 8, bad_words=bad))
    return out


def test_stacked_rows_come_apart_as_each_row_alone(model_dir):
    rows = rows_like_ensemble_params(
        model_dir,
        [
            ((), (), []),
            (("Paris", "London is"), ("the",), [7, 9]),
            (("x",), (), [11]),
        ],
    )
    ids = [np.array([1, 2, 3], np.int32), np.array([4], np.int32), np.array([5, 6], np.int32)]
    for r, i in zip(rows, ids):
        r["input_ids"] = i
        r["input_lengths"] = np.array([i.size], np.int32)
    stacked = batch_rows.stack_rows(rows)
    assert stacked["input_ids"].shape == (3, 3) and stacked["request_output_len"].shape == (3, 1)
    assert stacked["stop_strings"].shape[0] == 3
    for k, alone in enumerate(rows):
        got = batch_rows.row_of(stacked, k)
        assert set(got) == set(alone)
        for name, arr in alone.items():
            if name in ("stop_words_list", "bad_words_list"):
                # A word list keeps the padding that is a word list's own end: the same words.
                assert decode_word_list(got[name][0], name) == decode_word_list(arr, name)
            else:
                assert got[name].shape == (1, *arr.shape), name
                assert got[name][0].tolist() == arr.tolist(), name


def test_word_lists_pad_as_tensorrt_llms_preprocessing():
    short = np.array([[5, 0], [1, -1]], np.int32)
    long = np.array([[5, 6, 7], [1, 3, -1]], np.int32)
    stacked = batch_rows.stack_rows([{"stop_words_list": short}, {"stop_words_list": long}])
    assert stacked["stop_words_list"][0].tolist() == [[5, 0, 0], [1, -1, -1]]


def test_a_tensor_no_rule_pads_is_a_bug_not_a_guess():
    with pytest.raises(ValueError, match="no padding"):
        batch_rows.stack_rows([{"output_ids": np.array([1])}, {"output_ids": np.array([1, 2])}])


@pytest.mark.parametrize("rows, decoupled", [(1, False), (1, True), (2, True), (64, True)])
def test_an_engine_takes_these(rows, decoupled):
    batch_rows.check_engine_takes(rows, decoupled)


def test_an_engine_without_decoupled_mode_refuses_a_batch_in_tensorrt_llms_words():
    with pytest.raises(BatchNeedsDecoupledEngineError) as e:
        batch_rows.check_engine_takes(2, engine_decoupled=False)
    # tensorrtllm_backend c2e65b8, inflight_batcher_llm/src/utils.cc, createRequestsFromInputTensors
    assert str(e.value) == "Batch size > 1 requires the tensorrt_llm backend to be using decoupled transaction policy"
    assert isinstance(e.value, RenderError)
