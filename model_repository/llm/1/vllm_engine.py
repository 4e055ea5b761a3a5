"""vLLM's own engine behind the ``llm`` interface (``LLM_ENGINE=vllm``): TensorRT-LLM's tensors in,
``AsyncLLM`` generates, TensorRT-LLM's outputs back.

The ensembles hand over what vLLM's renderer would: prompt ids (or prompt embeddings, as
TensorRT-LLM's prompt table rows behind fake ids), which go to ``AsyncLLM.generate`` as vLLM 0.32's
own engine inputs (``tokens_input`` / ``embeds_input``): vLLM never renders or tokenizes again and
never detokenizes (``detokenize=False``; ``detokenize`` makes the text). An image family's prompt
comes with ``mm_process``'s tensors, which become vLLM's ``MultiModalInput`` (``engines/vllm_images.py``):
vLLM never decodes, processes or hashes the images again. The request is read
with the stand-in's rules (``engines/trtllm_inputs.py``), so both engines answer alike:

- ``end_id`` and one-id words of ``stop_words_list`` become vLLM's ``stop_token_ids`` (with
  ``ignore_eos``: the engine stops where TensorRT-LLM would, no more, no less); longer stop words
  are matched here on the generated ids, and the request is aborted there;
- ``bad_words_list`` becomes vLLM's bad-word id lists; ``runtime_top_k`` = 1 is greedy;
- with ``streaming`` each delta is one response, the last flagged final; without it one response
  with every id, the prompt first unless ``exclude_input_in_output``;
- ``stop`` = true aborts the running request with the same request id; a cancelled client
  request is aborted too.

Runs in the stub of vLLM's environment, where numpy is 2 and Triton 2.51's ``as_numpy`` garbles
tensors: every tensor crosses through DLPack (torch), never through ``pb_utils``' numpy.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import locale
import os
import time
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from engines import trtllm_inputs, vllm_images
from renderer import stage_params as sp
from renderer.engine_tensors import ENGINE_OUTPUTS
from renderer.errors import RenderError, UnsupportedInputError
from renderer.flags import parse_flag
from renderer.multimodal.tensors import identifiers_from_array
from triton_io.outbox import ResponseOutbox

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def prepare_process() -> None:
    """Before vLLM is imported: the stub's Python never calls ``setlocale`` (open() would read
    vLLM's and torch's UTF-8 files as ASCII), and the engine-core processes it spawns inherit
    this environment."""
    try:
        locale.setlocale(locale.LC_CTYPE, "C.UTF-8")
    except locale.Error:
        locale.setlocale(locale.LC_CTYPE, "")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class VllmEngineModel:
    def initialize(self, args: dict) -> None:
        prepare_process()
        t0 = time.monotonic()
        cfg = json.loads(args["model_config"])
        self.name = cfg["name"]
        params = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        if params.get(sp.DEVICE, "cpu") == "cpu":
            os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", params.get(sp.KV_CACHE_GIB, "1"))
        import torch
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.inputs.engine import embeds_input, tokens_input
        from vllm.sampling_params import RequestOutputKind, SamplingParams
        from vllm.v1.engine.async_llm import AsyncLLM

        self._torch = torch
        self._tokens_input, self._embeds_input = tokens_input, embeds_input
        self._SamplingParams, self._DELTA = SamplingParams, RequestOutputKind.DELTA
        self.family = params.get(sp.FAMILY, "")
        images = {}
        if self.family:
            device_normalize = parse_flag(params.get(sp.MM_DEVICE_DO_NORMALIZE) or "")
            images = vllm_images.engine_args(self.family, int(params[sp.LIMIT_MM_PER_PROMPT]), device_normalize)
        engine_args = AsyncEngineArgs(
            model=params[sp.MODEL_DIR],
            dtype=params.get(sp.DTYPE) or "auto",
            max_model_len=int(params[sp.MAX_MODEL_LEN]) if params.get(sp.MAX_MODEL_LEN, "0") != "0" else None,
            enforce_eager=params.get(sp.DEVICE, "cpu") == "cpu",
            enable_prompt_embeds=params.get(sp.ENABLE_PROMPT_EMBEDS, "false") == "true",
            disable_log_stats=True,
            **images,
        )
        # Built outside any running event loop: its output handler starts on the first
        # generate(), on the stub's loop, where every request then runs.
        self.engine = AsyncLLM.from_engine_args(engine_args)
        self.vocab_size = int(self.engine.model_config.get_vocab_size())
        token = vllm_images.family(self.family).image_token if self.family else None
        self.image_token_id = int(getattr(self.engine.model_config.hf_config, token)) if token else -1
        self._ids = itertools.count()
        self._running: dict[str, str] = {}  # Triton request id -> vLLM request id
        self._tasks: set[asyncio.Task] = set()
        pb_utils.Logger.log_info(
            f"{self.name}: vLLM engine ready in {time.monotonic() - t0:.1f} s "
            f"({self.engine.model_config.dtype}, vocabulary {self.vocab_size})"
        )

    async def execute(self, requests: list[Any]) -> None:
        # Decoupled: the stub does not wait for these; each request answers on its own sender.
        for request in requests:
            task = asyncio.get_running_loop().create_task(self._serve(request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return None

    def finalize(self) -> None:
        # The stub has stopped its loop by now: synchronous shutdown (ends the engine processes).
        self.engine.shutdown()
        self.engine = None  # else AsyncLLM.__del__ shuts down again at interpreter teardown

    def _get(self, request: Any, name: str) -> np.ndarray | None:
        """An input without its batch dimension, through DLPack (never ``as_numpy``: numpy 2)."""
        t = pb_utils.get_input_tensor_by_name(request, name)
        if t is None:
            return None
        arr = self._torch.from_dlpack(t.to_dlpack()).numpy()
        return arr[0] if arr.ndim else arr

    async def _serve(self, request: Any) -> None:
        # Sends leave the event loop: one to a caller whose stub died would block it for good.
        sender = ResponseOutbox(request.get_response_sender(), f"{self.name}-send", FINAL)
        try:
            stop = self._get(request, "stop")
            if stop is not None and bool(stop.reshape(-1)[0]):
                vllm_id = self._running.get(request.request_id())
                if vllm_id is not None:
                    await self.engine.abort(vllm_id)
                sender.send(flags=FINAL)  # as TensorRT-LLM answers a stop: an empty final response
                return
            req = trtllm_inputs.parse(lambda n: self._get(request, n), self.vocab_size, request_id=request.request_id())
            if req.images and not self.family:
                raise UnsupportedInputError("pixel_values", "this server's model takes no images")
            await self._generate(request, sender, req)
        except Exception as e:  # noqa: BLE001 - the error goes to this request only
            sender.send(pb_utils.InferenceResponse(output_tensors=[], error=self._error(e)), flags=FINAL)

    def _error(self, exc: BaseException) -> Any:
        # vLLM's own request validation raises ValueError subclasses: a bad request, not a fault.
        if isinstance(exc, (RenderError, ValueError)):
            return pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
        pb_utils.Logger.log_error(f"{self.name}: internal error: {type(exc).__name__}: {exc}")
        return pb_utils.TritonError(
            f"{self.name}: internal error: {type(exc).__name__}: {exc}", pb_utils.TritonError.INTERNAL
        )

    def _engine_input(self, req: trtllm_inputs.EngineRequest) -> Any:
        if req.images:
            hashes = identifiers_from_array(req.images["mm_identifiers"])
            return vllm_images.mm_input(self.family, req.input_ids, req.images, hashes, self.image_token_id)
        if req.prompt_embeds is not None:
            return self._embeds_input(self._torch.from_numpy(np.ascontiguousarray(req.prompt_embeds)))
        return self._tokens_input(list(req.input_ids))

    def _sampling(self, req: trtllm_inputs.EngineRequest) -> Any:
        one_id = [w[0] for w in req.stop_words if len(w) == 1]
        sampling = self._SamplingParams(
            max_tokens=req.max_tokens,
            temperature=0.0 if req.greedy else req.temperature,
            top_k=0 if req.greedy else max(req.top_k, 0),
            top_p=req.top_p,
            seed=None if req.seed is None else req.seed % 2**63,
            min_tokens=req.min_tokens,
            repetition_penalty=req.repetition_penalty,
            presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty,
            # TensorRT-LLM's stopping: end_id and the stop words, not vLLM's own EOS handling.
            ignore_eos=True,
            stop_token_ids=list(dict.fromkeys(([req.end_id] if req.end_id >= 0 else []) + one_id)),
            detokenize=False,
            output_kind=self._DELTA,
        )
        if req.bad_words:
            # vLLM takes bad words as strings and tokenizes them itself; these are ids already.
            sampling._bad_words_token_ids = [list(w) for w in req.bad_words]
        return sampling

    async def _generate(self, request: Any, sender: ResponseOutbox, req: trtllm_inputs.EngineRequest) -> None:
        vllm_id = f"{req.request_id or 'req'}-{next(self._ids)}"
        if req.request_id:
            self._running[req.request_id] = vllm_id
        generated: list[int] = []
        done = False
        try:
            async with contextlib.aclosing(
                self.engine.generate(self._engine_input(req), self._sampling(req), vllm_id)
            ) as outputs:
                async for out in outputs:
                    delta = list(out.outputs[0].token_ids)
                    done = out.finished
                    cut = _stop_word_end(generated, delta, req)
                    if cut is not None:
                        delta, done = delta[:cut], True
                    generated += delta
                    if request.is_cancelled():
                        done = True
                    elif sender.stalled():
                        pb_utils.Logger.log_warn(f"{self.name}: a request's caller stopped taking responses; dropped")
                        done = True
                    if req.streaming and (delta or done):
                        sender.send(self._response(delta), flags=FINAL if done else 0)
                    if done:
                        break  # leaving the generator aborts the request in vLLM
        finally:
            if self._running.get(req.request_id) == vllm_id:
                del self._running[req.request_id]
        if not req.streaming:
            prompt = [] if req.exclude_input_in_output else list(req.input_ids)
            sender.send(self._response(prompt + generated), flags=FINAL)
        elif not done:
            sender.send(flags=FINAL)

    def _response(self, ids: list[int]) -> Any:
        # Through DLPack, not numpy (this stub runs in vLLM's environment, whose numpy 2 the 2.51
        # stub cannot convert); each dtype as renderer/engine_tensors.py declares the output.
        out = self._output("output_ids", ids).reshape(1, 1, -1)  # [batch, beams, tokens]
        length = self._output("sequence_length", [[out.shape[-1]]])
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor.from_dlpack("output_ids", out),
                pb_utils.Tensor.from_dlpack("sequence_length", length),
            ]
        )

    def _output(self, name: str, values: Any) -> Any:
        return self._torch.tensor(values, dtype=getattr(self._torch, ENGINE_OUTPUTS[name].np_dtype.__name__))


def _stop_word_end(generated: list[int], delta: list[int], req: trtllm_inputs.EngineRequest) -> int | None:
    """How many ids of ``delta`` to keep where TensorRT-LLM's end rule (``EngineRequest.ends``)
    ends the output inside it: a multi-id stop word vLLM cannot stop on itself."""
    seq = list(generated)
    for k, token in enumerate(delta):
        seq.append(token)
        if req.ends(seq):
            return k + 1
    return None
