"""Triton adapter for ``generation_params``: request JSON -> TensorRT-LLM-named tensors."""

from __future__ import annotations

import secrets

import numpy as np
import triton_python_backend_utils as pb_utils

from renderer.errors import InvalidParamsError
from renderer.model_info import ModelInfo
from renderer.sampling import SamplingParams
from serving import triton_io as io


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        info = ModelInfo.from_model_dir(io.model_params(args)["model_dir"])
        self.end_id = info.eos_token_ids[0] if info.eos_token_ids else -1
        self.pad_id = info.pad_token_id if info.pad_token_id is not None else self.end_id

    def _one(self, request):
        max_tokens = io.get_scalar(request, "max_tokens")
        if max_tokens < 1:
            raise InvalidParamsError(f"max_tokens must be at least 1, got {max_tokens}.")
        stream = bool(io.get_scalar(request, "stream", bool) or False)
        s = SamplingParams.from_request(io.get_json(request, "sampling_params"))
        seed = s.seed if s.seed is not None else secrets.randbits(63)
        stops = np.array([x.encode() for x in s.stop], dtype=np.object_).reshape(-1)
        return pb_utils.InferenceResponse(output_tensors=[
            io.tensor("request_output_len", [max_tokens], np.int32),
            io.tensor("end_id", [self.end_id], np.int32),
            io.tensor("pad_id", [self.pad_id], np.int32),
            io.tensor("streaming", [stream], np.bool_),
            io.tensor("temperature", [s.temperature], np.float32),
            io.tensor("runtime_top_p", [s.top_p], np.float32),
            io.tensor("runtime_top_k", [s.top_k], np.int32),
            io.tensor("random_seed", [seed], np.uint64),
            pb_utils.Tensor("stop_words", stops[np.newaxis, ...]),
        ])

    def execute(self, requests):
        return io.respond_each(requests, "generation_params", self._one)
