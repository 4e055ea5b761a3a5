"""Generated ids back to text the way vLLM's output processor does it (``vllm/v1/engine/detokenizer.py``).

For one request, fed the engine's new ids as they arrive:

- incremental decoding primed with the prompt ids (``tokenizers``' ``DecodeStream``, which is
  what vLLM uses for fast tokenizers), so a piece never holds half a UTF-8 character and the
  first token's leading space is decoded in context; cost per token does not grow with length;
- the ids that end a request as a stop (end id, the other EOS ids, ``stop_token_ids``) end it
  wherever they come, stay in the ids, and their text is left out unless
  ``include_stop_str_in_output``;
- stop strings: the earliest one completed in the new text ends generation, and the text is cut
  before it (or after it, with ``include_stop_str_in_output``); never checked before
  ``min_tokens`` ids;
- while streaming, the last ``max(len(stop)) - 1`` characters are held back (they could be the
  start of a stop string) until the request finishes.

So the streamed pieces concatenate to exactly the non-streamed text.

Work per id is bounded by the id's own text, never by the output so far: the stream decodes a
window of a few ids, the text is kept as a list of pieces (joined once, when ``text`` is read),
and the stop search sees only the new characters and the ``max(len(stop)) - 1`` before them
(``benchmarks/detokenize_stream.py`` measures it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Sequence

REPLACEMENT_CHAR = "\ufffd"


class DetokenizerStateError(RuntimeError):
    """An internal invariant broke (a bug here, never a bad request)."""


@dataclass(frozen=True)
class Progress:
    """What one batch of new ids did to a request."""

    ids: list[int]
    """The new ids kept: those after the one that ended generation are dropped."""

    finish_reason: str | None
    """None while generating; "stop" (stop id or stop string) or "length" (``max_tokens``)."""

    stop_reason: str | int | None = None
    """The stop string or stop id that ended generation."""


def check_stop_strings(text: str, new_chars: int, stops: Sequence[str], include: bool) -> tuple[str, int] | None:
    """vLLM's ``check_stop_strings``: the stop string completed earliest within the last
    ``new_chars`` characters (ties by list order), and the length to cut the text to
    (-1: no cut)."""
    if not new_chars or not stops:
        return None
    best: tuple[str, int] | None = None
    best_end = sys.maxsize
    for s in stops:
        i = text.find(s, max(0, len(text) - new_chars - len(s) + 1))
        if i != -1 and i + len(s) < best_end:
            best, best_end = (s, i), i + len(s)
    if best is None:
        return None
    s, i = best
    if include:
        end = i + len(s)
        return (s, -1) if end >= len(text) else (s, end)
    return s, i


class _FastStream:
    """``tokenizers.decoders.DecodeStream`` primed with the prompt (vLLM's fast path)."""

    def __init__(self, tokenizer: Any, prompt_ids: Sequence[int] | None, skip_special_tokens: bool) -> None:
        from tokenizers.decoders import DecodeStream

        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._stream = DecodeStream(ids=list(prompt_ids or []), skip_special_tokens=skip_special_tokens)

    def step(self, token_id: int) -> str:
        try:
            return self._stream.step(self._tok, int(token_id)) or ""
        except Exception as e:  # noqa: BLE001 - vLLM's recovery (its issue 17448): restart the stream
            if "Invalid prefix" not in str(e):
                raise
            from tokenizers.decoders import DecodeStream

            self._stream = DecodeStream(skip_special_tokens=self._skip)
            return self._stream.step(self._tok, int(token_id)) or ""


class _SlowStream:
    """Prefix/read offsets over ``decode`` for tokenizers without a Rust core."""

    def __init__(self, tokenizer: Any, prompt_ids: Sequence[int] | None, skip_special_tokens: bool) -> None:
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._ids = list(prompt_ids or [])[-6:]  # a few ids of context decode the first space right
        self._prefix = 0
        self._read = len(self._ids)

    def step(self, token_id: int) -> str:
        self._ids.append(int(token_id))
        before = self._tok.decode(self._ids[self._prefix : self._read], skip_special_tokens=self._skip)
        now = self._tok.decode(self._ids[self._prefix :], skip_special_tokens=self._skip)
        if len(now) > len(before) and not now.endswith(REPLACEMENT_CHAR):
            self._prefix, self._read = self._read, len(self._ids)
            return now[len(before) :]
        return ""


class IncrementalDetokenizer:
    """Per-request output text, with vLLM's stop and streaming rules (see the module docstring)."""

    def __init__(
        self,
        tokenizer: Any,
        prompt_ids: Sequence[int] | None = None,
        *,
        stop: Sequence[str] = (),
        stop_token_ids: Sequence[int] = (),
        include_stop_str_in_output: bool = False,
        skip_special_tokens: bool = True,
        min_tokens: int = 0,
        max_tokens: int | None = None,
    ) -> None:
        """``tokenizer`` is a ``renderer.tokenizer.Tokenizer`` or a transformers tokenizer."""
        hf = getattr(tokenizer, "for_decoding", tokenizer)
        core = getattr(hf, "_tokenizer", None)
        self._stream = (
            _FastStream(core, prompt_ids, skip_special_tokens)
            if core is not None
            else _SlowStream(hf, prompt_ids, skip_special_tokens)
        )
        self.skip_special_tokens = skip_special_tokens
        self.stop = tuple(stop)
        self.stop_token_ids = frozenset(int(i) for i in stop_token_ids)
        self.include = include_stop_str_in_output
        self.min_tokens = min_tokens
        self.max_tokens = max_tokens
        self._buffer = max(len(s) for s in self.stop) - 1 if self.stop and not self.include else 0
        # A stop string completed by new text starts at most this many characters before it.
        self._overlap = max((len(s) for s in self.stop), default=1) - 1
        self.output_ids: list[int] = []
        """Every id kept so far."""
        # Appending to one string copies all of it each time (CPython resizes in place only for a
        # local with no other reference); pieces in lists keep each step's work to its own text.
        self._pieces: list[str] = []
        """The output text so far, in pieces (held-back characters included)."""
        self._unsent: list[str] = []
        """The pieces not yet handed out by ``next_text``."""
        self._len = 0
        """Characters in the output text so far."""
        self._unsent_len = 0
        self._tail = ""
        """The last ``_overlap`` characters of the text before the current step, for the stop search."""
        self.finish_reason: str | None = None

    @property
    def text(self) -> str:
        """The whole output text so far (held-back characters included); joins the pieces, so
        its cost is the length: read it at the end of a request, not per id."""
        if len(self._pieces) > 1:
            self._pieces[:] = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def push(self, new_ids: Sequence[int]) -> Progress:
        """Add the engine's next ids; says whether (and why) generation is over."""
        if self.finish_reason is not None:
            return Progress([], self.finish_reason)
        ids = [int(i) for i in new_ids]
        if self.max_tokens is not None:
            ids = ids[: max(self.max_tokens - len(self.output_ids), 0)]
        stop_id = None
        for k, i in enumerate(ids):
            # As vLLM's check_stop: a stop id ends generation whenever it comes (the engine keeps
            # it from being sampled before min_tokens).
            if i in self.stop_token_ids:
                ids, stop_id = ids[: k + 1], i
                break
        if not ids:
            return Progress([], None)
        decoded = ids[:-1] if stop_id is not None and not self.include else ids
        first_new = len(self.output_ids)
        start = self._len
        offsets = [start]
        new: list[str] = []
        for i in decoded:
            piece = self._stream.step(i)
            if piece:
                new.append(piece)
                self._len += len(piece)
            offsets.append(self._len)
        if len(decoded) < len(ids):
            offsets.append(self._len)
        self._pieces += new
        self._unsent += new
        self._unsent_len += self._len - start
        self.output_ids += ids
        kept = ids
        if stop_id is not None:
            return self._finish(Progress(kept, "stop", stop_id))
        if not self.stop:
            return self._length_or_running(kept)
        # The stop search sees the new text and the characters a stop string could start in
        # before it, never the whole text; the tail moves on every step, min_tokens or not.
        window = self._tail + "".join(new)
        base = start - len(self._tail)
        self._tail = window[max(len(window) - self._overlap, 0) :] if self._overlap else ""
        if len(self.output_ids) > self.min_tokens:
            check_from = offsets[max(self.min_tokens - first_new, 0)]
            hit = check_stop_strings(window, self._len - check_from, self.stop, self.include)
            if hit is not None:
                s, cut = hit
                if cut != -1:
                    cut += base
                end = self._len if cut == -1 else cut
                if not self.include:
                    end += len(s)
                # Ids after the one that completed the stop string are dropped (vLLM does the same).
                n_kept = next((j for j in range(1, len(offsets)) if offsets[j] >= end), len(ids))
                kept = ids[:n_kept]
                del self.output_ids[first_new + n_kept :]
                if cut != -1:
                    self._truncate(cut)
                return self._finish(Progress(kept, "stop", s))
        return self._length_or_running(kept)

    def _length_or_running(self, kept: list[int]) -> Progress:
        if self.max_tokens is not None and len(self.output_ids) >= self.max_tokens:
            return self._finish(Progress(kept, "length"))
        return Progress(kept, None)

    def end(self, reason: str = "length") -> None:
        """The request ended without a reason seen here: the engine stopped (context full, an
        engine limit: "length") or the client went away ("abort")."""
        if self.finish_reason is None:
            self.finish_reason = reason

    def next_text(self) -> str:
        """The text not yet handed out that is safe to show now."""
        hold = 0 if self.finish_reason is not None else self._buffer
        n = self._unsent_len - hold
        if n <= 0:
            return ""
        unsent = "".join(self._unsent)
        piece, rest = unsent[:n], unsent[n:]
        self._unsent = [rest] if rest else []
        self._unsent_len = len(rest)
        return piece

    def _truncate(self, n: int) -> None:
        """Cut the text to its first ``n`` characters (a stop string ended it). Never cuts into
        text already handed out: the hold-back keeps a stop string's start unsent."""
        text = self.text[:n]
        sent = self._len - self._unsent_len
        if n < sent:
            raise DetokenizerStateError(f"a stop string cut the text at {n} characters, inside the {sent} already sent")
        self._pieces[:] = [text] if text else []
        self._unsent = [text[sent:]] if n > sent else []
        self._unsent_len = n - sent
        self._len = n

    def _finish(self, p: Progress) -> Progress:
        self.finish_reason = p.finish_reason
        return p
