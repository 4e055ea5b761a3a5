"""The text encoding engine: ``fastokens`` where proven equal to Hugging Face, else Hugging Face.

Every id the renderer returns must equal transformers'. These tests hold the fast engine to that
on the three real tokenizers the project carries (SmolLM2 byte-level BPE, Qwen3 with NFC and a
split regex, Mistral tekken), on generated hostile text, real source text, every added token,
truncation on both sides, ``split_special_tokens``; and check that the load-time gate refuses
an engine that disagrees.
"""

from __future__ import annotations

import glob
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from renderer import tokenizer_backend
from renderer.tokenizer import EncodeOptions, Tokenizer


ROOT = Path(__file__).resolve().parents[2]

NAMES = ("smollm2", "qwen3", "mistral")


@pytest.fixture(scope="module")
def tokenizer_dirs(model_dir) -> dict[str, Path]:
    from model_builders.reference_tokenizers import build

    return {"smollm2": model_dir, **build(ROOT / "build" / "models" / "tokenizers")}


@pytest.fixture(scope="module")
def pairs(tokenizer_dirs) -> dict[str, tuple[Tokenizer, Tokenizer]]:
    """name -> (auto backend, Hugging Face backend) on the same folder."""
    return {
        n: (
            Tokenizer.from_pretrained(tokenizer_dirs[n], backend="auto"),
            Tokenizer.from_pretrained(tokenizer_dirs[n], backend="huggingface"),
        )
        for n in NAMES
    }


OPTIONS = [
    EncodeOptions(add, n, side) for add in (False, True) for n in (None, 0, 1, 2, 7, 64) for side in ("left", "right")
]


def assert_same(pair: tuple[Tokenizer, Tokenizer], texts: list[str], opts: EncodeOptions) -> None:
    fast, hf = pair
    got = [e.ids for e in fast.encode_batch(texts, opts)]
    want = [e.ids for e in hf.encode_batch(texts, opts)]
    for text, g, w in zip(texts, got, want):
        assert g == w, f"{opts}: {text[:80]!r}: fastokens {g[:10]} != Hugging Face {w[:10]}"


@pytest.mark.parametrize("name", NAMES)
def test_auto_selects_fastokens_for_the_carried_tokenizers(pairs, name):
    fast, hf = pairs[name]
    assert fast.backend.name == "fastokens", fast.backend.reason
    assert hf.backend.name == "huggingface"


# Fragments that stress pre-tokenizer regexes and added-token matching, mixed into random text.
FRAGMENTS = [
    "'s",
    "'S",
    "'re",
    "'LL",
    " 's",
    "don't",
    "\r\n",
    "\n\n",
    "   ",
    "\t",
    "\u00a0",
    "\u3000",
    "\u2028",
    "\u200b",
    "\ufeff",
    "e\u0301",
    "👨\u200d👩\u200d👧",
    "🇫🇷",
    "１２３",
    "٣",
    "1234567",
    "中文",
    "ひら",
    "한국",
    "ǅ",
    "ʰ",
    "...",
    "!?",
    "x" * 40,
    " " * 17,
    "\x00",
    "\x7f",
]


@st.composite
def hostile_text(draw, added: list[str]) -> str:
    parts = draw(
        st.lists(
            st.one_of(
                st.text(max_size=30),  # any code point but surrogates
                st.sampled_from(FRAGMENTS),
                st.sampled_from(added or ["x"]),
            ),
            max_size=12,
        )
    )
    return "".join(parts)


@pytest.mark.parametrize("name", NAMES)
def test_generated_text_matches_hugging_face(pairs, name):
    fast, hf = pairs[name]
    added = [t.content for t in hf.hf.backend_tokenizer.get_added_tokens_decoder().values()]

    @settings(
        max_examples=150,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(texts=st.lists(hostile_text(added), min_size=1, max_size=4), opts=st.sampled_from(OPTIONS))
    def check(texts, opts):
        assert_same(pairs[name], texts, opts)

    check()


def _source_windows(n: int, seed: int) -> list[str]:
    """Windows of real text: this repository's code and docs."""
    rng = random.Random(seed)
    files = sorted(
        glob.glob(str(ROOT / "*" / "*.py")) + glob.glob(str(ROOT / "docs" / "*.md")) + glob.glob(str(ROOT / "*.md"))
    )
    out = []
    for f in files:
        text = Path(f).read_text(encoding="utf-8", errors="replace")
        for _ in range(3):
            a = rng.randrange(max(1, len(text)))
            out.append(text[a : a + rng.choice([40, 400, 4000])])
    rng.shuffle(out)
    return out[:n]


@pytest.mark.parametrize("name", NAMES)
def test_real_text_matches_hugging_face(pairs, name):
    texts = _source_windows(300, seed=NAMES.index(name))
    assert len(texts) >= 100
    for opts in (
        EncodeOptions(False, None, "right"),
        EncodeOptions(True, None, "right"),
        EncodeOptions(True, 100, "left"),
        EncodeOptions(True, 100, "right"),
    ):
        assert_same(pairs[name], texts, opts)


@pytest.mark.parametrize("name", NAMES)
def test_every_added_token_in_context_matches(pairs, name):
    _, hf = pairs[name]
    added = [t.content for t in hf.hf.backend_tokenizer.get_added_tokens_decoder().values()]
    texts = [
        f"{pre}{tok}{post}"
        for tok in added
        for pre, post in (("", ""), ("a", "b"), (" ", " "), ("\n", "\n"), ("  x", "y  "))
    ]
    assert_same(pairs[name], texts, EncodeOptions(False, None, "right"))
    assert_same(pairs[name], texts, EncodeOptions(True, 3, "left"))


def test_split_special_tokens_matches(tokenizer_dirs):
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(tokenizer_dirs["qwen3"], split_special_tokens=True)
    fast = Tokenizer(hf_tok, backend="auto")
    hf = Tokenizer(AutoTokenizer.from_pretrained(tokenizer_dirs["qwen3"], split_special_tokens=True), "huggingface")
    assert fast.backend.name == "fastokens", fast.backend.reason
    texts = ["<|im_start|>user\nhi<|im_end|>", "a<|endoftext|>b", "<think>x</think>"]
    got = [e.ids for e in fast.encode_batch(texts, EncodeOptions(False, None, "right"))]
    want = [e.ids for e in hf.encode_batch(texts, EncodeOptions(False, None, "right"))]
    assert got == want
    # Split: the special token's text is tokenized as text, so it is more than one id.
    assert len(got[0]) > 5


def test_offsets_stay_on_hugging_face(pairs):
    fast, hf = pairs["smollm2"]
    opts = EncodeOptions(True, None, "right")
    got = fast.encode_batch(["Hello there, world"], opts, offsets=True)[0]
    want = hf.encode_batch(["Hello there, world"], opts, offsets=True)[0]
    assert got.offsets == want.offsets and got.offsets
    assert got.ids == want.ids


def assert_same_arrays(pair: tuple[Tokenizer, Tokenizer], texts: list[str], add_special_tokens: bool) -> None:
    """The array path (whole texts, one int32 array each) against Hugging Face's ids."""
    fast, hf = pair
    want = [e.ids for e in hf.encode_batch(texts, EncodeOptions(add_special_tokens, None, "right"))]
    for text, w in zip(texts, want):
        got = fast.encode_array(text, add_special_tokens)
        if got is None:
            # Only a text fastokens refuses (a byte with no token): the full path answers it.
            with pytest.raises((ValueError, RuntimeError)):
                fast._fast.encode_batch(
                    [text],
                    add_special_tokens=add_special_tokens,
                    max_length=None,
                    side="right",
                    split_special_tokens=False,
                )
            continue
        assert got.dtype == np.int32, text[:80]
        assert got.tolist() == w, f"{text[:80]!r}: array path {got[:10]} != Hugging Face {w[:10]}"


@pytest.mark.parametrize("name", NAMES)
def test_array_path_matches_hugging_face(pairs, name):
    fast, hf = pairs[name]
    added = [t.content for t in hf.hf.backend_tokenizer.get_added_tokens_decoder().values()]
    texts = _source_windows(150, seed=10 + NAMES.index(name))
    texts += [f"{pre}{tok}{post}" for tok in added for pre, post in (("", ""), ("a", "b"), ("\n", " "))]
    for add in (False, True):
        assert_same_arrays(pairs[name], texts, add)

    @settings(
        max_examples=100,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(text=hostile_text(added), add=st.booleans())
    def check(text, add):
        assert_same_arrays(pairs[name], [text], add)

    check()


def test_array_path_keeps_split_special_tokens(tokenizer_dirs):
    from transformers import AutoTokenizer

    fast = Tokenizer(AutoTokenizer.from_pretrained(tokenizer_dirs["qwen3"], split_special_tokens=True), "auto")
    hf = Tokenizer(AutoTokenizer.from_pretrained(tokenizer_dirs["qwen3"], split_special_tokens=True), "huggingface")
    assert_same_arrays((fast, hf), ["<|im_start|>user\nhi<|im_end|>", "a<|endoftext|>b"], False)
    assert len(fast.encode_array("<|im_start|>", False)) > 1


def test_array_path_is_none_on_hugging_face(pairs):
    _, hf = pairs["smollm2"]
    assert hf.encode_array("Hello", False) is None


# --- the gate ---------------------------------------------------------------------------------


class _WrongEngine(tokenizer_backend.FastokensEngine):
    """An engine that drops the last id of every text: what the load-time probes must catch."""

    def encode_batch(self, texts, **kw):
        return [ids[:-1] for ids in super().encode_batch(texts, **kw)]


class _WrongArrayEngine(tokenizer_backend.FastokensEngine):
    """An engine whose array path alone drops the last id: the probes hold that path too."""

    def encode_array(self, text, **kw):
        return super().encode_array(text, **kw)[:-1]


def test_gate_refuses_an_engine_whose_array_path_disagrees(pairs, monkeypatch):
    _, hf = pairs["smollm2"]
    monkeypatch.setattr(tokenizer_backend, "FastokensEngine", _WrongArrayEngine)
    tok = Tokenizer(hf.hf, "auto")
    assert tok.backend.name == "huggingface"
    assert "as an array" in tok.backend.reason
    assert tok.encode_array("Hello", False) is None


def test_gate_refuses_an_engine_that_disagrees(pairs, monkeypatch, caplog):
    _, hf = pairs["smollm2"]
    monkeypatch.setattr(tokenizer_backend, "FastokensEngine", _WrongEngine)
    tok = Tokenizer(hf.hf, "auto")
    assert tok.backend.name == "huggingface"
    assert "fastokens" in tok.backend.reason and "probe" in tok.backend.reason
    assert "using Hugging Face tokenizers" in caplog.text
    with pytest.raises(tokenizer_backend.BackendUnavailableError, match="tokenizer backend fastokens: probe"):
        Tokenizer(hf.hf, "fastokens")


def test_gate_falls_back_without_the_package(pairs, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_fastokens(name, *a, **kw):
        if name == "fastokens":
            raise ImportError("No module named 'fastokens'")
        return real_import(name, *a, **kw)

    _, hf = pairs["smollm2"]
    monkeypatch.setattr(builtins, "__import__", no_fastokens)
    tok = Tokenizer(hf.hf, "auto")
    assert tok.backend == tokenizer_backend.BackendChoice("huggingface", "the fastokens package is not installed")


def test_unknown_backend_is_refused(pairs):
    _, hf = pairs["smollm2"]
    with pytest.raises(ValueError, match="tokenizer backend must be one of auto, huggingface, fastokens, got 'rust'"):
        Tokenizer(hf.hf, "rust")


def test_gate_leaves_the_prototype_as_it_found_it(tokenizer_dirs):
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(tokenizer_dirs["smollm2"])
    backend = hf_tok.backend_tokenizer
    backend.enable_truncation(77, strategy="longest_first", direction="left")
    backend.enable_padding(pad_id=3, pad_token="<pad>", length=5)
    before = (backend.truncation, backend.padding, backend.encode_special_tokens)
    assert Tokenizer(hf_tok, "auto").backend.name == "fastokens"
    assert (backend.truncation, backend.padding, backend.encode_special_tokens) == before
