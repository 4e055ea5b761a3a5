"""Floor ``chat_render`` for one-image chats (see ``benchmarks/floor`` and
``benchmarks/image_floor``): no parse and no render, but the image's bytes still travel on.

It answers the prompt recorded from the real stage for a chat of this length and hands the whole
``messages`` text on as ``mm_data`` (about the data URL's size, as the real stage's one element),
with the length in ``mm_kwargs`` so the ``mm_process`` stand-in finds its recorded answer.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from benchmarks.floor import read_recorded


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        self.recorded = read_recorded(__file__)

    def execute(self, requests: list) -> list:
        out = []
        for request in requests:
            messages = pb_utils.get_input_tensor_by_name(request, "messages").as_numpy()
            key = len(messages[0, 0])
            out.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("prompt", self.recorded[key]["rendered_prompt"].reshape(1, 1)),
                        pb_utils.Tensor("chat_template_applied", np.array([[True]])),
                        pb_utils.Tensor("output_parsing", np.array([[b""]], dtype=np.object_)),
                        pb_utils.Tensor("mm_items", np.array([[b"{}"]], dtype=np.object_)),
                        pb_utils.Tensor("mm_data", messages.reshape(1, 1)),
                        pb_utils.Tensor("mm_kwargs", np.array([[str(key).encode()]], dtype=np.object_)),
                    ]
                )
            )
        return out
