"""The Triton adapter behind ``llm`` and ``llm_enc_dec``: TensorRT-LLM-named tensors in,
``renderer.generate`` runs, ids out.

Decoder-only models read ``input_ids`` (or ``input_embeds``); encoder-decoder models read
``encoder_input_ids`` and ``decoder_input_ids``, as TensorRT-LLM's encoder-decoder models name
them. Outputs per response: ``output_ids`` (ids new in this response), ``sequence_ids`` (all
ids generated so far, so ``detokenize`` needs no state), ``finished``, and the stop strings.
"""

from __future__ import annotations

import json

import numpy as np
import torch
import triton_python_backend_utils as pb_utils

from renderer.errors import TensorError
from renderer.generate import Generator
from renderer.model_info import ModelInfo
from renderer.sampling import SamplingParams
from serving import triton_io as io

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        model_dir = io.model_params(args)["model_dir"]
        self.info = ModelInfo.from_model_dir(model_dir)
        self.generator = Generator(model_dir)
        self.name = json.loads(args["model_config"])["name"]

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                self._generate(request, sender)
            except Exception as e:  # noqa: BLE001 - the error goes to this request only
                sender.send(io.error_response(e, self.name), flags=FINAL)
        return None

    def _inputs(self, request) -> dict:
        """The prompt tensors, with their declared lengths checked."""
        if self.generator.is_encoder_decoder:
            enc = io.get_ids(request, "encoder_input_ids")
            dec = io.get_ids(request, "decoder_input_ids")
            _check_length(request, "encoder_input_lengths", len(enc))
            _check_length(request, "decoder_input_lengths", len(dec))
            return {"input_ids": enc, "decoder_input_ids": dec}
        ids = io.get_ids(request, "input_ids")
        embeds = io.get(request, "input_embeds")
        embeds = None if embeds is None or embeds.size == 0 else torch.from_numpy(np.array(embeds, np.float32))
        n_given = len(embeds) if embeds is not None else len(ids)
        _check_length(request, "input_lengths", n_given)
        mm = {name: arr for name in ("pixel_values", "image_grid_thw", "image_sizes")
              if (arr := io.get(request, name)) is not None and arr.size}
        return {"input_ids": ids, "inputs_embeds": embeds, "prompt_len": n_given, "mm_inputs": mm or None}

    def _generate(self, request, sender) -> None:
        prompt = self._inputs(request)
        max_tokens = io.get_scalar(request, "request_output_len")
        streaming = bool(io.get_scalar(request, "streaming", bool) or False)
        end_id = io.get_scalar(request, "end_id")
        end_ids = set(self.info.eos_token_ids) | ({end_id} if end_id is not None and end_id >= 0 else set())
        stops = io.get_strings(request, "stop_words")
        seed = io.get_scalar(request, "random_seed")
        sampling = SamplingParams(
            temperature=float(io.get_scalar(request, "temperature", float) or 0.0),
            top_p=float(io.get_scalar(request, "runtime_top_p", float) or 1.0),
            top_k=int(io.get_scalar(request, "runtime_top_k") or 0),
            seed=None if seed is None else int(seed) % (2**63),
            stop=stops,
        )
        generated: list[int] = []
        pending: list[int] = []
        steps = self.generator.generate(max_tokens=max_tokens, end_ids=sorted(end_ids), sampling=sampling, **prompt)
        for step in steps:
            # Ask before sending: once the final response is out the request must not be touched.
            if request.is_cancelled():
                sender.send(flags=FINAL)
                return
            generated += step.new_ids
            pending += step.new_ids
            done = step.finish_reason is not None
            if streaming or done:
                sender.send(self._response(pending, generated, done, stops), flags=FINAL if done else 0)
                pending = []
            if done:
                return

    @staticmethod
    def _response(new_ids, all_ids, finished, stops):
        return pb_utils.InferenceResponse(output_tensors=[
            io.bytes_tensor("stop_words_out", [s.encode() for s in stops]),
            io.tensor("output_ids", np.asarray(new_ids, np.int32), np.int32),
            io.tensor("sequence_ids", np.asarray(all_ids, np.int32), np.int32),
            io.tensor("finished", [finished], np.bool_),
        ])


def _check_length(request, name: str, actual: int) -> None:
    n = io.get_scalar(request, name)
    if n is not None and n != actual:
        raise TensorError(f"{name}={n} does not match the {actual} ids given.")
