"""Triton adapter for ``tokenize_enc_dec``: encoder/decoder prompts -> their input ids."""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from renderer import stage_params as sp
from renderer.encoder_decoder import EncoderDecoderRenderer, encoder_decoder_prompt
from triton_io import tensors as io

# Every output typed as renderer/stage_tensors.py declares it.
OUT = io.StageOutputs("tokenize_enc_dec")


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        p = io.model_params(args)
        self.renderer = EncoderDecoderRenderer.from_model_dir(
            p[sp.MODEL_DIR],
            max_model_len=int(p.get(sp.MAX_MODEL_LEN) or 0),
            tokenizer_backend=p.get(sp.TOKENIZER_BACKEND) or "auto",
        )
        pb_utils.Logger.log_info(f"tokenize_enc_dec: context length {self.renderer.renderer.info.max_model_len}")

    def _parse(self, request: Any) -> Any:
        prompt = encoder_decoder_prompt(
            encoder_text=io.get_bytes(request, "encoder_prompt"),
            encoder_token_ids=io.get_ids(request, "encoder_prompt_token_ids"),
            decoder_text=io.get_bytes(request, "decoder_prompt"),
            decoder_token_ids=io.get_ids(request, "decoder_prompt_token_ids"),
            cache_salt=io.get_bytes(request, "cache_salt"),
        )
        params = self.renderer.renderer.request_params(
            io.get_json(request, "tokenize_params"), max_output_tokens=io.get_scalar(request, "max_tokens")
        )
        return prompt, params

    def finalize(self) -> None:
        io.release_before_teardown()

    def execute(self, requests: list) -> list:
        prompts, params = io.parse_each(requests, self._parse)
        return [self._respond(res) for res in self.renderer.render_batch(prompts, params)]

    @staticmethod
    def _respond(res: Any) -> Any:
        if isinstance(res, BaseException):
            return io.error_response(res, "tokenize_enc_dec")
        enc, dec = res.encoder.prompt_token_ids, res.decoder_prompt_token_ids
        return pb_utils.InferenceResponse(
            output_tensors=[
                OUT("encoder_input_ids", enc),
                OUT("encoder_input_lengths", [len(enc)]),
                OUT("decoder_input_ids", dec),
                OUT("decoder_input_lengths", [len(dec)]),
            ]
        )
