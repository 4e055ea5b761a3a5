#!/usr/bin/env bash
# Container entrypoint: the launcher `make serve` runs (python -m launcher), configured by
# environment variables only (the Kubernetes ConfigMap sets them).
#   entrypoint.sh [serve|start|stop|status|render]     (default: serve, in the foreground)
# PYTHON picks the interpreter (default: python3 on PATH, /opt/venv's in the image).
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

action="${1:-serve}"
if [[ "${action}" == serve && "${CLEAN_STALE_SHM:-0}" == 1 ]]; then
  # A container killed hard (OOM, SIGKILL) leaves its Python-backend regions in the pod's /dev/shm
  # emptyDir, which outlives a container restart and counts against the pod's memory. Only the
  # image sets CLEAN_STALE_SHM: on a shared host these files may belong to other servers. (The
  # launcher's supervisor also unlinks its own build folder's regions before each server start.)
  rm -f /dev/shm/triton_python_backend_shm_region_*
fi
# exec: the launcher takes this process (PID 1 in the container) and, under `serve`, supervises
# tritonserver: it restarts a server that dies and stops everything on SIGTERM.
exec "${PYTHON:-python3}" -m launcher "${action}"
