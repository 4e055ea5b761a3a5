"""vLLM's recorded images through ``render_chat`` on a live server for the tiny Qwen2-VL (chat_render,
tokenize, mm_process as deployed): grids and placeholder runs exact, pixels within the tolerance
``tests/support/vllm_images.py`` states, as in process (``tests/unit/test_mm_vllm_fixtures.py``).
"""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

from vllm_images import ARRAYS, CASES, MAX_FRACTION_OFF, PIXEL_ATOL, PLACEHOLDER, reference_pixels


ROOT = Path(__file__).resolve().parents[2]

# --- live: the same images through render_chat on the default settings ---------------------------


@pytest.fixture(scope="module")
def qwen_server(server, model_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    """A ``render_chat`` server for the tiny Qwen2-VL with the default image processor (fast),
    trusting per-request ``mm_processor_kwargs`` (one case sets ``max_pixels``)."""
    from chat_servers import start_chat_server

    from launcher import cli as launch

    s = start_chat_server(
        server,
        "qwen2_vl",
        model_dirs["qwen2_vl"],
        tmp_path_factory.mktemp("fixture-qwen"),
        trust_request_mm_kwargs=True,
    )
    assert s.image_processor == "fast"
    yield s
    launch.stop(s)


@pytest.mark.live
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_served_images_match_vllms_processor(qwen_server, protocol: str) -> None:
    """Each Qwen2-VL case's image in a chat through ``render_chat`` (chat_render, tokenize,
    mm_process as deployed): the served grid and placeholder run are exact and the pixels within
    the tolerance above, as in process."""
    from client import RendererClient

    port = qwen_server.grpc_port if protocol == "grpc" else qwen_server.http_port
    client = RendererClient(f"127.0.0.1:{port}", protocol=protocol)
    try:
        for case in (c for c in CASES.values() if c["family"] == "qwen2_vl"):
            data = ARRAYS["bytes/" + case["image"]].tobytes()
            url = "data:image/png;base64," + base64.b64encode(data).decode()
            messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
            kwargs = case["mm_processor_kwargs"]
            out = client.render_chat(messages, chat_params={"mm_processor_kwargs": kwargs} if kwargs else None)
            assert out.outputs["image_grid_thw"].tolist() == [case["grid"]], case["key"]
            assert out.input_ids.count(PLACEHOLDER["qwen2_vl"]) == case["placeholder_tokens"], case["key"]
            diff = np.abs(out.outputs["pixel_values"].astype(np.float64) - reference_pixels(case))
            assert diff.max() <= PIXEL_ATOL + 1e-6, (case["key"], diff.max())
            assert (diff > 1e-6).mean() <= MAX_FRACTION_OFF, case["key"]
    finally:
        client.close()
