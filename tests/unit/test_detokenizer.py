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
from typing import Any

import pytest

from renderer.detokenizer import IncrementalDetokenizer, check_stop_strings
from renderer.tokenizer import Tokenizer

FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "detokenize.json").read_text())


@pytest.fixture(scope="module")
def tok(model_dir):
    return Tokenizer.from_pretrained(model_dir)


def run(tok, case, chunk: int = 1):
    p = case["params"]
    stop_ids = [case["eos_token_id"]] + list(p.get("stop_token_ids", []))
    d = IncrementalDetokenizer(
        tok,
        case["prompt_ids"],
        stop=p.get("stop", ()),
        stop_token_ids=stop_ids,
        include_stop_str_in_output=p.get("include_stop_str_in_output", False),
        skip_special_tokens=p.get("skip_special_tokens", True),
        min_tokens=p.get("min_tokens", 0),
        max_tokens=case["max_tokens"],
    )
    pieces, progress = [], None
    ids = case["engine_ids"]
    for k in range(0, len(ids), chunk):
        progress = d.push(ids[k : k + chunk])
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


@pytest.mark.parametrize(
    "case", [c for c in FIXTURE["cases"] if any(ord(ch) > 127 for ch in c["text"])], ids=lambda c: c["text"][:12]
)
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
        assert text == hf.decode(case["engine_ids"], skip_special_tokens=True).lstrip(" ") or text == hf.decode(
            case["engine_ids"], skip_special_tokens=True
        )


# --- work per id does not grow with the output's length ------------------------------------------
# Counted, not timed: what each pushed id hands to a decoder and to the stop search must be bounded
# by a constant, the same at id 2,000 as at id 1 (benchmarks/detokenize_stream.py times it).

N_LONG = 2000
WORDS = [
    "the",
    "renderer",
    "streams",
    "tokens,",
    "naïve",
    "café",
    "中文",
    "文本",
    "🦩",
    "👩‍👩‍👧",
    "e\u0301",
    "(x)",
    "\n",
    "  ",
    "1234",
    "Ω",
    "stop",
]


@pytest.fixture(scope="module")
def long_ids(tok) -> list[int]:
    """At least N_LONG ids of mixed text: multi-byte characters split across ids included."""
    import random

    rng = random.Random(7)
    text = " ".join(rng.choice(WORDS) for _ in range(3 * N_LONG))
    ids = tok.for_decoding(text, add_special_tokens=False).input_ids
    assert len(ids) >= N_LONG
    return ids[:N_LONG]


class _SpyStream:
    """``tokenizers.decoders.DecodeStream`` (not subclassable), counting the ids each step hands it."""

    real: Any = None
    primed: list[int] = []
    steps: list[int] = []

    def __init__(self, ids: list[int] | None = None, skip_special_tokens: bool = False) -> None:
        _SpyStream.primed.append(len(ids or []))
        self._inner = _SpyStream.real(ids=ids, skip_special_tokens=skip_special_tokens)

    def step(self, tokenizer: Any, token_id: Any) -> str | None:
        _SpyStream.steps.append(len(token_id) if isinstance(token_id, list) else 1)
        return self._inner.step(tokenizer, token_id)


def test_fast_path_hands_the_decoder_one_id_per_step(tok, long_ids, monkeypatch):
    import tokenizers.decoders

    monkeypatch.setattr(_SpyStream, "real", tokenizers.decoders.DecodeStream)
    monkeypatch.setattr(_SpyStream, "primed", [])
    monkeypatch.setattr(_SpyStream, "steps", [])
    monkeypatch.setattr(tokenizers.decoders, "DecodeStream", _SpyStream)
    whole_decodes: list[int] = []  # any decode of an id list from Python, the naive way
    hf = tok.for_decoding
    for name in ("decode", "batch_decode", "convert_ids_to_tokens"):
        real = getattr(type(hf), name)
        monkeypatch.setattr(
            type(hf),
            name,
            lambda self, ids, *a, _r=real, **k: (
                whole_decodes.append(len(ids) if isinstance(ids, list) else 1),
                _r(self, ids, *a, **k),
            )[1],
        )
    prompt = [1, 2, 3]
    d = IncrementalDetokenizer(tok, prompt, stop=["\x00never"])
    per_push: list[int] = []
    for i in long_ids:
        before = len(_SpyStream.steps)
        d.push([i])
        d.next_text()
        per_push.append(sum(_SpyStream.steps[before:]))
    assert _SpyStream.primed == [len(prompt)]  # the prompt primes the stream once, at the start
    assert per_push == [1] * N_LONG  # one id per pushed id, at id 2,000 as at id 1
    assert whole_decodes == [], f"decoded id lists from Python while streaming: {whole_decodes[:10]}"
    assert d.text == hf.decode(long_ids, skip_special_tokens=True)  # the prompt is special ids: skipped


def test_slow_path_decodes_a_bounded_window(tok, long_ids):
    """Tokenizers without a Rust core: each decode gets a few ids, never the output so far."""
    hf = tok.for_decoding
    sizes: list[list[int]] = []

    class Slow:  # the decode API only, no ``_tokenizer``
        def decode(self, ids, skip_special_tokens=False):
            sizes[-1].append(len(ids))
            return hf.decode(ids, skip_special_tokens=skip_special_tokens)

    d = IncrementalDetokenizer(Slow(), [1, 2, 3])
    for i in long_ids:
        sizes.append([])
        d.push([i])
    worst = max(max(s) for s in sizes)
    # A window only grows while ids end inside a character: a handful of ids (emoji sequences).
    assert worst <= 16, worst
    assert all(len(s) == 2 for s in sizes)  # two decodes per id, whatever its position
    assert d.text == hf.decode(long_ids, skip_special_tokens=True) or d.text == hf.decode(
        long_ids, skip_special_tokens=True
    ).lstrip(" ")


def test_stop_search_sees_only_new_text_and_a_stop_strings_length(tok, long_ids, monkeypatch):
    import renderer.detokenizer as detok_mod

    stops = ["\x00never", "@@ absent stop string @@"]
    overlap = max(map(len, stops)) - 1
    seen: list[tuple[int, int]] = []  # (characters searched, new characters)
    real = detok_mod.check_stop_strings

    def spy(text: str, new_chars: int, *a: Any) -> Any:
        seen.append((len(text), new_chars))
        return real(text, new_chars, *a)

    monkeypatch.setattr(detok_mod, "check_stop_strings", spy)
    d = IncrementalDetokenizer(tok, [1], stop=stops)
    for i in long_ids:
        d.push([i])
        d.next_text()
    assert d.finish_reason is None and len(seen) == N_LONG
    assert max(n - new for n, new in seen) == overlap  # never more than a stop string's reach back
    assert len(d.text) > 100 * overlap  # while the text grew far past it


class _WholeText:
    """The detokenizer as it was before its work per id was bounded: the whole text searched and
    re-sliced every step. The bounded one must give the same pieces, ids and reasons."""

    def __init__(self, tok: Any, prompt: list[int], **kw: Any) -> None:
        self.d = IncrementalDetokenizer(tok, prompt, **kw)  # its stream, flags and stop ids
        self.text, self.sent, self.ids, self.finish = "", 0, [], None

    def push(self, new_ids: list[int]) -> tuple[list[int], str | None, Any]:
        d = self.d
        ids = new_ids[: max(d.max_tokens - len(self.ids), 0)] if d.max_tokens is not None else list(new_ids)
        stop_id = next((i for i in ids if i in d.stop_token_ids), None)
        if stop_id is not None:
            ids = ids[: ids.index(stop_id) + 1]
        if not ids:
            return [], None, None
        decoded = ids[:-1] if stop_id is not None and not d.include else ids
        first_new, offsets = len(self.ids), [len(self.text)]
        for i in decoded:
            self.text += d._stream.step(i)
            offsets.append(len(self.text))
        if len(decoded) < len(ids):
            offsets.append(len(self.text))
        self.ids += ids
        if stop_id is not None:
            self.finish = "stop"
            return ids, "stop", stop_id
        if d.stop and len(self.ids) > d.min_tokens:
            check_from = offsets[max(d.min_tokens - first_new, 0)]
            hit = check_stop_strings(self.text, len(self.text) - check_from, d.stop, d.include)
            if hit is not None:
                s, cut = hit
                end = (len(self.text) if cut == -1 else cut) + (0 if d.include else len(s))
                n_kept = next((j for j in range(1, len(offsets)) if offsets[j] >= end), len(ids))
                del self.ids[first_new + n_kept :]
                if cut != -1:
                    self.text = self.text[:cut]
                self.finish = "stop"
                return ids[:n_kept], "stop", s
        if d.max_tokens is not None and len(self.ids) >= d.max_tokens:
            self.finish = "length"
            return ids, "length", None
        return ids, None, None

    def next_text(self) -> str:
        end = len(self.text) - (0 if self.finish else self.d._buffer)
        if end <= self.sent:
            return ""
        piece, self.sent = self.text[self.sent : end], end
        return piece


@pytest.mark.parametrize("seed", range(40))
def test_bounded_work_gives_the_whole_text_answers(tok, long_ids, seed):
    """Random stop strings taken from the text itself (so they hit, across ids), include or not,
    min_tokens, several ids per push: pieces, text, kept ids and reasons equal the whole-text way."""
    import random

    rng = random.Random(seed)
    ids = long_ids[rng.randrange(0, 1500) :][: rng.randrange(5, 400)]
    full = tok.for_decoding.decode(ids, skip_special_tokens=True)
    stops = []
    for _ in range(rng.randrange(0, 4)):
        a = rng.randrange(0, max(len(full) - 1, 1))
        stops.append(full[a : a + rng.randrange(1, 12)] or "x")
    kw = dict(
        stop=stops,
        include_stop_str_in_output=rng.random() < 0.4,
        min_tokens=rng.choice([0, 0, 3, 40]),
        max_tokens=rng.choice([None, len(ids) // 2 + 1]),
        stop_token_ids=rng.sample(ids, rng.randrange(0, 2)),
    )
    new, ref = IncrementalDetokenizer(tok, [1, 2], **kw), _WholeText(tok, [1, 2], **kw)
    k = 0
    while k < len(ids):
        n = rng.choice([1, 1, 1, 2, 5])
        p = new.push(ids[k : k + n])
        assert (p.ids, p.finish_reason, p.stop_reason) == ref.push(ids[k : k + n]), (k, kw)
        assert new.next_text() == ref.next_text(), (k, kw)
        k += n
        if p.finish_reason is not None:
            break
    assert (new.text, new.output_ids) == (ref.text, ref.ids)
