"""``make gpu-check`` (benchmarks/gpu_check.py) rehearsed here, where no GPU is lent.

The script must work the first time it meets a device: device time is short. Every part of it runs
on the CPU (``--device cpu:0``, the code ``IMAGE_DEVICE=cuda`` runs, on another device): the numba
path against the torch path, the oracle and the device decode where torchvision is importable
(build/peer-venv's python, in a subprocess), the timings, memory and residency, through the same
JSON it writes on a GPU; the weightless folders it carries to a device machine must be enough for
the processor; and without CUDA it says so and exits 2.
"""

from __future__ import annotations

import json
import subprocess
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
    """Every part of the check on ``cpu:0``: in this venv, without torchvision, the oracle and the
    device decode are recorded as unavailable with the reason (a CUDA run fails on that), and the
    rest is compared, timed and written."""
    monkeypatch.setattr(gpu_check, "TIMING_IMAGES", ("jpeg_640x480",))  # the big one only matters on a GPU
    out = tmp_path / "gpu_check.json"
    rc = gpu_check.main(["--models-dir", str(models_dir), "--device", "cpu:0", "--repeat", "1", "--out", str(out)])
    result = json.loads(out.read_text())
    assert rc == 0 and result["passed"], result["held"]
    assert result["version"] == 2 and result["held"] == dict.fromkeys(result["held"], True)
    assert result["cpu_path"]["bit_exact"] and {r["family"] for r in result["cpu_path"]["rows"]} == set(
        gpu_check.FAMILIES
    )
    assert result["device_vs_cpu"]["ids_grids_hashes_equal"]
    if not _has_torchvision():
        assert not result["oracle"]["available"] and "torchvision" in result["oracle"]["reason"]
        assert not result["decode"]["available"] and "IMAGE_DECODE_DEVICE" in result["decode"]["reason"]
    assert len(result["timings"]) == len(gpu_check.FAMILIES)
    assert all(r["cpu_miss_ms"] > 0 and r["device_miss_ms"] > 0 for r in result["timings"])
    assert all(r["hit_pixel_values_on"] == "cpu" and r["hit_hits"] == 1 for r in result["residency"])
    assert all(r["cache_bytes_per_image"] > 0 for r in result["memory"])
    assert result["environment"]["device"] == "cpu:0"


def _has_torchvision() -> bool:
    try:
        import torchvision.io  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


def test_a_difference_fails_the_check(models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: device pixels off by more than the tolerance are reported as such."""
    from renderer.multimodal import kernels

    real = kernels.normalize_chw_tensor
    monkeypatch.setattr(
        kernels, "normalize_chw_tensor", lambda chw, table: real(chw, table) + 10 * gpu_check.ORACLE_ATOL
    )
    monkeypatch.setattr(gpu_check, "TIMING_IMAGES", ("jpeg_640x480",))
    out = tmp_path / "gpu_check.json"
    assert (
        gpu_check.main(["--models-dir", str(models_dir), "--device", "cpu:0", "--repeat", "1", "--out", str(out)]) == 1
    )
    result = json.loads(out.read_text())
    assert not result["passed"] and not result["held"]["cpu_path_bit_exact"]
    assert result["cpu_path"]["rows"][0]["max_abs_diff"] == pytest.approx(10 * gpu_check.ORACLE_ATOL, rel=0.1)


def test_the_checks_parts_alone_on_a_small_image(models_dir: Path) -> None:
    """The check's functions, called as the check calls them, on the CPU."""
    c = gpu_check.Check(models_dir, "cpu:0", repeat=1)
    rows = c.cpu_path(["tiny_3x5"])["rows"]
    assert [r["max_abs_diff"] for r in rows] == [0.0, 0.0]
    stages = c.stages("jpeg_640x480", decode=False)
    assert stages["pil_decode_ms"] > 0 and stages["hash_ms"] > 0 and "device_decode_ms" not in stages
    decode = c.decode([], orientations=(1, 6))
    if not _has_torchvision():
        assert decode == {"available": False, "reason": decode["reason"], "rows": []}
    else:
        assert [r["upright"] and r["max_abs_diff"] == 0.0 for r in decode["rows"]] == [True, True]


_PEER = ROOT / "build" / "peer-venv" / "bin" / "python"


def test_rehearsal_with_torchvision_in_the_peer_venv(models_dir: Path, tmp_path: Path) -> None:
    """The whole check on ``cpu:0`` in build/peer-venv, which has torchvision and transformers' fast
    processors: the oracle runs (equal to ours, 0.0, on the CPU) and so does the device decode
    (libjpeg there, equal to Pillow's, every orientation upright). Only nvJPEG and the GPU's own
    resize are left to the device machine."""
    if not _PEER.exists():
        pytest.skip(f"{_PEER} is absent (make bench-peer builds it): no torchvision to run the oracle with here")
    out = tmp_path / "peer.json"
    driver = (
        "import sys; from benchmarks import gpu_check; gpu_check.TIMING_IMAGES = ('jpeg_640x480',); "
        "sys.exit(gpu_check.main(sys.argv[1:]))"
    )
    args = ["--models-dir", str(models_dir), "--device", "cpu:0", "--repeat", "1", "--out", str(out)]
    env = {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [str(_PEER), "-c", driver, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600
    )
    if run.returncode and "ModuleNotFoundError" in run.stderr:
        pytest.skip(f"{_PEER} lacks a module the check needs: {run.stderr.strip().splitlines()[-1]}")
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["oracle"]["available"] and result["oracle"]["rows"]
    assert all(r["max_abs_diff"] == 0.0 and r["grid_equal"] for r in result["oracle"]["rows"])
    assert result["decode"]["available"]
    assert all(r["max_abs_diff"] == 0.0 and r["hash_equal"] and r["upright"] for r in result["decode"]["rows"])
    assert {r["orientation"] for r in result["decode"]["rows"]} == set(range(1, 9))
    assert all("device_decode_miss_ms" in r for r in result["timings"])
    assert result["environment"]["torchvision"]


def test_without_cuda_it_compares_nothing(models_dir: Path, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: `make gpu-check` runs the real comparison here")
    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--models-dir", str(models_dir), "--out", str(out)]) == 2
    assert not out.exists()
