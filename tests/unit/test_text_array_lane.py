"""The text array lane (``Renderer.render_text_array``): what ``tokenize`` sends for a plain text
prompt, held to the full path (``render_batch`` without arrays) on ids, text, salt and errors.

The lane serves text prompts whose params ask for no truncation, padding or offsets, with the
ids as an int32 array from fastokens' flat buffer; it must answer exactly as the full path does,
including the context-length errors (the full path encodes to ``max_input_tokens + 1`` and
reports "at least" that many) and the empty-prompt error, and leave everything else to it.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from renderer import Renderer, RendererConfig, TextPrompt, TokensPrompt
from renderer.model_info import ModelInfo
from renderer.prompts import completion_prompt
from renderer.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("smollm2", "qwen3", "mistral", "smollm2+bos")


@pytest.fixture(scope="module")
def tokenizers(model_dir, hf_tokenizer) -> dict[str, Tokenizer]:
    from tokenizers.processors import TemplateProcessing

    from model_builders.reference_tokenizers import build

    dirs = build(ROOT / "build" / "models" / "tokenizers")
    bos = copy.deepcopy(hf_tokenizer)  # a post-processor that adds a BOS: special tokens count
    bos.backend_tokenizer.post_processor = TemplateProcessing(
        single="<|im_start|> $A", special_tokens=[("<|im_start|>", bos.convert_tokens_to_ids("<|im_start|>"))]
    )
    return {
        "smollm2": Tokenizer.from_pretrained(model_dir, backend="auto"),
        "qwen3": Tokenizer.from_pretrained(dirs["qwen3"], backend="auto"),
        "mistral": Tokenizer.from_pretrained(dirs["mistral"], backend="auto"),
        "smollm2+bos": Tokenizer(bos, "auto"),
    }


def renderer_for(tok: Tokenizer, model_dir: Path, max_model_len: int) -> Renderer:
    info = ModelInfo.from_model_dir(model_dir, max_model_len)
    return Renderer(tok, info, RendererConfig(model_dir=str(model_dir), max_model_len=max_model_len))


def params_variants(r: Renderer) -> list:
    """Chat and completion defaults, output tokens reserved, lower-casing: all lane params."""
    out = [r.default_completion_params, r.request_params(None, chat=True)]
    for n in (1, 5):
        if n < r.info.max_model_len:
            out.append(r.request_params(None, chat=True, max_output_tokens=n))
    out.append(r.request_params({"do_lower_case": True}))
    return out


def assert_same(r: Renderer, texts: list[str], params) -> int:
    """The lane's answers equal the full path's; returns how many the lane itself served."""
    prompts = [
        r.render_prompt(completion_prompt(text=t, cache_salt="s" if i % 2 else None)) for i, t in enumerate(texts)
    ]
    lane = r.render_batch(prompts, [params] * len(prompts), ids_as_array=True)
    full = r.render_batch(prompts, [params] * len(prompts))
    served = 0
    for text, a, b in zip(texts, lane, full):
        if isinstance(b, Exception):
            assert type(a) is type(b) and str(a) == str(b), f"{text[:60]!r}: lane {a!r} != full {b!r}"
            continue
        assert not isinstance(a, Exception), f"{text[:60]!r}: lane refused with {a!r}"
        if isinstance(a.prompt_token_ids, np.ndarray):
            served += 1
            assert a.prompt_token_ids.dtype == np.int32
        got = a.prompt_token_ids.tolist() if isinstance(a.prompt_token_ids, np.ndarray) else a.prompt_token_ids
        assert got == b.prompt_token_ids, f"{text[:60]!r}: lane {got[:8]} != full {b.prompt_token_ids[:8]}"
        assert (a.prompt, a.token_offsets, a.cache_salt, a.prompt_embeds) == (
            b.prompt,
            b.token_offsets,
            b.cache_salt,
            b.prompt_embeds,
        )
    return served


TEXTS = [
    "Hello",
    "a longer sentence with   spaces and\nnew lines\n\n",
    "中文 and 日本語, 🦩 emoji, e\u0301",
    "HeLLo ÀÉÎ ß",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "",
    " ",
    "\x16",  # a byte fastokens has no token for: the full path answers from Hugging Face
    "word " * 3,
    "word " * 12,
    "word " * 40,
    "x" * 500,
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("max_model_len", [8, 16, 64, 8192])
def test_lane_answers_as_the_full_path(tokenizers, model_dir, name, max_model_len):
    r = renderer_for(tokenizers[name], model_dir, max_model_len)
    served = sum(assert_same(r, TEXTS, p) for p in params_variants(r))
    assert served > 0, "the lane served nothing: the comparison above proved nothing about it"


@pytest.mark.parametrize("name", NAMES)
def test_lane_answers_as_the_full_path_on_generated_text(tokenizers, model_dir, name):
    small, large = renderer_for(tokenizers[name], model_dir, 24), renderer_for(tokenizers[name], model_dir, 8192)

    @settings(
        max_examples=120,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(
        texts=st.lists(st.text(max_size=80) | st.sampled_from(TEXTS), min_size=1, max_size=4),
        which=st.integers(0, 4),
    )
    def check(texts, which):
        for r in (small, large):
            variants = params_variants(r)
            assert_same(r, texts, variants[which % len(variants)])

    check()


def test_lane_leaves_other_requests_to_the_full_path(tokenizers, model_dir):
    r = renderer_for(tokenizers["smollm2"], model_dir, 8192)
    text = TextPrompt("Hello there")
    for bag in ({"truncate_prompt_tokens": 2}, {"pad_prompt_tokens": 9}, {"return_token_offsets": True}):
        p = r.request_params(bag)
        assert r.render_text_array(text, p, 0.0) is None, bag
        (res,) = r.render_batch([text], [p], ids_as_array=True)
        assert isinstance(res.prompt_token_ids, list), bag
    p = r.default_completion_params
    assert r.render_text_array(TokensPrompt([1, 2]), p, 0.0) is None
    (res,) = r.render_batch([TextPrompt("Hello there")], [p], ids_as_array=True)
    assert isinstance(res.prompt_token_ids, np.ndarray)
    (res,) = r.render_batch([TextPrompt("Hello there")], [p])
    assert isinstance(res.prompt_token_ids, list)  # callers that did not ask keep lists


def test_lane_is_off_on_hugging_face(model_dir):
    r = renderer_for(Tokenizer.from_pretrained(model_dir, backend="huggingface"), model_dir, 8192)
    assert r.render_text_array(TextPrompt("Hello"), r.default_completion_params, 0.0) is None
