"""Floor ``tokenize``: reads the prompt, answers 200 fixed ids (see ``benchmarks/floor``)."""

import numpy as np
import triton_python_backend_utils as pb_utils

from benchmarks.floor import PLACEHOLDER_IDS

IDS = np.array(PLACEHOLDER_IDS, dtype=np.int32)[np.newaxis]


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        pass

    def execute(self, requests: list) -> list:
        out = []
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "prompt")
            text = prompt.as_numpy() if prompt is not None else np.array([[b""]], dtype=np.object_)
            out.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("input_ids", IDS),
                        pb_utils.Tensor("input_lengths", np.array([[IDS.shape[1]]], np.int32)),
                        pb_utils.Tensor("token_offsets", np.zeros((1, 0, 2), np.int32)),
                        pb_utils.Tensor("rendered_prompt", text.reshape(1, 1)),
                        pb_utils.Tensor("input_embeds", np.zeros((1, 0, 0), np.float32)),
                        pb_utils.Tensor("length_limit", np.array([[-1, 0]], np.int32)),  # no context limit
                    ]
                )
            )
        return out
