"""Output text from generated ids, held against vLLM's own output processor.

``fixtures/vllm/detokenize.json`` was recorded from vLLM 0.32's ``IncrementalDetokenizer`` driven
as its engine drives it (``fixtures/vllm/make_detokenize.py``): streamed pieces, final text, kept
ids, finish and stop reasons, over multi-byte text (CJK, emoji sequences, combining marks), stop
strings across token boundaries, ``include_stop_str_in_output``, ``min_tokens``, stop ids, EOS,
special tokens and ``max_tokens``. ``renderer.detokenizer`` must give the same, piece for piece.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from renderer.detokenizer import IncrementalDetokenizer, check_stop_strings
from renderer.tokenizer import Tokenizer

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "vllm" / "detokenize.json").read_text())


@pytest.fixture(scope="module")
def tok(model_dir):
    return Tokenizer.from_pretrained(model_dir)


def run(tok, case, chunk: int = 1):
    p = case["params"]
    stop_ids = [case["eos_token_id"]] + list(p.get("stop_token_ids", []))
    d = IncrementalDetokenizer(
        tok, case["prompt_ids"], stop=p.get("stop", ()), stop_token_ids=stop_ids,
        include_stop_str_in_output=p.get("include_stop_str_in_output", False),
        skip_special_tokens=p.get("skip_special_tokens", True), min_tokens=p.get("min_tokens", 0),
        max_tokens=case["max_tokens"],
    )
    pieces, progress = [], None
    ids = case["engine_ids"]
    for k in range(0, len(ids), chunk):
        progress = d.push(ids[k:k + chunk])
        pieces.append(d.next_text())
        if progress.finish_reason is not None:
            break
    return d, pieces, progress


def test_fixture_is_vllms():
    assert FIXTURE["vllm"].startswith("0.32") and len(FIXTURE["cases"]) >= 30


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda c: f"{c['params']}-{c['text'][:12]!r}")
def test_streamed_pieces_equal_vllms(tok, case):
    d, pieces, progress = run(tok, case)
    assert pieces == case["pieces"]
    assert d.text == case["text"] and "".join(pieces) == case["text"]
    assert d.output_ids == case["output_ids"]
    assert progress.finish_reason == case["finish_reason"]
    if case["stop_reason"] is not None:  # vLLM reports no stop reason for its EOS id; we report the id
        assert progress.stop_reason == case["stop_reason"]


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda c: f"{c['params']}-{c['text'][:12]!r}")
def test_several_ids_per_response_give_the_same_text(tok, case):
    """An engine may send several ids in one response: the text and kept ids do not change."""
    d, pieces, _ = run(tok, case, chunk=3)
    assert d.text == case["text"] and "".join(pieces) == case["text"]
    assert d.output_ids == case["output_ids"]


@pytest.mark.parametrize("case", [c for c in FIXTURE["cases"] if any(ord(ch) > 127 for ch in c["text"])],
                         ids=lambda c: c["text"][:12])
def test_no_piece_holds_a_broken_character(tok, case):
    _, pieces, _ = run(tok, case)
    assert all("\ufffd" not in p for p in pieces)


def test_check_stop_strings_picks_the_earliest_completed():
    assert check_stop_strings("abcXYZdef", 9, ["def", "XY"], False) == ("XY", 3)
    assert check_stop_strings("abcXYZdef", 9, ["def", "XY"], True) == ("XY", 5)
    assert check_stop_strings("abcdef", 3, ["def"], True) == ("def", -1)
    assert check_stop_strings("abcdef", 1, ["abc"], False) is None  # already searched
    assert check_stop_strings("abc", 0, ["abc"], False) is None


def test_slow_tokenizer_path_concatenates_to_decode(model_dir):
    """Tokenizers without a Rust core take the prefix/read-offset path; same text."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(model_dir)

    class Slow:  # the decode API only, no ``_tokenizer``
        def decode(self, ids, skip_special_tokens=False):
            return hf.decode(ids, skip_special_tokens=skip_special_tokens)

    for case in FIXTURE["cases"][:8]:
        d = IncrementalDetokenizer(Slow(), case["prompt_ids"])
        text = "".join((d.push([i]), d.next_text())[1] for i in case["engine_ids"])
        assert text == hf.decode(case["engine_ids"], skip_special_tokens=True).lstrip(" ") or \
            text == hf.decode(case["engine_ids"], skip_special_tokens=True)
