"""``make gpu-check`` (benchmarks/gpu_check.py) rehearsed here, where no GPU is lent.

The script must work the first time it meets a device: device time is short. Its torch path runs on
the CPU (``--device cpu:0``, the code ``KIND_GPU`` runs, on another device) against the numba path,
through the same comparison and JSON it writes on a GPU; the weightless folders it carries to a
device machine must be enough for the processor; and without CUDA it says so and exits 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import gpu_check
from model_builders import vlm_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from model_builders.reference_tokenizers import build

    build(ROOT / "build" / "models" / "tokenizers")
    full = tmp_path_factory.mktemp("full")
    for family in gpu_check.FAMILIES:
        vlm_model.build(full / f"tiny-{family}", family=family)
    slim = tmp_path_factory.mktemp("slim")
    assert gpu_check.main(["--models-dir", str(full), "--prepare", str(slim)]) == 0
    return slim


def test_prepared_folders_carry_no_weights(models_dir: Path) -> None:
    files = [p for p in models_dir.rglob("*") if p.is_file()]
    assert files and not [p for p in files if p.suffix == ".safetensors"]
    assert sum(p.stat().st_size for p in files) < 48 << 20  # the device tool carries 64 MiB in all


def test_rehearsal_on_cpu_compares_and_times(models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_check, "TIMING_IMAGES", ("rgb_640x480",))  # the big one only matters on a GPU
    out = tmp_path / "gpu_check.json"
    rc = gpu_check.main(["--models-dir", str(models_dir), "--device", "cpu:0", "--repeat", "1", "--out", str(out)])
    result = json.loads(out.read_text())
    assert rc == 0 and result["passed"], result
    assert {c["family"] for c in result["checks"]} == set(gpu_check.FAMILIES)
    assert all(c["ids_and_hashes_equal"] and c["other_tensors_equal"] for c in result["checks"])
    assert len(result["timings"]) == len(gpu_check.FAMILIES)
    assert all(r["cpu_miss_ms"] > 0 and r["device_miss_ms"] > 0 for r in result["timings"])


def test_a_difference_fails_the_check(models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: a device result off by more than the tolerance is reported as such."""
    real = gpu_check._compare

    def skewed(family, cpu, dev, atol):  # noqa: ANN001, ANN202
        dev.pixel_values.add_(10 * atol)
        return real(family, cpu, dev, atol)

    monkeypatch.setattr(gpu_check, "_compare", skewed)
    monkeypatch.setattr(gpu_check, "TIMING_IMAGES", ())
    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--models-dir", str(models_dir), "--device", "cpu:0", "--out", str(out)]) == 1
    assert not json.loads(out.read_text())["passed"]


def test_without_cuda_it_compares_nothing(models_dir: Path, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: `make gpu-check` runs the real comparison here")
    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--models-dir", str(models_dir), "--out", str(out)]) == 2
    assert not out.exists()
