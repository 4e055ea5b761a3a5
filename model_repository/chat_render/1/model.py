"""Triton adapter for ``chat_render``: messages JSON in, ``renderer.chat_stage``, prompt text out."""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from renderer import stage_params as sp
from renderer.chat.template_worker import RequestTemplateLimits
from renderer.chat.tool_choice import ToolChoicePolicy
from renderer.chat_stage import ChatStage
from renderer.multimodal.media import MediaLimits
from triton_io import tensors as io

# Every output typed as renderer/stage_tensors.py declares it.
OUT = io.StageOutputs("chat_render")
# A text model's media outputs are always empty, and every prompt came from a template: one
# tensor each (``OUT.constant``), sent by every response.
NO_PLACEHOLDERS = OUT.empty("mm_placeholders", (0, 2))
NO_HASHES = OUT.empty("mm_hashes", (0,))
APPLIED = np.ones(1, dtype=bool)


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        params = io.model_params(args)
        self.stage = ChatStage.from_model_dir(
            params[sp.MODEL_DIR],
            media_limits=MediaLimits.from_config(params),
            tokenizer_record=params.get(sp.TOKENIZER_RECORD) or None,
            trust_request_chat_template=io.flag(params, sp.TRUST_REQUEST_CHAT_TEMPLATE),
            trust_request_mm_kwargs=io.flag(params, sp.TRUST_REQUEST_MM_KWARGS),
            request_template_limits=RequestTemplateLimits.from_config(params),
            tool_choice_policy=ToolChoicePolicy.from_config(params),
            template_engine=params.get(sp.CHAT_TEMPLATE_ENGINE) or "auto",
        )
        # Compiles the model's template, and starts the request-template worker when trusted.
        self.stage.warmup()
        choice = self.stage.chat.engine()[1]
        pb_utils.Logger.log_info(
            f"chat_render: chat template engine for the model's template {choice.engine} ({choice.reason})"
        )
        io.return_freed_memory()

    def finalize(self) -> None:
        self.stage.close()
        io.release_before_teardown()

    def _one(self, request: Any) -> Any:
        inputs = io.inputs(request)
        out = self.stage.render(io.get_str(inputs, "messages"), io.get_json(inputs, "chat_params"))
        wanted = io.requested(request)  # render_chat never reads output_parsing, chat never mm_hashes
        tensors = [OUT("prompt", [out.rendered.prompt]), OUT.constant("chat_template_applied", APPLIED)]
        if "output_parsing" in wanted:
            tensors.append(OUT("output_parsing", [out.rendered.output_parsing.to_json()]))
        if self.stage.multimodal:
            items, data = out.mm_wire()
            tensors += [
                OUT("mm_items", items),
                OUT("mm_data", data),
                OUT("mm_kwargs", [out.media_kwargs.to_json()]),
            ]
        else:
            # A text model's render_chat answers with these directly: no media, so both empty.
            if "mm_placeholders" in wanted:
                tensors.append(OUT.constant("mm_placeholders", NO_PLACEHOLDERS))
            if "mm_hashes" in wanted:
                tensors.append(OUT.constant("mm_hashes", NO_HASHES))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests: list) -> list:
        # A dynamic batch renders in turn: requests that may render a template in the worker go
        # last, so an attack batched with normal requests never delays them.
        # Untrusted request templates (the default): nothing is slow, so no input is read twice.
        later = self._may_be_slow if self.stage.any_may_be_slow else None
        return io.respond_each(requests, "chat_render", self._one, later=later)

    def _may_be_slow(self, request: Any) -> bool:
        return self.stage.may_be_slow(io.get_bytes(request, "chat_params"))
