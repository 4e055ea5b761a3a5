"""``sampling_params`` for generation: parsed from the request's JSON bag and validated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .errors import FieldTypeError, InvalidParamsError, UnknownFieldError

MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256


@dataclass(frozen=True)
class SamplingParams:
    """How the ``llm`` picks tokens (a subset of vLLM's ``SamplingParams``)."""

    temperature: float = 0.0
    """0 means greedy."""

    top_p: float = 1.0
    """Nucleus sampling mass, in (0, 1]."""

    top_k: int = 0
    """Keep the k most likely tokens; 0 (or -1) keeps all."""

    seed: int | None = None
    """Seed for reproducible sampling; None draws one."""

    stop: tuple[str, ...] = ()
    """Stop strings: generation ends when one appears; it is not part of the output text."""

    @classmethod
    def from_request(cls, bag: Mapping[str, Any] | None) -> "SamplingParams":
        if not bag:
            return cls()
        if not isinstance(bag, Mapping):
            raise FieldTypeError("request", "sampling_params", "a JSON object", bag)
        unknown = [k for k in bag if k not in _FIELDS]
        if unknown:
            raise UnknownFieldError("sampling_params", unknown, list(_FIELDS))
        temperature = _number(bag, "temperature", 0.0)
        top_p = _number(bag, "top_p", 1.0)
        top_k = bag.get("top_k", 0)
        seed = bag.get("seed")
        stop = bag.get("stop", [])
        if temperature < 0:
            raise InvalidParamsError(f"temperature must be non-negative, got {temperature}.")
        if not 0 < top_p <= 1:
            raise InvalidParamsError(f"top_p must be in (0, 1], got {top_p}.")
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            raise FieldTypeError("sampling_params", "top_k", "an integer", top_k)
        if top_k < -1:
            raise InvalidParamsError(f"top_k must be -1 (disable), or at least 1, got {top_k}.")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
            raise FieldTypeError("sampling_params", "seed", "an integer in [0, 2**63)", seed)
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
            raise FieldTypeError("sampling_params", "stop", "a non-empty string or a list of them", stop)
        if len(stop) > MAX_STOP_STRINGS or any(len(s) > MAX_STOP_CHARS for s in stop):
            raise InvalidParamsError(
                f"stop takes at most {MAX_STOP_STRINGS} strings of at most {MAX_STOP_CHARS} characters."
            )
        return cls(float(temperature), float(top_p), 0 if top_k == -1 else top_k, seed, tuple(stop))


_FIELDS = ("temperature", "top_p", "top_k", "seed", "stop")


def _number(bag: Mapping[str, Any], name: str, default: float) -> float:
    v = bag.get(name, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise FieldTypeError("sampling_params", name, "a number", v)
    return float(v)
