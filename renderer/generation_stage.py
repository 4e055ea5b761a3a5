"""The ``generation_params`` stage: a generation ensemble's request fields -> engine tensors.

Rules kept here rather than in the adapter:

- ``max_tokens`` is required and at least 1 (``MaxTokensError``, vLLM's wording);
- ``sampling_params`` are vLLM's (``SamplingParams.from_request``, bounded by ``max_tokens``);
- the engine always streams to the post-processor when the client streams, and never echoes the
  prompt (``exclude_input_in_output``): a generation ensemble answers with generated text only,
  as vLLM's completions and chat do;
- the seed default (a fresh random seed when the request names none) and the end / pad ids come
  from ``GenerationResolver.tensors`` (``renderer/engine_tensors.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .engine_tensors import GenerationResolver
from .errors import MissingMaxTokensError
from .sampling import SamplingParams, check_max_tokens


def require_max_tokens(max_tokens: int | None) -> int:
    """``max_tokens`` of a generation request: present and at least 1."""
    if max_tokens is None:
        raise MissingMaxTokensError()
    check_max_tokens(max_tokens)
    return int(max_tokens)


@dataclass(frozen=True)
class GenerationRequest:
    """One generation request's fields, validated."""

    max_tokens: int
    """Most tokens to generate (``request_output_len``)."""

    sampling: SamplingParams
    """vLLM's sampling parameters."""

    stream: bool = False
    """Whether the client wants one response per new piece of text."""

    @classmethod
    def from_fields(
        cls, max_tokens: int | None, sampling_params: Mapping[str, Any] | None, stream: bool | None
    ) -> "GenerationRequest":
        """The request's ``max_tokens``, parsed ``sampling_params`` bag and ``stream`` flag."""
        n = require_max_tokens(max_tokens)
        return cls(n, SamplingParams.from_request(sampling_params, n), bool(stream))

    def tensors(self, resolver: GenerationResolver) -> dict[str, np.ndarray]:
        """Every tensor ``generation_params`` sends on, without the batch dimension."""
        out = resolver.tensors(self.sampling, self.max_tokens)
        out["streaming"] = np.array([self.stream], np.bool_)
        out["exclude_input_in_output"] = np.array([True], np.bool_)
        return out
