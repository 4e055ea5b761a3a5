"""Triton adapter for ``detokenize``: the text piece for each llm response."""

from __future__ import annotations

import numpy as np
import triton_python_backend_utils as pb_utils

from renderer.detokenizer import stream_delta
from renderer.tokenizer import Tokenizer
from serving import triton_io as io


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        self.tokenizer = Tokenizer.from_pretrained(io.model_params(args)["model_dir"])

    def _one(self, request):
        new_ids = io.get_ids(request, "output_ids")
        all_ids = io.get_ids(request, "sequence_ids")
        final = bool(io.get_scalar(request, "finished", bool))
        stops = io.get_strings(request, "stop_words")
        text = stream_delta(self.tokenizer, all_ids, len(new_ids), final=final, stops=stops)
        return pb_utils.InferenceResponse(output_tensors=[
            io.bytes_tensor("text_output", [text]),
            io.tensor("output_ids", np.asarray(new_ids, np.int32), np.int32),
        ])

    def execute(self, requests):
        return io.respond_each(requests, "detokenize", self._one)
