#!/usr/bin/env bash
# `make image`: the CPU target of docker/Dockerfile built here with buildah, offline from any registry.
# Installs podman/buildah/runc/mmdebstrap when missing, makes the Debian base once (mmdebstrap +
# podman import), and passes the host's pip settings (CA bundle, local wheels) as build volumes and
# arguments, so nothing of this machine is baked into the image.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${IMAGE:-localhost/triton-renderer:cpu}"
# The base's packages. libpython3.11: the Python-backend stub links it (Debian's python3 binary
# does not need it); nginx-light: the edge in front of tritonserver (launcher/edge.py). A new list takes a new tag (here and as docker/Dockerfile's CPU_BASE default),
# so a base made from an older list is not reused.
BASE_PACKAGES=python3,python3-venv,libpython3.11,ca-certificates,nginx-light
BASE="${CPU_BASE:-localhost/debian:bookworm-libpython3.11-nginx}"
ULIMITS=(--ulimit nofile=20000:20000 --ulimit nproc=30000:30000)

missing=()
for tool in podman buildah runc mmdebstrap; do
  command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] || missing+=("$tool")
done
if ((${#missing[@]})); then
  apt-get update
  apt-get install -y --no-install-recommends podman buildah runc mmdebstrap
fi

if ! podman image exists "$BASE"; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  # python3 is 3.11 on bookworm, the Makefile venv's minor version.
  mmdebstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$tmp/rootfs.tar"
  podman import "$tmp/rootfs.tar" "$BASE"
fi

vols=()
args=()
cert="${PIP_CERT:-$(pip config get global.cert 2>/dev/null || true)}"
if [[ -n "$cert" && -f "$cert" ]]; then
  vols+=(-v "$cert:/run/pip-ca.crt:ro")
  args+=(--build-arg PIP_CERT=/run/pip-ca.crt)
fi
links="${PIP_FIND_LINKS:-$(pip config get global.find-links 2>/dev/null || true)}"
if [[ -n "$links" && -d "$links" ]]; then
  vols+=(-v "$links:$links:ro")
  args+=(--build-arg "PIP_FIND_LINKS=$links")
fi
extra="${PIP_EXTRA_INDEX_URL:-$(pip config get global.extra-index-url 2>/dev/null || true)}"
if [[ -n "$extra" ]]; then
  for url in $extra; do  # a file:// index (…/simple, its files beside it) is mounted at its own path
    dir="$(dirname "${url#file://}")"
    [[ "$url" == file://* && -d "$dir" ]] && vols+=(-v "$dir:$dir:ro")
  done
  args+=(--build-arg "PIP_EXTRA_INDEX_URL=$extra")
fi

# --ignorefile: buildah reads only the context's own .dockerignore otherwise (the venv, GBs, would go in).
buildah bud --isolation chroot "${ULIMITS[@]}" --target cpu --ignorefile docker/Dockerfile.dockerignore --build-arg "CPU_BASE=$BASE" \
  "${vols[@]}" "${args[@]}" -f docker/Dockerfile -t "$IMAGE" .
podman image inspect "$IMAGE" --format '{{.Size}}' | awk '{printf "image size: %.0f MB\n", $1 / 1e6}'
