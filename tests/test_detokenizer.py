"""Streaming detokenization: pieces concatenate to the full text, never split a character,
never drop a space, and honour stop strings."""

from __future__ import annotations

import pytest

from renderer.detokenizer import IncrementalDetokenizer, find_stop, partial_stop_len, stream_delta, visible_text
from renderer.tokenizer import Tokenizer

TEXTS = [
    "Hello world, how are you?",
    "  leading and trailing spaces  ",
    "emoji 👩‍👩‍👧‍👦 family and 🇫🇷 flag",
    "中文字符测试，还有日本語のテキスト",
    "tabs\tand\nnewlines\n\n  indented",
    "ünïcödé àccents ñ",
    "<|im_start|>literal special<|im_end|> text",
    "x" * 50 + " end",
]


@pytest.fixture(scope="module")
def tok(model_dir):
    return Tokenizer.from_pretrained(model_dir)


def stream_all(tok, ids, stops=()):
    return [stream_delta(tok, ids[: k + 1], 1, final=(k == len(ids) - 1), stops=stops) for k in range(len(ids))]


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_concatenate_to_full_decode(tok, hf_tokenizer, text):
    ids = hf_tokenizer(text, add_special_tokens=False).input_ids
    pieces = stream_all(tok, ids)
    assert "".join(pieces) == hf_tokenizer.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("text", [t for t in TEXTS if any(ord(c) > 127 for c in t)])
def test_no_piece_carries_a_broken_character(tok, hf_tokenizer, text):
    ids = hf_tokenizer(text, add_special_tokens=False).input_ids
    for piece in stream_all(tok, ids):
        assert "\ufffd" not in piece


def test_multibyte_split_is_held_back_until_complete(tok, hf_tokenizer):
    char = "\U0001F9A9"  # one code point, four UTF-8 bytes
    ids = hf_tokenizer(char, add_special_tokens=False).input_ids
    assert len(ids) > 1, "this character must span several byte-level tokens for the test to mean anything"
    pieces = stream_all(tok, ids)
    assert all(p == "" for p in pieces[:-1]) and pieces[-1] == char


def test_final_flushes_an_incomplete_character(tok, hf_tokenizer):
    ids = hf_tokenizer("\U0001F9A9", add_special_tokens=False).input_ids[:-1]
    assert visible_text(tok, ids, final=False) == ""
    assert visible_text(tok, ids, final=True) == hf_tokenizer.decode(ids)


def test_stop_string_cuts_text_and_partial_match_is_held(tok, hf_tokenizer):
    text = "one two three four five"
    ids = hf_tokenizer(text, add_special_tokens=False).input_ids
    pieces = stream_all(tok, ids, stops=["three"])
    assert "".join(pieces) == "one two "
    assert visible_text(tok, hf_tokenizer(" one th", add_special_tokens=False).input_ids, final=False, stops=["three"]) == " one "


def test_find_and_partial_stop_helpers():
    assert find_stop("abcXYZdef", ["def", "XY"]).index == 3
    assert find_stop("abc", ["zz"]) is None
    assert partial_stop_len("hello wor", ["world", "word!"]) == 3
    assert partial_stop_len("hello", ["xyz"]) == 0


@pytest.mark.parametrize("text", TEXTS)
def test_incremental_detokenizer_matches_stateless(tok, hf_tokenizer, text):
    ids = hf_tokenizer(text, add_special_tokens=False).input_ids
    d = IncrementalDetokenizer(tok)
    got = [d.push([i], final=(k == len(ids) - 1)) for k, i in enumerate(ids)]
    assert got == stream_all(tok, ids)
    assert d.text == hf_tokenizer.decode(ids, skip_special_tokens=True)


def test_multi_token_responses(tok, hf_tokenizer):
    ids = hf_tokenizer(TEXTS[2], add_special_tokens=False).input_ids
    out, k = [], 0
    while k < len(ids):
        n = min(3, len(ids) - k)
        k += n
        out.append(stream_delta(tok, ids[:k], n, final=k == len(ids)))
    assert "".join(out) == hf_tokenizer.decode(ids)
