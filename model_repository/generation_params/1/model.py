"""Triton adapter for ``generation_params``: request JSON -> TensorRT-LLM-named tensors."""

from __future__ import annotations

import numpy as np
import triton_python_backend_utils as pb_utils

from renderer.engine_request import GenerationResolver
from renderer.sampling import SamplingParams
from serving import triton_io as io


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        self.resolver = GenerationResolver.from_model_dir(io.model_params(args)["model_dir"])

    def _one(self, request):
        max_tokens = io.get_scalar(request, "max_tokens")
        sampling = SamplingParams.from_request(io.get_json(request, "sampling_params"), max_tokens)
        tensors = self.resolver.tensors(sampling, max_tokens)
        tensors["streaming"] = np.array([bool(io.get_scalar(request, "stream", bool))], np.bool_)
        tensors["exclude_input_in_output"] = np.array([True], np.bool_)
        return pb_utils.InferenceResponse(output_tensors=io.output_tensors(tensors))

    def execute(self, requests):
        return io.respond_each(requests, "generation_params", self._one)
