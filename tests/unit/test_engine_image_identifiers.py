"""The item identities on the engine seam (``mm_identifiers``), vLLM's per-family engine settings, and the
launcher's refusal of an engine environment that cannot serve images."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from engines import vllm_images
from renderer.errors import UnsupportedMultiModalError
from renderer.multimodal.tensors import identifiers_array, identifiers_from_array


def test_identifiers_round_trip_through_the_byte_tensor():
    ids = ["0f" * 32, "my-uuid", "ünï-ç0de", ""]
    arr = identifiers_array(ids)
    assert arr.dtype == np.uint8 and arr.shape == (4, 64)
    assert identifiers_from_array(arr) == ids
    assert identifiers_from_array(identifiers_array([])) == []


def test_each_family_starts_vllms_engine_for_processed_float32_images():
    qwen = vllm_images.engine_args("qwen2_vl", 3)
    # mm_process's normalized float32: vLLM must not normalize again (its Qwen2-VL default).
    assert qwen == {
        "limit_mm_per_prompt": {"image": 3, "video": 0},
        "mm_processor_cache_gb": 0,
        "mm_device_do_normalize": False,
    }
    assert vllm_images.engine_args("pixtral", 2) == {"limit_mm_per_prompt": {"image": 2}, "mm_processor_cache_gb": 0}
    with pytest.raises(UnsupportedMultiModalError, match="qwen2_vl, pixtral"):
        vllm_images.family("llava_next")


def test_an_engine_environment_without_torchvision_is_refused_naming_the_target(tmp_path):
    from dataclasses import replace

    from launcher import repository
    from launcher.settings import Settings

    # An "environment" whose python is one where vLLM's compiled ops do not import (this venv's).
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    with pytest.raises(SystemExit, match="needs torchvision in vLLM's environment .*`make engine-vllm`"):
        repository.check_vllm_images(replace(Settings(), vllm_env=str(tmp_path)))
