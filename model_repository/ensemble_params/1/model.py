"""Triton adapter for ``ensemble_params``: TensorRT-LLM ``ensemble`` inputs -> engine tensors."""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from renderer.engine_tensors import CHAINED_INPUTS, GenerationResolver
from renderer.trtllm_front import parse_front_request
from triton_io import tensors as io

# Every output typed as renderer/stage_tensors.py declares it.
OUT = io.StageOutputs("ensemble_params")


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        p = io.model_params(args)
        self.resolver = GenerationResolver.from_model_dir(p["model_dir"], p.get("tokenizer_record") or None)
        io.return_freed_memory()

    def _one(self, request: Any) -> Any:
        front = parse_front_request(lambda name: io.get(request, name))
        tensors = self.resolver.tensors(
            front.sampling, front.max_tokens, end_id=front.end_id, pad_id=front.pad_id, bad_words=front.bad_words
        )
        tensors["streaming"] = [front.stream]
        tensors["exclude_input_in_output"] = [front.exclude_input_in_output]
        tensors.update(io.handed_on(request, CHAINED_INPUTS))
        return pb_utils.InferenceResponse(output_tensors=OUT.all(tensors))

    def finalize(self) -> None:
        io.release_before_teardown()

    def execute(self, requests: list) -> list:
        return io.respond_each(requests, "ensemble_params", self._one)
