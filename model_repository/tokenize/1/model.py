"""Triton adapter for the ``tokenize`` stage: tensors in, ``renderer.Renderer``, tensors out."""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from renderer import Renderer, RendererConfig, batch_rows
from renderer import stage_params as sp
from renderer.engine_tensors import read_scalar
from renderer.errors import RenderError
from renderer.prompts import completion_prompt
from triton_io import tensors as io

# Every output typed as renderer/stage_tensors.py declares it.
OUT = io.StageOutputs("tokenize")
# The outputs most requests leave empty: one tensor each (``OUT.constant``), sent by every such response.
NO_OFFSETS = OUT.empty("token_offsets", (0, 2))
NO_EMBEDS = OUT.empty("input_embeds", (0, 0))
# A request with these inputs alone (render_chat's and render_completion's without params, salt or
# max_tokens) may take the text lane (``_text_only``).
TEXT_ONLY = frozenset({"prompt", "chat_template_applied"})


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        p = io.model_params(args)
        self.renderer = Renderer.from_config(
            RendererConfig(
                model_dir=p[sp.MODEL_DIR],
                max_model_len=int(p.get(sp.MAX_MODEL_LEN) or 0),
                enable_prompt_embeds=io.flag(p, sp.ENABLE_PROMPT_EMBEDS),
                tokenizer_backend=p.get(sp.TOKENIZER_BACKEND) or "auto",
                tokenizer_record=p.get(sp.TOKENIZER_RECORD) or "",
            )
        )
        self.renderer.warmup()
        backend = self.renderer.tokenizer.backend
        pb_utils.Logger.log_info(f"tokenize: tokenizer: {self.renderer.tokenizer.source}")
        pb_utils.Logger.log_info(f"tokenize: tokenizer backend {backend.name} ({backend.reason})")
        io.return_freed_memory()

    def _parse(self, request: Any) -> Any:
        inputs = io.inputs(request)
        prompt = self.renderer.render_prompt(
            completion_prompt(
                text=io.get_bytes(inputs, "prompt"),
                token_ids=io.get_ids(inputs, "prompt_token_ids"),
                embeds=io.get_bytes(inputs, "prompt_embeds"),
                cache_salt=io.get_bytes(inputs, "cache_salt"),
            )
        )
        params = self.renderer.request_params(
            io.get_json(inputs, "tokenize_params"),
            chat=bool(io.get_scalar(inputs, "chat_template_applied", bool)),
            max_output_tokens=io.get_scalar(inputs, "max_tokens"),
        )
        return prompt, params

    def _parse_rows(self, request: Any) -> list[tuple[Any, Any]]:
        """A TensorRT-LLM ``text_input`` request: each row's prompt and params, as ``_parse``
        reads a request of that one prompt and its ``max_tokens``."""
        arrays = io.batch_arrays(request)
        texts = arrays["text_input"]

        def read(row: int) -> tuple[Any, Any]:
            prompt = self.renderer.render_prompt(completion_prompt(text=io.one_bytes(texts[row], "text_input")))
            max_tokens = read_scalar(batch_rows.row_getter(arrays, row), "max_tokens", int)
            return prompt, self.renderer.request_params(None, max_output_tokens=max_tokens)

        return batch_rows.each_row(batch_rows.rows_in(arrays), read)

    def finalize(self) -> None:
        io.release_before_teardown()

    def execute(self, requests: list) -> list:
        out = [self._text_only(r) for r in requests]
        rest = [i for i, o in enumerate(out) if o is None]
        if not rest:
            return out
        batches: dict[int, list[tuple[Any, Any]]] = {}  # a TensorRT-LLM request's rows
        for i in rest:
            if pb_utils.get_input_tensor_by_name(requests[i], "text_input") is None:
                continue
            try:
                batches[i] = self._parse_rows(requests[i])
            except Exception as e:  # noqa: BLE001 - this request's error
                e.__traceback__ = None  # its frames hold the request's arrays
                out[i] = io.error_response(e, "tokenize")
        singles = [i for i in rest if i not in batches and out[i] is None]
        prompts, params = io.parse_each([requests[i] for i in singles], self._parse)
        # One batched encode for every prompt of the execute, each row of a batch among them.
        rows = [row for i in batches for row in batches[i]]
        results = self.renderer.render_batch(
            prompts + [p for p, _ in rows], params + [q for _, q in rows], ids_as_array=True
        )
        for k, i in enumerate(singles):
            out[i] = self._respond(requests[i], results[k], params[k])
        k = len(singles)
        for i, batch in batches.items():
            out[i] = self._respond_rows(results[k : k + len(batch)])
            k += len(batch)
        return out

    def _respond_rows(self, results: list[Any]) -> Any:
        """The response to a ``text_input`` request: its rows' ids, padded, and their lengths
        (what the ``ensemble`` front asks of this step)."""
        try:
            done = batch_rows.each_row(len(results), lambda row: batch_rows.unless_refused(results[row]))
        except Exception as e:  # noqa: BLE001 - this request's error
            return io.error_response(e, "tokenize")
        rows = []
        for res in done:
            ids = np.asarray(res.prompt_token_ids, dtype=np.int32).reshape(-1)
            rows.append({"input_ids": ids, "input_lengths": np.array([ids.size], np.int32)})
        return pb_utils.InferenceResponse(output_tensors=OUT.batch(batch_rows.stack_rows(rows)))

    def _text_only(self, request: Any) -> Any:
        """The response of a request whose inputs are a text prompt and the chat flag alone,
        rendered by ``Renderer.render_text_bytes`` with the prompt echoed as ``rendered_prompt``;
        None where it needs the full path: other inputs, the lane declines, or a bad request (the
        full path reports it, in its own order of checks). A bug is this request's internal error."""
        inputs = io.inputs(request)
        if "prompt" not in inputs or not inputs.keys() <= TEXT_ONLY:
            return None
        try:
            arr = io.get(inputs, "prompt")
            raw = io.one_bytes(arr, "prompt")
            params = self.renderer.request_params(None, chat=bool(io.get_scalar(inputs, "chat_template_applied", bool)))
            res = self.renderer.render_text_bytes(raw, params)
        except RenderError:
            return None
        except Exception as e:  # noqa: BLE001 - a bug: this request's error, never the batch's
            return io.error_response(e, "tokenize")
        if res is None:
            return None
        return self._respond(request, res, params, echo=arr if type(arr.item(0)) is bytes else None)

    def _respond(self, request: Any, res: Any, params: Any, echo: Any = None) -> Any:
        if isinstance(res, BaseException):
            return io.error_response(res, "tokenize")
        ids = res.prompt_token_ids
        rows = res.prompt_embeds
        n_tokens = len(ids) if rows is None else len(rows)
        tensors = [OUT("input_ids", ids), OUT.shared("input_lengths", n_tokens)]
        # The generation ensembles read only the two above; the render ensembles the rest.
        wanted = io.requested(request)
        if "token_offsets" in wanted:
            offsets = res.token_offsets
            tensors.append(
                OUT("token_offsets", np.asarray(offsets, dtype=np.int32).reshape(-1, 2))
                if offsets
                else OUT.constant("token_offsets", NO_OFFSETS)
            )
        if "rendered_prompt" in wanted:
            tensors.append(
                OUT("rendered_prompt", [res.prompt or ""]) if echo is None else OUT.echo("rendered_prompt", echo)
            )
        if "input_embeds" in wanted:
            # Embeds travel as FP32 (numpy has no bfloat16); values were already rounded to the
            # model dtype, so the llm sees exactly what vLLM would.
            tensors.append(
                OUT.constant("input_embeds", NO_EMBEDS) if rows is None else OUT("input_embeds", rows.float().numpy())
            )
        if "length_limit" in wanted:
            tensors.append(OUT("length_limit", params.length_limit.values()))
        return pb_utils.InferenceResponse(output_tensors=tensors)
