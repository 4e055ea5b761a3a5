"""``IMAGE_DEVICE`` / ``IMAGE_DECODE_DEVICE`` (renderer/multimodal/devices.py) on this CPU host.

The device path is the same code with ``device="cuda"`` as with ``device="cpu:0"`` (torch on the
CPU), which runs here: it must equal the numba CPU path bit for bit with the fast processor (both
follow torchvision's CPU rule, uint8 in and out), for every resampling filter. Decoding on the device
needs torchvision, which the project's venv lacks: its refusal is tested here, and the decode itself
(torchvision's libjpeg on the CPU, turned upright by ``devices.orient``) against Pillow in
``build/peer-venv``'s python, which has torchvision, in a subprocess (skipped, saying so, where that
environment is absent). What only a GPU can say (nvJPEG's pixels, float32 resize on the device, the
speed) is ``make gpu-check``'s (benchmarks/gpu_check.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from launcher import repository
from launcher.settings import Settings
from model_builders import vlm_model
from renderer.chat.messages import MultiModalItem
from renderer.errors import ImageDecodeError, ImageDecoderUnavailableError, ImageDeviceError
from renderer.multimodal import MediaLimits, MultiModalProcessor, devices
from renderer.multimodal.media import LoadedImage, decode_image
from renderer.stage_params import stage_params
from tests.support.mm_images import PARITY_IMAGES, data_url, jpeg, png

ROOT = Path(__file__).resolve().parents[2]
PEER_PYTHON = ROOT / "build" / "peer-venv" / "bin" / "python"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from model_builders.reference_tokenizers import build

    build(ROOT / "build" / "models" / "tokenizers")
    base = tmp_path_factory.mktemp("vlm-devices")
    return {f: vlm_model.build(base / f, family=f) for f in ("qwen2_vl", "pixtral")}


def _prompt(proc: MultiModalProcessor, n: int) -> list[int]:
    return [1] + [proc.placeholder_token_id, 2] * n


def _items(datas: list[tuple[bytes, str]]) -> list[MultiModalItem]:
    return [MultiModalItem("image", "image_url", data_url(d, f), None, 0, i) for i, (d, f) in enumerate(datas)]


# --- the settings -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "kind", "resolved"),
    [
        ("auto", "KIND_GPU", "cuda"),
        ("auto", "KIND_CPU", "cpu"),
        ("cpu", "KIND_GPU", "cpu"),
        ("cuda", "KIND_GPU", "cuda"),
    ],
)
def test_image_device_resolves_against_the_instance_kind(setting: str, kind: str, resolved: str) -> None:
    assert devices.resolve_image_device(setting, kind) == resolved


def test_image_device_refusals_name_the_setting() -> None:
    with pytest.raises(ImageDeviceError, match=r"^IMAGE_DEVICE=cuda needs mm_process on the GPU.*KIND_CPU"):
        devices.resolve_image_device("cuda", "KIND_CPU")
    with pytest.raises(
        ImageDeviceError, match=r"^IMAGE_DEVICE=gpu is not a device here; choose one of auto, cpu, cuda"
    ):
        devices.resolve_image_device("gpu", "KIND_GPU")
    for ok in ("cpu", "cpu:0", "cuda", "cuda:1"):
        devices.check_device(ok)
    for bad in ("gpu", "cpu:1", "cuda:", "mps"):
        with pytest.raises(ImageDeviceError, match="choose cpu or cuda"):
            devices.check_device(bad)
    devices.check_decode_setting("cpu", "cpu")
    devices.check_decode_setting("cuda", "cuda")
    with pytest.raises(ImageDeviceError, match=r"^IMAGE_DECODE_DEVICE=cuda needs IMAGE_DEVICE=cuda .*not cpu"):
        devices.check_decode_setting("cuda", "cpu")
    with pytest.raises(ImageDeviceError, match=r"^IMAGE_DECODE_DEVICE=gpu is not a device here"):
        devices.check_decode_setting("gpu", "cuda")


def test_settings_reach_the_stage_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings -> template_vars -> mm_process's config parameters (renderer/stage_params.py) -> ``from_config``."""
    monkeypatch.setattr(repository, "gpu_visible", lambda: False)
    v = repository.template_vars(Settings())
    assert (v["mm_instance_kind"], v["mm_device"], v["image_decode_device"]) == ("KIND_CPU", "cpu", "cpu")
    v = repository.template_vars(Settings(mm_instance_kind="KIND_GPU", image_decode_device="cuda"))
    assert (v["mm_device"], v["image_decode_device"]) == ("cuda", "cuda")
    monkeypatch.setattr(repository, "gpu_visible", lambda: True)
    assert repository.template_vars(Settings())["mm_device"] == "cuda"  # auto on a GPU host
    assert repository.template_vars(Settings(image_device="cpu"))["mm_device"] == "cpu"
    monkeypatch.setenv("IMAGE_DEVICE", "cpu")
    monkeypatch.setenv("IMAGE_DECODE_DEVICE", "cuda")
    s = Settings.from_env()
    assert (s.image_device, s.image_decode_device) == ("cpu", "cuda")
    with pytest.raises(SystemExit, match=r"IMAGE_DECODE_DEVICE=cuda needs IMAGE_DEVICE=cuda"):
        repository.check_image_devices(s)
    monkeypatch.setattr(repository, "gpu_visible", lambda: False)
    with pytest.raises(SystemExit, match=r"IMAGE_DEVICE=cuda needs mm_process on the GPU"):
        repository.check_image_devices(Settings(image_device="cuda"))
    repository.check_image_devices(Settings())
    carried = {p.key: p.value_name for p in stage_params("mm_process", "multimodal")}
    assert (carried["device"], carried["decode_device"]) == ("mm_device", "image_decode_device")


def test_from_config_reads_the_device_parameters(dirs: dict[str, Path]) -> None:
    params = {"model_dir": str(dirs["qwen2_vl"]), "cache_bytes": "0", "device": "cpu", "decode_device": "cpu"}
    proc = MultiModalProcessor.from_config(params)
    assert (proc.device, proc.decode_on, proc.family.image_processor) == ("cpu", None, "fast")
    proc = MultiModalProcessor.from_config(
        {**params, "device": "cpu:0", "image_processor": "slow", "decode_device": ""}
    )
    assert (proc.device, proc.decode_on, proc.family.image_processor) == ("cpu:0", None, "slow")
    with pytest.raises(ImageDeviceError, match="IMAGE_DECODE_DEVICE=cuda needs IMAGE_DEVICE=cuda"):
        MultiModalProcessor.from_config({**params, "decode_device": "cuda"})


def test_decoding_on_the_device_is_refused_at_load_without_torchvision(
    dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether or not this venv has torchvision: made unimportable, the stage refuses to load,
    naming the setting, rather than decoding with Pillow behind the setting's back."""
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setitem(sys.modules, "torchvision.io", None)
    with pytest.raises(
        ImageDecoderUnavailableError, match=r"^IMAGE_DECODE_DEVICE=cuda decodes JPEG .*torchvision"
    ) as e:
        MultiModalProcessor.from_model_dir(dirs["qwen2_vl"], device="cpu:0", decode_device="cuda")
    assert "IMAGE_DECODE_DEVICE=cpu" in str(e.value)
    with pytest.raises(ImageDeviceError, match=r"needs IMAGE_PROCESSOR=fast \(the slow processor resizes with Pillow"):
        MultiModalProcessor.from_model_dir(
            dirs["qwen2_vl"], device="cpu:0", image_processor="slow", decode_device="cuda"
        )
    # Past load (torchvision present then), a decoder gone missing is never hidden by Pillow.
    with pytest.raises(ImageDecoderUnavailableError):
        decode_image(jpeg(64, 48), MediaLimits(), "cpu:0")


def test_a_truncated_jpeg_goes_to_pillow_and_its_refusal() -> None:
    data = jpeg(64, 48)[:-400]
    with pytest.raises(ImageDecodeError, match="Failed to load image"):
        decode_image(data, MediaLimits(), "cpu:0")  # never reaches torchvision: no end-of-image marker


# --- orientation on a tensor -------------------------------------------------------------------------


@pytest.mark.parametrize("orientation", range(0, 10))
def test_orient_is_pillows_exif_transpose(orientation: int) -> None:
    """Each EXIF orientation turned on a (3, H, W) tensor as ``ImageOps.exif_transpose`` turns the
    image (0 and 9: no such orientation, left as is, as Pillow does)."""
    import torch
    from PIL import ImageOps

    px = np.random.default_rng(orientation).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    img = Image.fromarray(px, "RGB")
    exif = img.getexif()
    exif[0x0112] = orientation
    img.info["exif"] = exif.tobytes()
    expected = np.asarray(ImageOps.exif_transpose(img))
    got = devices.orient(torch.from_numpy(px).permute(2, 0, 1), orientation).permute(1, 2, 0).numpy()
    assert np.array_equal(got, expected)


# --- the device path on the CPU ------------------------------------------------------------------------


@pytest.mark.parametrize("resample", [3, 2, 1, 0])
def test_device_path_on_cpu_is_the_cpu_path_bit_for_bit(resample: int, dirs: dict[str, Path], tmp_path: Path) -> None:
    """The fast processor's device path (upload, resize, table, patching on a torch device) run
    on the CPU equals the numba path exactly, for each filter (bicubic, bilinear, lanczos,
    nearest): the fixtures' bit-exactness carries over to the code that runs with device="cuda"."""
    names = ["rgb_640x480", "odd_333x77", "rgba_300x200"]
    for family, src in dirs.items():
        d = tmp_path / family
        shutil.copytree(src, d)
        pp = json.loads((d / "preprocessor_config.json").read_text())
        (d / "preprocessor_config.json").write_text(json.dumps({**pp, "resample": resample}))
        cpu = MultiModalProcessor.from_model_dir(d, cache_bytes=0)
        dev = MultiModalProcessor.from_model_dir(d, cache_bytes=0, device="cpu:0")
        datas = [(png(n), "PNG") for n in names] + [(jpeg(640, 480, 6), "JPEG")]
        for batch in [[x] for x in datas] + [datas]:
            a = cpu.process(_prompt(cpu, len(batch)), _items(batch))
            b = dev.process(_prompt(cpu, len(batch)), _items(batch))
            assert b.pixel_values.device.type == "cpu"
            assert np.array_equal(b.pixel_values.numpy(), a.pixel_values), (family, resample, len(batch))
            assert b.input_ids == a.input_ids and b.hashes == a.hashes
            for k, v in a.tensors().items():
                if k != "pixel_values":
                    assert np.array_equal(np.asarray(b.tensors()[k]), v)


def test_pixels_decoded_on_the_device_are_processed_in_place(dirs: dict[str, Path]) -> None:
    """A ``LoadedImage`` carrying its device tensor (``IMAGE_DECODE_DEVICE``) is processed from it:
    the same result as from the host pixels, with no upload (its own pixels, not the host's)."""
    import torch

    for family, d in dirs.items():
        proc = MultiModalProcessor.from_model_dir(d, cache_bytes=0, device="cpu:0")
        for name in PARITY_IMAGES[:3]:
            img = decode_image(png(name), MediaLimits())
            host = proc.family.process(img, {}, "cpu:0")
            chw = torch.from_numpy(img.rgb.copy()).permute(2, 0, 1).contiguous()
            on_dev = proc.family.process(LoadedImage(img.rgb, "RGB", None, pixels=chw), {}, "cpu:0")
            assert torch.equal(on_dev.pixel_values, host.pixel_values) and on_dev.grid == host.grid
        # Marked pixels show which copy was read: the device tensor, where there is one.
        img = decode_image(png("rgb_640x480"), MediaLimits())
        chw = torch.zeros((3, img.height, img.width), dtype=torch.uint8)
        zero = proc.family.process(LoadedImage(img.rgb, "RGB", None, pixels=chw), {}, "cpu:0")
        assert not torch.equal(zero.pixel_values, proc.family.process(img, {}, "cpu:0").pixel_values)


def test_warmup_runs_the_device_path(dirs: dict[str, Path]) -> None:
    proc = MultiModalProcessor.from_model_dir(dirs["pixtral"], device="cpu:0")
    proc.warmup()
    assert "cpu:0" in proc.family._device_luts


# --- decoding with torchvision, in build/peer-venv --------------------------------------------------

_PEER_DECODE = r"""
import json, sys
import numpy as np
from renderer.chat.messages import MultiModalItem
from renderer.multimodal import MultiModalProcessor, MediaLimits
from renderer.multimodal.media import decode_image
from tests.support.mm_images import data_url, jpeg
out = {"orientations": {}, "processed": {}}
for o in range(1, 9):
    data = jpeg(96, 64, o)
    pil, dev = decode_image(data, MediaLimits()), decode_image(data, MediaLimits(), "cpu:0")
    out["orientations"][o] = [dev.pixels is not None, list(dev.rgb.shape) == list(pil.rgb.shape)
                              and bool(np.array_equal(dev.rgb, pil.rgb))]
for family, d in json.loads(sys.argv[1]).items():
    cpu = MultiModalProcessor.from_model_dir(d, cache_bytes=0)
    dev = MultiModalProcessor.from_model_dir(d, cache_bytes=0, device="cpu:0", decode_device="cuda")
    items = [MultiModalItem("image", "image_url", data_url(jpeg(640, 480, o), "JPEG"), None, 0, i)
             for i, o in enumerate((1, 6, 3))]
    prompt = [1] + [cpu.placeholder_token_id, 2] * len(items)
    a, b = cpu.process(prompt, items), dev.process(prompt, items)
    out["processed"][family] = [dev.decode_on, bool(np.array_equal(b.pixel_values.numpy(), a.pixel_values)),
                                b.hashes == a.hashes, b.input_ids == a.input_ids]
print(json.dumps(out))
"""


def _peer_has_torchvision() -> str | None:
    if not PEER_PYTHON.exists():
        return f"{PEER_PYTHON} is absent (make bench-peer builds it): torchvision's decode runs nowhere else here"
    probe = subprocess.run([str(PEER_PYTHON), "-c", "import torchvision.io, numba, pydantic"], capture_output=True)
    if probe.returncode:
        return f"{PEER_PYTHON} cannot import torchvision, numba and pydantic: {probe.stderr.decode()[-300:]}"
    return None


def test_torchvision_decode_turned_upright_is_pillows(dirs: dict[str, Path]) -> None:
    """In build/peer-venv (torchvision 0.28 on torch 2.13): ``decode_jpeg`` on the CPU (libjpeg, as
    Pillow's) turned upright by ``devices.orient`` equals Pillow's ``exif_transpose``d decode for all
    eight orientations, and a processor decoding on its device (``cpu:0``) gives the CPU path's
    tensors and hashes. On a GPU, nvJPEG's pixels are the check's to measure (they may differ)."""
    reason = _peer_has_torchvision()
    if reason:
        pytest.skip(reason)
    run = subprocess.run(
        [str(PEER_PYTHON), "-c", _PEER_DECODE, json.dumps({k: str(v) for k, v in dirs.items()})],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["orientations"] == {str(o): [True, True] for o in range(1, 9)}
    assert got["processed"] == {f: ["cpu:0", True, True, True] for f in dirs}
