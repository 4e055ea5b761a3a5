"""Floor ``chat_render``: answers the messages JSON as the prompt (see ``benchmarks/floor``)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        pass

    def execute(self, requests: list) -> list:
        out = []
        for request in requests:
            messages = pb_utils.get_input_tensor_by_name(request, "messages").as_numpy()
            out.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("prompt", messages.reshape(1, 1)),
                        pb_utils.Tensor("chat_template_applied", np.array([[True]])),
                        pb_utils.Tensor("output_parsing", np.array([[b""]], dtype=np.object_)),
                        pb_utils.Tensor("mm_placeholders", np.zeros((1, 0, 2), np.int32)),
                        pb_utils.Tensor("mm_hashes", np.zeros((1, 0), dtype=np.object_)),
                    ]
                )
            )
        return out
