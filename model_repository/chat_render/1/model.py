"""Triton adapter for ``chat_render``: messages JSON in, ``renderer.chat``, prompt text out."""

from __future__ import annotations

import numpy as np
import triton_python_backend_utils as pb_utils

from renderer.chat import ChatParams, ChatRenderer
from renderer.errors import InvalidParamsError
from serving import triton_io as io


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        # Text-only model: image parts are refused with vLLM's limit message (limit 0).
        self.chat = ChatRenderer.from_model_dir(io.model_params(args)["model_dir"], mm_limits={})
        self.chat.warmup()  # compiles the model's template before the first request

    def _one(self, request):
        raw = io.get_str(request, "messages")
        if raw is None or not raw.strip():
            raise InvalidParamsError("messages is empty: send a JSON array of chat messages.")
        messages = io.parse_json(raw, "messages")
        params = ChatParams.from_request(io.get_json(request, "chat_params"))
        rendered = self.chat.render_messages(messages, params)
        return pb_utils.InferenceResponse(output_tensors=[
            io.bytes_tensor("prompt", [rendered.prompt]),
            io.tensor("chat_template_applied", [True], np.bool_),
            io.tensor("mm_placeholders", np.zeros((0, 2), np.int32), np.int32),
            io.bytes_tensor("mm_hashes", []),
        ])

    def execute(self, requests):
        return io.respond_each(requests, "chat_render", self._one)
