"""Every TokenizeParams rule of vLLM's renderer, unit-tested without a server."""

from __future__ import annotations

import pytest

from renderer.errors import (
    FieldTypeError,
    InvalidParamsError,
    OutputTokensError,
    PromptTooLongError,
    TruncationSideError,
    TruncationSizeError,
    UnknownFieldError,
)
from renderer.params import TokenizeParams


def params(**kw) -> TokenizeParams:
    kw.setdefault("max_total_tokens", 100)
    return TokenizeParams(**kw)


def test_max_input_tokens_reserves_output():
    assert params(max_output_tokens=30).max_input_tokens == 70
    assert TokenizeParams(max_total_tokens=None).max_input_tokens is None


def test_output_tokens_over_total_is_refused():
    with pytest.raises(OutputTokensError, match=r"max_output_tokens=101 cannot be greater than max_total_tokens=100"):
        params(max_output_tokens=101)


def test_truncation_over_max_input_uses_vllm_wording():
    with pytest.raises(TruncationSizeError) as e:
        params(max_output_tokens=10, truncate_prompt_tokens=91)
    assert str(e.value) == (
        "truncate_prompt_tokens=91 cannot be greater than max_total_tokens - max_output_tokens = 90. "
        "Please request a smaller truncation size. (parameter=truncate_prompt_tokens, value=91)"
    )
    assert e.value.parameter == "truncate_prompt_tokens"


def test_bad_truncation_side():
    with pytest.raises(TruncationSideError) as e:
        params(truncation_side="middle")
    # vLLM's text, its parameter and value after it (renderers/params.py, TokenizeParams.__post_init__).
    assert (
        str(e.value) == "`truncation_side` must be either 'left' or 'right'. (parameter=truncation_side, value=middle)"
    )
    assert e.value.parameter == "truncation_side"


@pytest.mark.parametrize("trunc, expected", [(None, 91), (-1, 90), (5, 5), (0, 0)])
def test_encode_bound(trunc, expected):
    assert params(max_output_tokens=10, truncate_prompt_tokens=trunc).encode_max_length() == expected


def test_no_context_no_bound():
    assert TokenizeParams(max_total_tokens=None).encode_max_length() is None


def test_text_over_char_budget_fails_before_tokenizing():
    p = params(max_total_tokens=10, max_output_tokens=2)
    p.prepare_text("x" * 32, max_chars_per_token=4, tokenizer_side="right")  # exactly at the bound
    with pytest.raises(
        PromptTooLongError, match=r"You passed 33 input characters and requested 2 output tokens.*at most 32 characters"
    ):
        p.prepare_text("x" * 33, max_chars_per_token=4, tokenizer_side="right")


@pytest.mark.parametrize("side, expected_text, expected_shift", [("left", "6789", 6), ("right", "0123", 0)])
def test_pretrim_keeps_the_truncation_side(side, expected_text, expected_shift):
    p = params(truncate_prompt_tokens=2, truncation_side=side)
    text, shift = p.prepare_text("0123456789", max_chars_per_token=2, tokenizer_side="right")
    assert (text, shift) == (expected_text, expected_shift)


def test_pretrim_side_defaults_to_tokenizer():
    text, shift = params(truncate_prompt_tokens=1).prepare_text("abcdef", max_chars_per_token=2, tokenizer_side="left")
    assert (text, shift) == ("ef", 4)


def test_lower_case_applies_after_checks():
    assert params(do_lower_case=True).prepare_text("HeLLo", 4, "right") == ("hello", 0)
    assert params().prepare_text("HeLLo", 4, "right") == ("HeLLo", 0)


def test_pad_to_length_and_to_max_input():
    assert params(pad_prompt_tokens=5).pad([1, 2], pad_id=0) == [1, 2, 0, 0, 0]
    assert params(max_total_tokens=6, max_output_tokens=2, pad_prompt_tokens=-1).pad([7], pad_id=9) == [7, 9, 9, 9]
    assert params(pad_prompt_tokens=1).pad([1, 2], pad_id=0) == [1, 2]
    with pytest.raises(InvalidParamsError, match="pad token"):
        params(pad_prompt_tokens=4).pad([1], pad_id=None)


def test_a_pad_length_past_the_context_is_refused_before_it_is_built():
    """``pad_prompt_tokens`` is the client's number: 6e9 used to build a 6e9-element list (an out
    of memory in the stage) before the length check refused it. The check's own error comes first."""
    p = params(max_total_tokens=8, max_output_tokens=2, pad_prompt_tokens=6_095_289_856)
    with pytest.raises(PromptTooLongError, match="your prompt contains 6095289856 input tokens"):
        p.pad([1, 2], pad_id=0)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("ids", [[1, 2], [1, 2, 3, 4, 5, 6]])
@pytest.mark.parametrize("keep", [0, 1, 3, 5])
def test_pad_then_truncate_builds_only_what_is_kept(side, ids, keep):
    """With truncation after it, a huge pad length makes only the pads truncation keeps, and the
    result is the naive pad-then-truncate's."""
    for target in (4, 7, 10**12):
        p = params(pad_prompt_tokens=target, truncate_prompt_tokens=keep, truncation_side=side)
        naive_target = min(target, 50)  # beyond ``len(ids) + keep`` the naive result no longer changes
        naive = ids + [0] * max(naive_target - len(ids), 0)
        naive = naive[-keep:] if side == "left" and keep else naive[:keep] if keep else []
        padded = p.pad(ids, pad_id=0, tokenizer_side=side)
        assert len(padded) <= len(ids) + keep, (target, keep)  # never the 10**12 asked for
        assert p.truncate(padded, side) == naive, (target, keep)


@pytest.mark.parametrize(
    "n, side, expected",
    [
        (2, "left", [3, 4]),
        (2, "right", [1, 2]),
        (0, "left", []),
        (9, "left", [1, 2, 3, 4]),
        (None, "left", [1, 2, 3, 4]),
    ],
)
def test_truncate(n, side, expected):
    assert params(truncate_prompt_tokens=n, truncation_side=side).truncate([1, 2, 3, 4], "right") == expected


def test_truncate_minus_one_keeps_max_input():
    assert params(max_total_tokens=5, max_output_tokens=2, truncate_prompt_tokens=-1).truncate(
        list(range(10)), "left"
    ) == [7, 8, 9]


def test_length_check_wording():
    p = params(max_total_tokens=100, max_output_tokens=10)
    p.check_length(90)
    with pytest.raises(PromptTooLongError) as e:
        p.check_length(91)
    assert str(e.value) == (
        "This model's maximum context length is 100 tokens. However, you requested 10 output tokens "
        "and your prompt contains 91 input tokens, for a total of 101 tokens. Please reduce the length "
        "of the input prompt or the number of requested output tokens."
    )
    with pytest.raises(
        PromptTooLongError, match="your prompt contains at least 91 input tokens, for a total of at least 101"
    ):
        p.check_length(91, at_least=True)


class TestRequestBag:
    base = TokenizeParams(max_total_tokens=100)

    def test_overlay(self):
        p = self.base.with_request(
            {"truncate_prompt_tokens": 5, "truncation_side": "left", "add_special_tokens": False}, max_model_len=100
        )
        assert (p.truncate_prompt_tokens, p.truncation_side, p.add_special_tokens) == (5, "left", False)

    def test_empty_bag_is_defaults(self):
        assert self.base.with_request({}, max_model_len=100) is self.base
        assert self.base.with_request(None, max_model_len=100) is self.base

    def test_unknown_field(self):
        with pytest.raises(UnknownFieldError, match=r"Unknown field\(s\) in tokenize_params: max_tokenz"):
            self.base.with_request({"max_tokenz": 3}, max_model_len=100)

    @pytest.mark.parametrize(
        "field, value",
        [
            ("add_special_tokens", "yes"),
            ("add_special_tokens", 1),
            ("truncate_prompt_tokens", 2.5),
            ("truncate_prompt_tokens", True),
            ("max_output_tokens", "3"),
            ("return_token_offsets", None),
        ],
    )
    def test_wrong_types(self, field, value):
        with pytest.raises(FieldTypeError, match=rf"tokenize_params\.{field} must be"):
            self.base.with_request({field: value}, max_model_len=100)

    def test_not_an_object(self):
        with pytest.raises(FieldTypeError, match="tokenize_params must be a JSON object"):
            self.base.with_request([1, 2], max_model_len=100)

    @pytest.mark.parametrize(
        "field, value", [("truncate_prompt_tokens", -2), ("max_output_tokens", -1), ("max_total_tokens", 0)]
    )
    def test_ranges(self, field, value):
        with pytest.raises(FieldTypeError):
            self.base.with_request({field: value}, max_model_len=100)

    def test_total_over_model_context(self):
        with pytest.raises(
            InvalidParamsError, match="cannot be greater than the model's maximum context length of 100"
        ):
            self.base.with_request({"max_total_tokens": 101}, max_model_len=100)

    def test_nullable_fields(self):
        p = TokenizeParams(max_total_tokens=100, truncate_prompt_tokens=4).with_request(
            {"truncate_prompt_tokens": None}, max_model_len=100
        )
        assert p.truncate_prompt_tokens is None

    def test_cross_field_rules_run_on_the_result(self):
        with pytest.raises(TruncationSizeError):
            self.base.with_request({"max_output_tokens": 50, "truncate_prompt_tokens": 60}, max_model_len=100)
