"""A Hugging Face tokenizer that encodes a whole batch of requests in one call, safe across threads.

Tokenizers are not thread-safe ("Already borrowed", tokenizers issue 537): the Rust tokenizer
carries truncation state that each call mutates. Each thread therefore gets its own copy, made
once and reused. Fast tokenizers are driven through their Rust ``encode_batch`` directly, the
same call transformers makes, without per-call Python overhead; slow ones go through the
transformers call. Text without offsets goes to ``fastokens`` where it is proven equal at load
(``tokenizer_backend``).
"""

from __future__ import annotations

import copy
import logging
import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

from . import light_tokenizer, tokenizer_backend

log = logging.getLogger("renderer.tokenizer")


@dataclass(frozen=True)
class Encoded:
    """One encoded text."""

    ids: list[int]
    """Token ids."""

    offsets: list[tuple[int, int]] | None
    """Per-token character spans, when asked for; special tokens have (0, 0)."""


@dataclass(frozen=True)
class EncodeOptions:
    """Options shared by the texts encoded together in one backend call."""

    add_special_tokens: bool
    """Let the tokenizer's post-processor add BOS/EOS."""

    max_length: int | None
    """Truncate inside the tokenizer (special tokens kept), or None."""

    side: str
    """"left" or "right": which end truncation cuts."""


class Tokenizer:
    """Thread-safe batch tokenizer over a Hugging Face tokenizer folder."""

    def __init__(self, hf_tokenizer: Any, backend: str = "huggingface", source: str = "transformers") -> None:
        self._proto = hf_tokenizer
        self._local = threading.local()
        self.backend, self._fast = tokenizer_backend.choose(backend, hf_tokenizer)
        self._facts = getattr(hf_tokenizer, "facts", None)
        if self._fast is not None and hasattr(hf_tokenizer, "release_core"):
            # fastokens encodes the plain texts; the core comes back for the rest (offsets, decoding).
            hf_tokenizer.release_core()
        self.source = source
        """Where the tokenizer came from: the proven record (``light_tokenizer``) or transformers, and why."""

    @classmethod
    def from_pretrained(
        cls, path: str | Path, *, backend: str = "huggingface", record: str | Path | None = None
    ) -> "Tokenizer":
        """``backend``: ``auto`` (fastokens where proven equal, else Hugging Face),
        ``huggingface`` or ``fastokens`` (an error where it cannot serve this tokenizer).
        ``record``: the folder ``light_tokenizer.build`` recorded this model's tokenizer in; where
        the record is proven and current, transformers is never imported; otherwise (or without
        one) transformers loads the tokenizer, and ``source`` says why."""
        reason = "no tokenizer record given"
        if record:
            light, reason = light_tokenizer.load(record, path)
            if light is not None:
                return cls(light, backend, reason)
            log.warning("tokenizer from transformers: %s", reason)
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(path)), backend, f"transformers ({reason})")

    # --- per-thread copies ----------------------------------------------------------------

    @property
    def hf(self) -> Any:
        """This thread's own transformers tokenizer (a deep copy made on first use)."""
        tok = getattr(self._local, "hf", None)
        if tok is None:
            # The prototype is only ever read; every mutation happens on a thread's copy.
            tok = self._local.hf = copy.deepcopy(self._proto)
        return tok

    # --- facts about the vocabulary -------------------------------------------------------

    @cached_property
    def is_fast(self) -> bool:
        # A recorded tokenizer is a Rust core (read without loading it again).
        return self._facts is not None or getattr(self._proto, "backend_tokenizer", None) is not None

    @cached_property
    def vocab_size(self) -> int:
        """Number of valid ids (base vocabulary plus added tokens)."""
        return len(self._proto)

    @cached_property
    def max_token_id(self) -> int:
        if self._facts is not None:
            return self._facts.max_token_id
        vocab = self._proto.get_vocab()
        return max(vocab.values()) if vocab else self.vocab_size - 1

    @cached_property
    def max_chars_per_token(self) -> int:
        """Longest token string: a bound on the characters one token can cover."""
        if self._facts is not None:
            return self._facts.max_chars_per_token
        return max((len(t) for t in self._proto.get_vocab()), default=1)

    @property
    def truncation_side(self) -> str:
        return getattr(self._proto, "truncation_side", "left") or "left"

    @cached_property
    def bos_token_id(self) -> int | None:
        return self._proto.bos_token_id

    @cached_property
    def eos_token_id(self) -> int | None:
        return self._proto.eos_token_id

    @cached_property
    def pad_token_id(self) -> int | None:
        return self._proto.pad_token_id

    # --- encode / decode ------------------------------------------------------------------

    def encode_batch(self, texts: Sequence[str], opts: EncodeOptions, *, offsets: bool = False) -> list[Encoded]:
        """Encode texts that share options in one call."""
        if not texts:
            return []
        if opts.max_length == 0:
            return [Encoded([], [] if offsets else None) for _ in texts]
        if self._fast is not None and not offsets:
            split_special = bool(getattr(self._proto, "split_special_tokens", False))
            try:
                ids = self._fast.encode_batch(
                    texts,
                    add_special_tokens=opts.add_special_tokens,
                    max_length=opts.max_length,
                    side=opts.side,
                    split_special_tokens=split_special,
                )
                return [Encoded(x, None) for x in ids]
            except (ValueError, RuntimeError):
                # fastokens refuses some inputs Hugging Face accepts (a byte with no token in a
                # vocabulary without <unk>, which Hugging Face drops): the reference answers.
                pass
        if self.is_fast:
            return self._encode_fast(texts, opts, offsets)
        return self._encode_slow(texts, opts)

    def encode_array(self, text: str, add_special_tokens: bool) -> Any:
        """One text's ids, untruncated, as an int32 numpy array, where ``fastokens`` serves this
        tokenizer (its array path is held to Hugging Face at load with the rest); None otherwise,
        or where fastokens refuses the text: the caller then takes ``encode_batch``."""
        if self._fast is None:
            return None
        try:
            return self._fast.encode_array(
                text,
                add_special_tokens=add_special_tokens,
                split_special_tokens=bool(getattr(self._proto, "split_special_tokens", False)),
            )
        except (ValueError, RuntimeError):
            return None

    def _encode_fast(self, texts: Sequence[str], opts: EncodeOptions, offsets: bool) -> list[Encoded]:
        hf = self.hf
        backend = hf.backend_tokenizer
        split_special = bool(getattr(hf, "split_special_tokens", False))
        if backend.encode_special_tokens != split_special:
            backend.encode_special_tokens = split_special
        backend.no_padding()
        if opts.max_length is None:
            backend.no_truncation()
        else:
            n_special = backend.num_special_tokens_to_add(False) if opts.add_special_tokens else 0
            if opts.max_length <= n_special:
                # The Rust truncator refuses a budget the special tokens alone exceed: encode
                # whole and cut afterwards, as transformers' fallback does.
                backend.no_truncation()
                encs = backend.encode_batch(list(texts), add_special_tokens=opts.add_special_tokens)
                return [_cut(Encoded(e.ids, e.offsets if offsets else None), opts) for e in encs]
            backend.enable_truncation(opts.max_length, strategy="longest_first", direction=opts.side)
        encs = backend.encode_batch(list(texts), add_special_tokens=opts.add_special_tokens)
        return [Encoded(e.ids, e.offsets if offsets else None) for e in encs]

    def _encode_slow(self, texts: Sequence[str], opts: EncodeOptions) -> list[Encoded]:
        hf = self.hf
        hf.truncation_side = opts.side
        out = hf(
            list(texts),
            add_special_tokens=opts.add_special_tokens,
            truncation=opts.max_length is not None,
            max_length=opts.max_length,
        )
        return [Encoded(list(ids), None) for ids in out["input_ids"]]

    @property
    def for_decoding(self) -> Any:
        """The shared transformers tokenizer, for decoding only. Decoding reads the vocabulary
        and never changes the tokenizer's state (encoding's truncation and padding settings are
        what need a copy per thread), so every thread may use this one: a post-processor that
        starts a thread per request must not pay for a deep copy each time."""
        return self._proto

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        return self._proto.decode(list(ids), skip_special_tokens=skip_special_tokens)


def _cut(enc: Encoded, opts: EncodeOptions) -> Encoded:
    n = opts.max_length
    if n is None or len(enc.ids) <= n:
        return enc
    offsets = tokenizer_backend.truncate(enc.offsets, n, opts.side) if enc.offsets is not None else None
    return Encoded(tokenizer_backend.truncate(enc.ids, n, opts.side), offsets)
