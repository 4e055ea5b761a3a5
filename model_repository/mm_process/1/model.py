"""Triton adapter for ``mm_process``: ids + media items in, ``renderer.multimodal``, tensors out.

One instance (config): requests are processed in arrival order, so the processor cache sees
them in order. Cache hits and misses are exported as Triton custom metrics.
"""

from __future__ import annotations

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from renderer.chat.messages import MultiModalItem
from renderer.errors import InvalidParamsError
from renderer.model_info import ModelInfo
from renderer.multimodal.media import MediaLimits
from renderer.multimodal.processor import MultiModalProcessor
from renderer.params import request_tokenize_params
from serving import triton_io as io


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        p = io.model_params(args)
        self.info = ModelInfo.from_model_dir(p["model_dir"])
        limits = MediaLimits(allowed_local_dir=p.get("media_dir") or None,
                             allowed_hosts=tuple(h.strip() for h in p.get("media_hosts", "").split(",") if h.strip()))
        self.processor = MultiModalProcessor.from_model_dir(
            p["model_dir"], limits=limits, cache_bytes=int(p["cache_bytes"]), device=p.get("device", "cpu"))
        self.processor.warmup()  # compiles the numba kernels before the first request
        # The families must outlive their metrics: keep both.
        kind = pb_utils.MetricFamily.COUNTER
        self.hits_family = pb_utils.MetricFamily(name="mm_cache_hits_total", description="Multimodal processor cache hits", kind=kind)
        self.misses_family = pb_utils.MetricFamily(name="mm_cache_misses_total", description="Multimodal processor cache misses", kind=kind)
        self.hits = self.hits_family.Metric(labels={"model": "mm_process"})
        self.misses = self.misses_family.Metric(labels={"model": "mm_process"})

    def _one(self, request):
        ids = io.get_ids(request, "input_ids")
        offsets = io.get(request, "token_offsets")
        items_raw = io.get(request, "mm_items")
        items = [_item(json.loads(raw)) for raw in (items_raw.reshape(-1) if items_raw is not None else [])]
        kwargs = io.get_json(request, "mm_kwargs") or {}
        out = self.processor.process(ids, items, kwargs.get("mm_processor_kwargs"), kwargs.get("media_io_kwargs"))
        self.hits.increment(out.cache_hits)
        self.misses.increment(len(items) - out.cache_hits)
        # Expansion lengthens the prompt: vLLM checks the context length on the processed ids.
        params = request_tokenize_params(self.info.max_model_len, io.get_json(request, "tokenize_params"), chat=True,
                                         max_output_tokens=io.get_scalar(request, "max_tokens"))
        params.check_length(len(out.input_ids))
        # Offsets exist only without media (vLLM): they index text the expansion no longer matches.
        offsets = offsets if (offsets is not None and not items) else np.zeros((0, 2), np.int32)
        tensors = [
            io.tensor("input_ids", np.asarray(out.input_ids, np.int32), np.int32),
            io.tensor("input_lengths", [len(out.input_ids)], np.int32),
            io.tensor("token_offsets", offsets, np.int32),
            io.tensor("mm_placeholders", out.mm_placeholders_array(), np.int32),
            io.bytes_tensor("mm_hashes", list(out.hashes)),
        ]
        for name, value in out.tensors().items():
            tensors.append(io.tensor(name, value, np.float32 if name == "pixel_values" else np.int64))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests):
        return io.respond_each(requests, "mm_process", self._one)

    def finalize(self) -> None:
        self.processor.close()


def _item(d: dict) -> MultiModalItem:
    if not isinstance(d, dict):
        raise InvalidParamsError("mm_items entries must be JSON objects.")
    return MultiModalItem(modality=d.get("modality", "image"), source=d.get("source", "image_url"),
                          data=d.get("data"), uuid=d.get("uuid"), message_index=-1, part_index=-1)
