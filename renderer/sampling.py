"""``sampling_params`` for generation: parsed from the request's JSON bag and validated.

Field names, defaults (but ``temperature``, see below) and error wording are vLLM's
``SamplingParams``; the checks are the subset of its ``_verify_args`` these fields need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import (
    EmptyStopStringError,
    FieldTypeError,
    MaxTokensError,
    OutOfVocabStopIdsError,
    SamplingRangeError,
    StopStringsLimitError,
    StopTokenIdsLimitError,
    StopTokenIdsTypeError,
    TopKTypeError,
    UnknownFieldError,
    ValueRangeError,
)

MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256
MAX_STOP_TOKEN_IDS = 64


@dataclass(frozen=True)
class SamplingParams:
    """How the engine picks tokens and when generation ends (a subset of vLLM's ``SamplingParams``)."""

    temperature: float = 0.0
    """0 means greedy. (vLLM defaults to 1.0; this contract has always defaulted to greedy.)"""

    top_p: float = 1.0
    """Nucleus sampling mass, in (0, 1]."""

    top_k: int = 0
    """Keep the k most likely tokens; 0 (or -1) keeps all."""

    seed: int | None = None
    """Seed for reproducible sampling; None lets the server draw one."""

    stop: tuple[str, ...] = ()
    """Stop strings: generation ends when one appears; it is cut from the text."""

    stop_token_ids: tuple[int, ...] = ()
    """Ids that end generation like an EOS token (kept in ``output_ids``, not in the text)."""

    include_stop_str_in_output: bool = False
    """Keep the stop string (or stop token's text) at the end of the output text."""

    ignore_eos: bool = False
    """Generate past the model's EOS ids (until ``max_tokens`` or a stop string / stop id)."""

    min_tokens: int = 0
    """Tokens to generate before an EOS id, a stop id or a stop string may end generation."""

    repetition_penalty: float = 1.0
    """Divides positive (multiplies negative) logits of ids already in the prompt or output."""

    presence_penalty: float = 0.0
    """Subtracted from the logits of ids already in the output, in [-2, 2]."""

    frequency_penalty: float = 0.0
    """Subtracted per occurrence from the logits of ids already in the output, in [-2, 2]."""

    skip_special_tokens: bool = True
    """Leave special tokens out of the output text."""

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @classmethod
    def from_request(
        cls,
        bag: Mapping[str, Any] | None,
        max_tokens: int | None = None,
        min_p: float | None = None,
        vocab_size: int = 0,
    ) -> "SamplingParams":
        """Parse a ``sampling_params`` JSON object; ``max_tokens`` bounds ``min_tokens``; ``min_p``
        is checked in its place (``verify``). ``vocab_size``: the caller checks ``stop_token_ids``
        against the vocabulary itself (``check_vocab``), where vLLM does, after the other checks;
        0 (unknown, the stage's case): a negative id is refused here."""
        if bag is None:
            bag = {}
        if not isinstance(bag, Mapping):
            raise FieldTypeError("request", "sampling_params", "a JSON object", bag)
        unknown = [k for k in bag if k not in SAMPLING_FIELDS]
        if unknown:
            raise UnknownFieldError("sampling_params", unknown, list(SAMPLING_FIELDS))
        stop = bag.get("stop") or []
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise FieldTypeError("sampling_params", "stop", "a non-empty string or a list of them", stop)
        if not all(stop):
            raise EmptyStopStringError()
        if len(stop) > MAX_STOP_STRINGS or any(len(s) > MAX_STOP_CHARS for s in stop):
            raise StopStringsLimitError(MAX_STOP_STRINGS, MAX_STOP_CHARS)
        stop_ids = bag.get("stop_token_ids") or []
        if not isinstance(stop_ids, list) or not all(_is_int(i) and (vocab_size or i >= 0) for i in stop_ids):
            raise StopTokenIdsTypeError(stop_ids)
        if len(stop_ids) > MAX_STOP_TOKEN_IDS:
            raise StopTokenIdsLimitError(MAX_STOP_TOKEN_IDS)
        seed = bag.get("seed")
        if seed is not None and (not _is_int(seed) or not 0 <= seed < 2**63):
            raise FieldTypeError("sampling_params", "seed", "an integer in [0, 2**63)", seed)
        top_k = bag.get("top_k", 0)
        if not _is_int(top_k):
            raise TopKTypeError(top_k)
        min_tokens = bag.get("min_tokens", 0)
        if not _is_int(min_tokens):
            raise FieldTypeError("sampling_params", "min_tokens", "an integer", min_tokens)
        params = cls(
            temperature=_number(bag, "temperature", 0.0),
            top_p=_number(bag, "top_p", 1.0),
            top_k=0 if top_k == -1 else top_k,
            seed=seed,
            stop=tuple(stop),
            stop_token_ids=tuple(stop_ids),
            include_stop_str_in_output=_flag(bag, "include_stop_str_in_output", False),
            ignore_eos=_flag(bag, "ignore_eos", False),
            min_tokens=min_tokens,
            repetition_penalty=_number(bag, "repetition_penalty", 1.0),
            presence_penalty=_number(bag, "presence_penalty", 0.0),
            frequency_penalty=_number(bag, "frequency_penalty", 0.0),
            skip_special_tokens=_flag(bag, "skip_special_tokens", True),
        )
        params.verify(max_tokens, min_p)
        return params

    def check_vocab(self, vocab_size: int) -> None:
        """vLLM's bound on ``stop_token_ids``: ids of the model's vocabulary."""
        outside = [i for i in self.stop_token_ids if not 0 <= i < vocab_size]
        if outside:
            raise OutOfVocabStopIdsError(outside, vocab_size)

    def verify(self, max_tokens: int | None = None, min_p: float | None = None) -> None:
        """vLLM's range checks, in its order and wording. ``min_p``: the request's, which only the
        HTTP front reads (it is no field here: no engine takes it), checked in vLLM's place.

        vLLM names the parameter (``(parameter=..., value=...)``, and ``param`` in its HTTP answer)
        for temperature, top_p and max_tokens only; the others are ``SamplingRangeError``s."""
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise SamplingRangeError("presence_penalty", "in [-2, 2]", self.presence_penalty)
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise SamplingRangeError("frequency_penalty", "in [-2, 2]", self.frequency_penalty)
        if not math.isfinite(self.repetition_penalty):
            raise SamplingRangeError("repetition_penalty", "a finite number", self.repetition_penalty)
        if self.repetition_penalty <= 0.0:
            raise SamplingRangeError("repetition_penalty", "greater than zero", self.repetition_penalty)
        if not math.isfinite(self.temperature):
            raise ValueRangeError("temperature", "a finite number", self.temperature)
        if self.temperature < 0.0:
            raise ValueRangeError("temperature", "non-negative", self.temperature)
        if self.temperature > 2.0:
            raise ValueRangeError("temperature", "in [0, 2]", self.temperature)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueRangeError("top_p", "in (0, 1]", self.top_p)
        if self.top_k < 0:
            raise SamplingRangeError("top_k", "0 (disable), or at least 1", self.top_k)
        if min_p is not None and not 0.0 <= min_p <= 1.0:
            raise SamplingRangeError("min_p", "in [0, 1]", min_p)
        if max_tokens is not None:
            check_max_tokens(max_tokens)
        if self.min_tokens < 0:
            raise SamplingRangeError("min_tokens", "greater than or equal to 0", self.min_tokens)
        if max_tokens is not None and self.min_tokens > max_tokens:
            raise SamplingRangeError("min_tokens", f"less than or equal to max_tokens={max_tokens}", self.min_tokens)


def check_max_tokens(max_tokens: int) -> None:
    """vLLM's rule for a given ``max_tokens``; the one place it is written."""
    if max_tokens < 1:
        raise MaxTokensError(max_tokens)


# The sampling_params fields, vLLM's names; the HTTP front forwards exactly these.
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "stop_token_ids",
    "include_stop_str_in_output",
    "ignore_eos",
    "min_tokens",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "skip_special_tokens",
)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(bag: Mapping[str, Any], name: str, default: float) -> float:
    v = bag.get(name, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise FieldTypeError("sampling_params", name, "a number", v)
    return float(v)


def _flag(bag: Mapping[str, Any], name: str, default: bool) -> bool:
    v = bag.get(name, default)
    if not isinstance(v, bool):
        raise FieldTypeError("sampling_params", name, "true or false", v)
    return v
