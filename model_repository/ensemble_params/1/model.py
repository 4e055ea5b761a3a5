"""Triton adapter for ``ensemble_params``: TensorRT-LLM ``ensemble`` inputs -> engine tensors."""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from renderer import batch_rows
from renderer import stage_params as sp
from renderer.engine_tensors import CHAINED_INPUTS, GenerationResolver, Getter
from renderer.trtllm_front import parse_front_request
from triton_io import tensors as io

# Every output typed as renderer/stage_tensors.py declares it.
OUT = io.StageOutputs("ensemble_params")


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        p = io.model_params(args)
        self.resolver = GenerationResolver.from_model_dir(p[sp.MODEL_DIR], p.get(sp.TOKENIZER_RECORD) or None)
        io.return_freed_memory()

    def _row(self, get: Getter) -> dict[str, np.ndarray]:
        front = parse_front_request(get)
        tensors = self.resolver.tensors(
            front.sampling, front.max_tokens, end_id=front.end_id, pad_id=front.pad_id, bad_words=front.bad_words
        )
        tensors["streaming"] = np.array([front.stream])
        tensors["exclude_input_in_output"] = np.array([front.exclude_input_in_output])
        return tensors

    def _one(self, request: Any) -> Any:
        # Each row of a batched request (renderer/batch_rows.py) read as a request of its own.
        arrays = io.batch_arrays(request)
        rows = batch_rows.each_row(
            batch_rows.rows_in(arrays), lambda row: self._row(batch_rows.row_getter(arrays, row))
        )
        tensors = batch_rows.stack_rows(rows)
        tensors.update({name: arrays[name] for name in CHAINED_INPUTS if name in arrays})
        return pb_utils.InferenceResponse(output_tensors=OUT.batch(tensors))

    def finalize(self) -> None:
        io.release_before_teardown()

    def execute(self, requests: list) -> list:
        return io.respond_each(requests, "ensemble_params", self._one)
