"""Triton adapter for ``mm_process``: ids + media items in, ``renderer.multimodal``, tensors out.

One instance (config): requests are processed in arrival order, so the processor cache sees
them in order. Cache hits and misses are exported as Triton custom metrics.
"""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from renderer.chat.messages import items_from_wire
from renderer.chat_stage import MediaKwargs
from renderer.multimodal.processor import MultiModalProcessor
from renderer.multimodal.tensors import identifiers_array, image_tensors
from renderer.params import LengthLimit
from triton_io import tensors as io

# Every output typed as renderer/stage_tensors.py declares it.
OUT = io.StageOutputs("mm_process")


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        # Model folder, limits, cache, IMAGE_PROCESSOR, IMAGE_DEVICE and IMAGE_DECODE_DEVICE, as
        # the launcher wrote them; a device setting that cannot run here refuses to load.
        self.processor = MultiModalProcessor.from_config(io.model_params(args))
        self.processor.warmup()  # compiles the numba kernels (and runs the device path once) before the first request
        family = self.processor.family
        self.image_tensors = image_tensors(family.name, family.raw_pixels)
        # The families must outlive their metrics: keep both.
        kind = pb_utils.MetricFamily.COUNTER
        self.hits_family = pb_utils.MetricFamily(
            name="mm_cache_hits_total", description="Multimodal processor cache hits", kind=kind
        )
        self.misses_family = pb_utils.MetricFamily(
            name="mm_cache_misses_total", description="Multimodal processor cache misses", kind=kind
        )
        self.hits = self.hits_family.Metric(labels={"model": "mm_process"})
        self.misses = self.misses_family.Metric(labels={"model": "mm_process"})

    def _one(self, request: Any) -> Any:
        items = items_from_wire(io.get(request, "mm_items"), io.get(request, "mm_data"))
        kwargs = MediaKwargs.from_bag(io.get_json(request, "mm_kwargs"))
        # The limit tokenize resolved for this request (MAX_MODEL_LEN, tokenize_params, max_tokens).
        limit = LengthLimit.from_values(io.get_ids(request, "length_limit") or [])
        out, offsets = self.processor.process_tokenized(
            io.get_ids(request, "input_ids"),
            io.get(request, "token_offsets"),
            items,
            limit,
            kwargs.mm_processor_kwargs,
            kwargs.media_io_kwargs,
        )
        self.hits.increment(out.cache_hits)
        self.misses.increment(len(items) - out.cache_hits)
        tensors = [
            OUT("input_ids", out.input_ids),
            OUT("input_lengths", [len(out.input_ids)]),
            OUT("token_offsets", offsets),
            OUT("mm_placeholders", out.mm_placeholders_array()),
            OUT("mm_hashes", list(out.hashes)),
            OUT("mm_identifiers", identifiers_array(out.hashes)),
        ]
        produced = out.tensors()
        tensors += [
            io.tensor(spec.name, produced[spec.name], spec.np_dtype) for spec in self.image_tensors
        ]  # the family table
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests: list) -> list:
        return io.respond_each(requests, "mm_process", self._one)

    def finalize(self) -> None:
        self.processor.close()
        # Metrics go before their families and both while the stub still exists: left to the
        # interpreter's teardown, the 2.51 stub frees them after itself and segfaults at every stop.
        del self.hits, self.misses
        del self.hits_family, self.misses_family
        io.release_before_teardown()
