"""Token ids back to text, including an incremental mode that is safe for streaming.

Streaming text is defined so that the pieces always concatenate to the non-streamed text:
piece k is ``visible(ids[:k]) - visible(ids[:k-1])`` where ``visible`` decodes the whole
sequence, then, unless it is the final response, holds back

- trailing U+FFFD: a multi-byte character whose remaining bytes are still to come, and
- a tail that could be the start of a stop string.

Because ``visible`` is a pure function of the ids, the stage needs no per-request state: any
response can be detokenized on its own, whichever instance takes it. Decoding whole sequences
keeps every space the tokenizer's decoder would emit (decoding pieces alone drops SentencePiece
leading spaces).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

REPLACEMENT_CHAR = "\ufffd"


class Decoder(Protocol):
    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str: ...


@dataclass(frozen=True)
class StopMatch:
    """Where generated text meets a stop string."""

    index: int
    """Character index where the stop string starts; the text is cut there."""

    stop: str
    """The stop string found."""


def find_stop(text: str, stops: Sequence[str], start: int = 0) -> StopMatch | None:
    """The earliest stop string in ``text[start:]``; stops are searched from ``start`` so a
    caller scanning incrementally only rescans the tail."""
    best: StopMatch | None = None
    for s in stops:
        if not s:
            continue
        i = text.find(s, start)
        if i >= 0 and (best is None or i < best.index):
            best = StopMatch(i, s)
    return best


def partial_stop_len(text: str, stops: Sequence[str]) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of some stop string."""
    longest = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), longest, -1):
            if text.endswith(s[:n]):
                longest = n
                break
    return longest


def visible_text(
    decoder: Decoder,
    ids: Sequence[int],
    *,
    final: bool,
    stops: Sequence[str] = (),
    skip_special_tokens: bool = True,
) -> str:
    """The text a client may see after ``ids``: cut at a stop string, tail held back unless final."""
    text = decoder.decode(ids, skip_special_tokens=skip_special_tokens)
    match = find_stop(text, stops)
    if match is not None:
        return text[: match.index]
    if final:
        return text
    end = len(text)
    while end > 0 and text[end - 1] == REPLACEMENT_CHAR:
        end -= 1
    text = text[:end]
    hold = partial_stop_len(text, stops)
    return text[: len(text) - hold] if hold else text


def stream_delta(
    decoder: Decoder,
    ids: Sequence[int],
    n_new: int,
    *,
    final: bool,
    stops: Sequence[str] = (),
    skip_special_tokens: bool = True,
) -> str:
    """Text to send for a response that added the last ``n_new`` of ``ids``."""
    before = visible_text(decoder, ids[: len(ids) - n_new], final=False, stops=stops,
                          skip_special_tokens=skip_special_tokens) if n_new < len(ids) else ""
    now = visible_text(decoder, ids, final=final, stops=stops, skip_special_tokens=skip_special_tokens)
    # ``now`` extends ``before`` by construction; guard anyway so a tokenizer whose decoding is
    # not prefix-stable never makes us resend or drop text silently.
    return now[len(_common(before, now)):]


class IncrementalDetokenizer:
    """Per-request streaming detokenizer for callers that keep state (clients, in-process use)."""

    def __init__(self, decoder: Decoder, *, stops: Sequence[str] = (), skip_special_tokens: bool = True) -> None:
        self._decoder = decoder
        self._stops = tuple(stops)
        self._skip = skip_special_tokens
        self._ids: list[int] = []
        self._sent = ""

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        return self._sent

    def push(self, new_ids: Sequence[int], *, final: bool = False) -> str:
        """Add ids; return the new text that is safe to show."""
        self._ids.extend(int(i) for i in new_ids)
        now = visible_text(self._decoder, self._ids, final=final, stops=self._stops,
                           skip_special_tokens=self._skip)
        delta = now[len(_common(self._sent, now)):]
        self._sent = now
        return delta


def _common(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]
