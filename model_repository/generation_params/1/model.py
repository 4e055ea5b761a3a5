"""Triton adapter for ``generation_params``: request fields -> TensorRT-LLM-named tensors
(``renderer.generation_stage``)."""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from renderer import stage_params as sp
from renderer.engine_tensors import CHAINED_INPUTS, GenerationResolver
from renderer.generation_stage import GenerationRequest
from triton_io import tensors as io

# Every output typed as renderer/stage_tensors.py declares it.
OUT = io.StageOutputs("generation_params")


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        p = io.model_params(args)
        self.resolver = GenerationResolver.from_model_dir(p[sp.MODEL_DIR], p.get(sp.TOKENIZER_RECORD) or None)
        io.return_freed_memory()

    def _one(self, request: Any) -> Any:
        req = GenerationRequest.from_fields(
            io.get_scalar(request, "max_tokens"),
            io.get_json(request, "sampling_params"),
            io.get_scalar(request, "stream", bool),
        )
        tensors = {**req.tensors(self.resolver), **io.handed_on(request, CHAINED_INPUTS)}
        return pb_utils.InferenceResponse(output_tensors=OUT.all(tensors))

    def finalize(self) -> None:
        io.release_before_teardown()

    def execute(self, requests: list) -> list:
        return io.respond_each(requests, "generation_params", self._one)
