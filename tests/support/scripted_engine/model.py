"""A test double of the model's choice of words behind TensorRT-LLM's ``tensorrt_llm`` interface:
it answers with the token ids its prompt spells out, so a live test can make a "model" write a
tool call or a thinking block (the tiny seeded models never would). Everything around it is the
real thing: the ensembles, ``detokenize`` and its parsers, the HTTP front, tritonserver.

The prompt (decoded from ``input_ids``) carries ``SCRIPT[...]``, a JSON list of steps, each a list
of token ids (a bare id is a step of one); the last such list is the answer. Streamed
(``detokenize`` always streams), each step is one response, the last one together with
``end_id``, so generation stops on the answer's last token as a model's end-of-turn token would
end it; ``request_output_len`` cuts it short as TensorRT-LLM does. A ``stop`` request gets its
empty final response.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
SCRIPT = re.compile(r"SCRIPT(\[[0-9, \[\]]*\])")


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        from tokenizers import Tokenizer

        cfg = json.loads(args["model_config"])
        model_dir = Path(cfg["parameters"]["model_dir"]["string_value"])
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))

    def execute(self, requests: list) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                if _scalar(request, "stop"):
                    sender.send(flags=FINAL)
                    continue
                self._answer(request, sender)
            except Exception as e:  # noqa: BLE001 - the error goes to this request only
                sender.send(
                    pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(e))), flags=FINAL
                )
        return None

    def _answer(self, request: Any, sender: Any) -> None:
        prompt = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy().reshape(-1).tolist()
        found = SCRIPT.findall(self.tokenizer.decode(prompt, skip_special_tokens=False))
        if not found:
            raise ValueError("scripted engine: the prompt carries no SCRIPT[...]")
        steps = [[int(i) for i in (s if isinstance(s, list) else [s])] for s in json.loads(found[-1])]
        end_id = _scalar(request, "end_id")
        if steps and end_id is not None:
            steps[-1] = steps[-1] + [int(end_id)]  # the end id comes with the answer's last token
        limit = int(_scalar(request, "request_output_len") or sum(map(len, steps)))
        steps = _cut(steps, limit)
        if not _scalar(request, "streaming"):
            head = [] if _scalar(request, "exclude_input_in_output") else prompt
            sender.send(_response(head + [i for s in steps for i in s]), flags=FINAL)
            return
        for step in steps[:-1]:
            sender.send(_response(step))
        sender.send(_response(steps[-1]) if steps else None, flags=FINAL)


def _cut(steps: list[list[int]], limit: int) -> list[list[int]]:
    """The steps up to ``limit`` ids in all."""
    out: list[list[int]] = []
    for step in steps:
        if limit <= 0:
            break
        out.append(step[:limit])
        limit -= len(out[-1])
    return out


def _scalar(request: Any, name: str) -> Any:
    t = pb_utils.get_input_tensor_by_name(request, name)
    return None if t is None else t.as_numpy().reshape(-1)[0].item()


def _response(ids: list[int]) -> Any:
    arr = np.asarray(ids, np.int32).reshape(1, 1, -1)  # [batch, beams, tokens]
    return pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("output_ids", arr),
            pb_utils.Tensor("sequence_length", np.asarray([[arr.shape[-1]]], np.int32)),
        ]
    )
