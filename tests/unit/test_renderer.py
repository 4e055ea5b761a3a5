"""The Renderer pipeline in-process: parity with transformers, batching, isolation, threads."""

from __future__ import annotations

import asyncio
import copy
from concurrent.futures import ThreadPoolExecutor

import pytest

from renderer import Renderer, RendererConfig, TextPrompt, TokensPrompt
from renderer.errors import (
    EmbedsError,
    EmptyPromptError,
    NoPromptError,
    PromptFormError,
    PromptTooLongError,
    PromptTypeError,
    TokenIdError,
)
from renderer.model_info import ModelInfo
from renderer.prompts import completion_prompt
from renderer.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def renderer(model_dir):
    return Renderer.from_config(RendererConfig(model_dir=str(model_dir)))


@pytest.fixture(scope="module")
def bos_hf(hf_tokenizer):
    """The default tokenizer made to add a BOS, like Llama/Mistral tokenizers do."""
    from tokenizers.processors import TemplateProcessing

    tok = copy.deepcopy(hf_tokenizer)
    tok.backend_tokenizer.post_processor = TemplateProcessing(
        single="<|im_start|> $A", special_tokens=[("<|im_start|>", tok.convert_tokens_to_ids("<|im_start|>"))]
    )
    return tok


@pytest.fixture(scope="module")
def bos_renderer(bos_hf, model_dir):
    return Renderer(Tokenizer(bos_hf), ModelInfo.from_model_dir(model_dir), RendererConfig(model_dir=str(model_dir)))


def ids_of(results):
    return [r.prompt_token_ids for r in results]


def test_batch_equals_transformers(renderer, hf_tokenizer):
    texts = ["Hello", "a longer sentence with   spaces", "中文", "🦩 emoji", ""]
    p = renderer.default_completion_params
    got = renderer.tokenize_prompts([TextPrompt(t) for t in texts[:-1]], p)
    assert ids_of(got) == [hf_tokenizer(t).input_ids for t in texts[:-1]]


def test_special_tokens_added_and_offsets_zero(bos_renderer, bos_hf):
    p = bos_renderer.default_completion_params.with_request({"return_token_offsets": True}, max_model_len=8192)
    [r] = bos_renderer.tokenize_prompts([TextPrompt("Hello world")], p)
    ref = bos_hf("Hello world", return_offsets_mapping=True)
    assert r.prompt_token_ids == ref.input_ids and r.prompt_token_ids[0] == bos_hf.bos_token_id
    assert r.token_offsets == [tuple(o) for o in ref.offset_mapping] and r.token_offsets[0] == (0, 0)
    q = p.with_request({"add_special_tokens": False}, max_model_len=8192)
    [r2] = bos_renderer.tokenize_prompts([TextPrompt("Hello world")], q)
    assert r2.prompt_token_ids == bos_hf("Hello world", add_special_tokens=False).input_ids


@pytest.mark.parametrize("side", ["left", "right"])
def test_truncation_keeps_special_tokens_like_transformers(bos_renderer, bos_hf, side):
    text = "one two three four five six seven eight"
    p = bos_renderer.default_completion_params.with_request(
        {"truncate_prompt_tokens": 4, "truncation_side": side, "return_token_offsets": True}, max_model_len=8192
    )
    [r] = bos_renderer.tokenize_prompts([TextPrompt(text)], p)
    ref_tok = copy.deepcopy(bos_hf)
    ref_tok.truncation_side = side
    ref = ref_tok(text, truncation=True, max_length=4, return_offsets_mapping=True)
    assert r.prompt_token_ids == ref.input_ids
    assert r.token_offsets == [tuple(o) for o in ref.offset_mapping]


def test_pretrim_shifts_offsets_back_to_the_sent_text(renderer, hf_tokenizer):
    text = "word " * 200  # 1000 chars; 2 tokens may span at most 2 * 81 chars: the text is pre-trimmed
    p = renderer.default_completion_params.with_request(
        {"truncate_prompt_tokens": 2, "truncation_side": "left", "return_token_offsets": True}, max_model_len=8192
    )
    [r] = renderer.tokenize_prompts([TextPrompt(text)], p)
    assert r.prompt_token_ids == hf_tokenizer(text).input_ids[-2:]
    for tid, (s, e) in zip(r.prompt_token_ids, r.token_offsets):
        assert text[s:e] == hf_tokenizer.decode([tid])
    assert r.token_offsets[-1][1] == len(text)


def test_bounded_tokenization_says_at_least(renderer):
    p = renderer.default_completion_params.with_request(
        {"max_total_tokens": 50, "max_output_tokens": 10}, max_model_len=8192
    )
    [r] = renderer.tokenize_prompts([TextPrompt("hello " * 100)], p)
    assert isinstance(r, PromptTooLongError)
    assert "your prompt contains at least 41 input tokens" in str(r)
    [r] = renderer.tokenize_prompts([TokensPrompt(list(range(45)))], p)
    assert "your prompt contains 45 input tokens, for a total of 55 tokens" in str(r)


def test_one_bad_item_does_not_fail_the_batch(renderer, hf_tokenizer):
    p = renderer.default_completion_params
    out = renderer.render_batch(
        [TextPrompt("good one"), TokensPrompt([10**7]), TextPrompt(""), TokensPrompt([5, 6])], [p] * 4
    )
    assert out[0].prompt_token_ids == hf_tokenizer("good one").input_ids
    assert isinstance(out[1], TokenIdError) and "Token id 10000000 is out of vocabulary" in str(out[1])
    assert isinstance(out[2], EmptyPromptError) and str(out[2]) == "The decoder prompt cannot be empty"
    assert out[3].prompt_token_ids == [5, 6]


def test_render_batch_keeps_step1_errors_in_place(renderer):
    p = renderer.default_completion_params
    err = PromptFormError([])
    out = renderer.render_batch([TextPrompt("a"), err], [p, p])
    assert out[0].prompt_token_ids and out[1] is err and out[0].arrival_time > 0


def test_needs_detokenization(renderer, hf_tokenizer):
    ids = hf_tokenizer("round trip text").input_ids
    p = renderer.default_completion_params.with_request({"needs_detokenization": True}, max_model_len=8192)
    [r] = renderer.tokenize_prompts([TokensPrompt(ids)], p)
    assert r.prompt == "round trip text"


def test_step1_forms(renderer):
    with pytest.raises(PromptFormError, match="Either prompt, prompt_token_ids or prompt_embeds must be provided"):
        completion_prompt()
    with pytest.raises(PromptFormError, match="got prompt and prompt_token_ids"):
        completion_prompt(text="a", token_ids=[1])
    assert not renderer.config.enable_prompt_embeds
    with pytest.raises(EmbedsError, match="^You must set `--enable-prompt-embeds` to input `prompt_embeds`.$"):
        renderer.render_prompt(completion_prompt(embeds=b"xx"))


def test_render_prompts_rules(renderer):
    with pytest.raises(NoPromptError, match="^You must pass at least one prompt$"):
        renderer.render_prompts([])
    with pytest.raises(PromptTypeError, match="Expected prompt\\['prompt'\\] to be a string"):
        renderer.render_prompts([TextPrompt(123)])  # type: ignore[arg-type]


def test_async_twins_match_sync(renderer):
    p = renderer.default_completion_params
    prompts = [TextPrompt("async works"), TokensPrompt([1, 2])]
    sync = ids_of(renderer.tokenize_prompts(prompts, p))
    assert ids_of(asyncio.run(renderer.tokenize_prompts_async(prompts, p))) == sync
    out = asyncio.run(renderer.render_batch_async(prompts, [p, p]))
    assert [o.prompt_token_ids for o in out] == sync


def test_thread_safe_under_mixed_truncation(renderer, hf_tokenizer):
    """Truncation state lives in the Rust tokenizer: threads must not see each other's."""
    text = "the quick brown fox jumps over the lazy dog " * 5
    full = hf_tokenizer(text).input_ids
    cases = [
        ({}, full),
        ({"truncate_prompt_tokens": 3, "truncation_side": "left"}, full[-3:]),
        ({"truncate_prompt_tokens": 5, "truncation_side": "right"}, full[:5]),
    ]

    def work(i):
        bag, expected = cases[i % 3]
        p = renderer.default_completion_params.with_request(bag, max_model_len=8192)
        [r] = renderer.tokenize_prompts([TextPrompt(text)], p)
        return r.prompt_token_ids == expected

    with ThreadPoolExecutor(8) as ex:
        assert all(ex.map(work, range(600)))


def test_warmup_pays_the_lazy_bounds_at_load(model_dir):
    """``warmup`` (the tokenize stage's initialize) computes the tokenizer's lazily cached bounds,
    so a client's first request does not walk the vocabulary."""
    fresh = Renderer.from_config(RendererConfig(model_dir=str(model_dir)))
    assert "max_chars_per_token" not in vars(fresh.tokenizer)
    assert fresh.warmup()
    assert vars(fresh.tokenizer)["max_chars_per_token"] == max(len(t) for t in fresh.tokenizer._proto.get_vocab())
