"""Triton adapter for ``chat_render``: messages JSON in, ``renderer.chat``, prompt text out."""

from __future__ import annotations

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from renderer.chat import ChatParams, ChatRenderer
from renderer.errors import InvalidParamsError
from renderer.multimodal.registry import detect_family
from serving import triton_io as io


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        model_dir = io.model_params(args)["model_dir"]
        self.multimodal = detect_family(model_dir) is not None
        if self.multimodal:
            from renderer.multimodal.media import MediaLimits
            from renderer.multimodal.registry import load_family

            self.chat = ChatRenderer.from_model_dir(
                model_dir, image_placeholder=load_family(model_dir).placeholder_text,
                mm_limits=dict(MediaLimits().max_items))
        else:
            # Text-only model: image parts are refused with vLLM's limit message (limit 0).
            self.chat = ChatRenderer.from_model_dir(model_dir, mm_limits={})
        self.chat.warmup()  # compiles the model's template before the first request

    def _one(self, request):
        raw = io.get_str(request, "messages")
        if raw is None or not raw.strip():
            raise InvalidParamsError("messages is empty: send a JSON array of chat messages.")
        messages = io.parse_json(raw, "messages")
        params = ChatParams.from_request(io.get_json(request, "chat_params"))
        rendered = self.chat.render_messages(messages, params)
        out = [io.bytes_tensor("prompt", [rendered.prompt]), io.tensor("chat_template_applied", [True], np.bool_)]
        if self.multimodal:
            items = [i.to_json() for i in rendered.mm_items]
            kwargs = {"mm_processor_kwargs": params.mm_processor_kwargs, "media_io_kwargs": params.media_io_kwargs}
            out += [io.bytes_tensor("mm_items", items), io.bytes_tensor("mm_kwargs", [json.dumps(kwargs)])]
        else:
            out += [io.tensor("mm_placeholders", np.zeros((0, 2), np.int32), np.int32), io.bytes_tensor("mm_hashes", [])]
        return pb_utils.InferenceResponse(output_tensors=out)

    def execute(self, requests):
        return io.respond_each(requests, "chat_render", self._one)
