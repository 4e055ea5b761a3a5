"""Fill the model repository templates and run a real ``tritonserver`` on them.

``python -m serving.launch serve``  foreground (what ``make serve`` and the container run)
``python -m serving.launch start``  background, waits until ready (tests and benchmarks)
``python -m serving.launch stop``   stops the server, its stubs, watchdog and front; frees /dev/shm
``python -m serving.launch status`` readiness, and the supervisor's restart count
``python -m serving.launch render`` only write the generated repository

``serve`` and ``start`` run tritonserver under a supervisor (``serving/supervisor.py``) that
starts it again when it dies.

Every deployment choice is an environment variable (see ``Settings``); the same launcher is the
container entrypoint, so a Kubernetes ConfigMap sets the same names.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import signal
import string
import subprocess
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from renderer import media_defaults, template_defaults
from serving.flags import parse_flag
from serving.watchdog import TOKEN_HEADER, alive, server_ready

ROOT = Path(__file__).resolve().parent.parent
BUILTIN_MODELS = {"smollm2": "smollm2-135m-instruct", "qwen2-vl": "tiny-qwen2_vl", "pixtral": "tiny-pixtral"}
TEMPLATES = ROOT / "model_repository"


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


@dataclass(frozen=True)
class Settings:
    """Deployment settings; each field reads the environment variable of its upper-case name."""

    model_dir: str = ""
    """Hugging Face model folder served. Empty: the built-in model that ``model`` names."""
    model: str = "smollm2"
    """Built-in model when ``model_dir`` is empty: "smollm2" (text), "qwen2-vl" or "pixtral"
    (tiny vision-language models with seeded weights, for the image path)."""
    mm_cache_bytes: int = 512 * 1024 * 1024
    """Size of the multimodal processor cache, in bytes of processed tensors."""
    media_dir: str = ""
    """The only directory image paths in requests may point into; empty refuses local files."""
    media_hosts: str = ""
    """Comma-separated hosts images may be fetched from over http(s); empty refuses the network."""
    limit_mm_per_prompt: int = media_defaults.DEFAULT_MAX_ITEMS_PER_PROMPT
    """Most images one prompt may carry (vLLM's ``--limit-mm-per-prompt``, its default 999)."""
    max_image_bytes: int = media_defaults.DEFAULT_MAX_BYTES
    """Largest encoded image in bytes (a data URL's decoded bytes, a file, a download)."""
    max_image_pixels: int = media_defaults.DEFAULT_MAX_PIXELS
    """Largest width x height an image header may declare (vLLM's ``VLLM_MAX_IMAGE_PIXELS``)."""
    media_fetch_timeout_s: float = media_defaults.DEFAULT_FETCH_TIMEOUT_S
    """Timeout of one allow-listed image download (vLLM's ``VLLM_IMAGE_FETCH_TIMEOUT``)."""
    image_processor: str = media_defaults.DEFAULT_IMAGE_PROCESSOR
    """"fast": images resized and normalized as transformers' torchvision-based processors do, what
    vLLM runs wherever torchvision is installed; "slow": as the PIL-based ones (``use_fast=False``)."""
    encoder_decoder_model_dir: str = ""
    """Encoder-decoder model for the encoder-decoder ensembles. Empty: the tiny built-in BART."""
    build_dir: str = str(ROOT / "build")
    """Where the generated repository, pid and log files live."""
    models_dir: str = str(ROOT / "build" / "models")
    """Where the built-in models are built (shared by every build folder)."""
    host: str = "127.0.0.1"
    """Address the HTTP, gRPC and metrics endpoints bind to."""
    http_port: int = 8000
    """HTTP/REST port."""
    grpc_port: int = 8001
    """gRPC port."""
    metrics_port: int = 8002
    """Prometheus metrics port."""
    openai_port: int = 9000
    """The OpenAI- and vLLM-compatible HTTP front (``serving/openai_front``); 0 turns it off."""
    served_model_name: str = ""
    """The model id the HTTP front serves (``/v1/models``); empty: the model folder's name."""
    tokenize_instances: int = 2
    """CPU instances of ``tokenize``."""
    chat_render_instances: int = 3
    """CPU instances of ``chat_render``: one more than ``tokenize``, whose per-request work is
    lighter; measured in ``make bench`` (docs/PERFORMANCE.md, scaling table)."""
    llm_instances: int = 1
    """Instances of the downstream ``llm``."""
    llm_engine: str = "standin"
    """The engine behind ``llm``: "standin" (transformers, CPU, embedded) or "vllm" (vLLM's own
    ``AsyncLLM`` in the same server, from the environment ``make engine-vllm`` builds)."""
    engine_model_dir: str = ""
    """A Triton model folder with TensorRT-LLM's ``tensorrt_llm`` interface (a filled
    ``tensorrt_llm`` folder of TensorRT-LLM's model repository) to use as the engine instead of
    ``llm``; the ensembles call it by its folder name."""
    vllm_env: str = str(ROOT / "build" / "peer-venv")
    """The unpacked Python environment with vLLM that the ``llm`` stub runs in when ``llm_engine``
    is "vllm" (``make engine-vllm`` builds it; the benchmark's vLLM peer uses the same one)."""
    vllm_dtype: str = "auto"
    """vLLM engine: model dtype. "auto" is float32 on a CPU host (vLLM's CPU bf16 path has no fast
    kernels without AVX-512 BF16, and gives the same ids) and the model's own dtype on a GPU."""
    vllm_kv_cache_gib: int = 1
    """vLLM engine on CPU: KV-cache size in GiB (``VLLM_CPU_KVCACHE_SPACE``)."""
    max_batch_size: int = 64
    """Largest dynamic batch of the batching stage models."""
    max_queue_delay_us: int = 0
    """How long the dynamic batcher waits to fill a batch."""
    mm_instance_kind: str = "auto"
    """``KIND_GPU`` / ``KIND_CPU`` for ``mm_process``; auto picks GPU when one is visible."""
    enable_prompt_embeds: bool = False
    """vLLM's ``--enable-prompt-embeds``."""
    trust_request_chat_template: bool = False
    """vLLM's ``--trust-request-chat-template``: off, a chat template sent with a request (or in its
    ``chat_template_kwargs``) is refused with vLLM's message; on, it renders in the sandbox."""
    trust_request_mm_kwargs: bool = False
    """vLLM's ``--trust-request-mm-kwargs``: off, a request's ``mm_processor_kwargs`` or
    ``media_io_kwargs`` is refused with vLLM's message; on, they apply to its images."""
    request_template_timeout_s: float = template_defaults.DEFAULT_TIMEOUT_S
    """Wall-clock deadline of one request template's analysis or render in its worker process."""
    request_template_memory_mb: int = template_defaults.DEFAULT_MEMORY_MB
    """Address-space cap (``RLIMIT_AS``) of the worker process that renders request templates."""
    request_template_max_bytes: int = template_defaults.DEFAULT_MAX_BYTES
    """Largest chat template a request may send, checked before it is parsed."""
    max_model_len: int = 0
    """Context length; 0 takes the model config's. It bounds ``tokenize`` (and ``mm_process``,
    through the limit ``tokenize`` hands on) and ``tokenize_enc_dec``, capped there at the
    encoder-decoder model's own context."""
    tokenizer_backend: str = "auto"
    """Engine that encodes text: "auto" (``fastokens`` where it equals Hugging Face on the
    load-time probes, else Hugging Face), "huggingface", or "fastokens" (fails to load where it
    cannot serve the tokenizer exactly)."""
    max_input_bytes: int = 64 * 1024 * 1024
    """Largest single input tensor a request may send (images included); larger is a 400."""
    log_verbose: int = 0
    """tritonserver ``--log-verbose``."""
    models: str = ""
    """Comma-separated models to load (ensembles bring their steps); empty loads them all."""
    startup_timeout_s: float = 180.0
    """How long ``start`` waits for readiness."""

    @classmethod
    def from_env(cls) -> "Settings":
        values = {}
        for f in fields(cls):
            raw = os.environ.get(f.name.upper())
            if raw is None or raw == "":
                continue
            default = f.default
            if isinstance(default, bool):
                values[f.name] = parse_flag(raw)
            elif isinstance(default, int):
                values[f.name] = int(raw)
            elif isinstance(default, float):
                values[f.name] = float(raw)
            else:
                values[f.name] = raw
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Settings":
        data = json.loads(text)
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    @property
    def build(self) -> Path:
        return Path(self.build_dir)

    @property
    def tokenizers_dir(self) -> Path:
        """The offline tokenizer folders the tiny vision-language models are built on: inside
        ``models_dir``, so a ``MODELS_DIR`` anywhere holds everything built for it."""
        return Path(self.models_dir) / "tokenizers"

    @property
    def resolved_model_dir(self) -> Path:
        if self.model_dir:
            return Path(self.model_dir).resolve()
        if self.model not in BUILTIN_MODELS:
            raise SystemExit(f"MODEL={self.model} is not a built-in model; choose one of {', '.join(BUILTIN_MODELS)}")
        return Path(self.models_dir) / BUILTIN_MODELS[self.model]

    @property
    def resolved_encdec_model_dir(self) -> Path:
        if self.encoder_decoder_model_dir:
            return Path(self.encoder_decoder_model_dir).resolve()
        return Path(self.models_dir) / "tiny-bart-seq2seq"

    @property
    def repository(self) -> Path:
        return self.build / "model_repository"

    @property
    def pid_file(self) -> Path:
        return self.build / "tritonserver.pid"

    @property
    def log_file(self) -> Path:
        return self.build / "tritonserver.log"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def front_pid_file(self) -> Path:
        return self.build / "openai_front.pid"

    @property
    def supervisor_pid_file(self) -> Path:
        return self.build / "supervisor.pid"

    @property
    def supervisor_state_file(self) -> Path:
        """Restart counter and current pids (``serving.supervisor.SupervisorState``)."""
        return self.build / "supervisor.json"

    @property
    def supervisor_log_file(self) -> Path:
        return self.build / "supervisor.log"

    @property
    def settings_file(self) -> Path:
        """These settings, for the background supervisor ``start`` runs."""
        return self.build / "settings.json"

    @property
    def shm_prefix(self) -> str:
        """Name prefix of the Python backend's /dev/shm regions of this build folder's server.

        One per folder (so per server): what a dead server leaves is found by name alone. It
        keeps the backend's default prefix in front, so ``triton_python_backend_shm_region_*``
        still matches every region.
        """
        tag = hashlib.sha256(str(self.build.resolve()).encode()).hexdigest()[:12]
        return f"triton_python_backend_shm_region_{tag}_"


def gpu_visible() -> bool:
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return (
        shutil.which("nvidia-smi") is not None
        and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    )


def model_family(s: Settings) -> str | None:
    """The image-processor family of the served model, or None for a text-only model."""
    from renderer.multimodal.registry import detect_family

    return detect_family(s.resolved_model_dir)


def template_vars(s: Settings, family: str | None = None) -> dict[str, str]:
    kind = s.mm_instance_kind
    if kind == "auto":
        kind = "KIND_GPU" if gpu_visible() else "KIND_CPU"
    return {
        "model_dir": str(s.resolved_model_dir),
        "encdec_model_dir": str(s.resolved_encdec_model_dir),
        "tokenize_instances": str(s.tokenize_instances),
        "chat_render_instances": str(s.chat_render_instances),
        "llm_instances": str(s.llm_instances),
        "engine_model": engine_model_name(s),
        "vllm_env": str(Path(s.vllm_env).resolve()),
        "vllm_device": "cuda" if gpu_visible() else "cpu",
        "vllm_dtype": s.vllm_dtype if s.vllm_dtype != "auto" else ("auto" if gpu_visible() else "float32"),
        "vllm_kv_cache_gib": str(s.vllm_kv_cache_gib),
        "project_root": str(ROOT),
        "max_batch_size": str(s.max_batch_size),
        "max_queue_delay_us": str(s.max_queue_delay_us),
        "mm_instance_kind": kind,
        "mm_gpus": "gpus: [ 0 ]" if kind == "KIND_GPU" else "",
        "mm_device": "cuda" if kind == "KIND_GPU" else "cpu",
        "enable_prompt_embeds": "true" if s.enable_prompt_embeds else "false",
        "trust_request_chat_template": "true" if s.trust_request_chat_template else "false",
        "trust_request_mm_kwargs": "true" if s.trust_request_mm_kwargs else "false",
        "request_template_timeout_s": str(s.request_template_timeout_s),
        "request_template_memory_mb": str(s.request_template_memory_mb),
        "request_template_max_bytes": str(s.request_template_max_bytes),
        "max_model_len": str(s.max_model_len),
        "tokenizer_backend": s.tokenizer_backend,
        "mm_cache_bytes": str(s.mm_cache_bytes),
        "media_dir": str(Path(s.media_dir).resolve()) if s.media_dir else "",
        "media_hosts": s.media_hosts,
        "limit_mm_per_prompt": str(s.limit_mm_per_prompt),
        "max_image_bytes": str(s.max_image_bytes),
        "max_image_pixels": str(s.max_image_pixels),
        "media_fetch_timeout_s": str(s.media_fetch_timeout_s),
        "image_processor": s.image_processor,
        **family_vars(family),
    }


def family_vars(family: str | None) -> dict[str, str]:
    """What makes one ``config.multimodal.pbtxt`` fit each image family: the family's image
    tensors (``renderer/multimodal/tensors.py``) as config entries and as ensemble step maps.
    Empty for a text-only model (None)."""
    from renderer.multimodal.tensors import ITEM_TENSOR_SPECS, engine_image_inputs, image_tensors

    specs = image_tensors(family) if family else ()
    engine = engine_image_inputs(family) if family else ()
    # The engine's and the post-processor's extra inputs (appended to their TensorRT-LLM list).
    engine_inputs = (
        "".join(
            f',\n  {{ name: "{t.name}" data_type: {t.dtype} dims: [ {", ".join(map(str, t.dims))} ] '
            "optional: true allow_ragged_batch: true }"
            for t in (*specs, *ITEM_TENSOR_SPECS)
        )
        if family
        else ""
    )
    return {
        "family": family or "",
        "image_outputs": ",\n".join(
            f'  {{ name: "{t.name}" data_type: {t.dtype} dims: [ {", ".join(map(str, t.dims))} ] }}' for t in specs
        ),
        "image_step_outputs": "\n".join(f'      output_map {{ key: "{t.name}" value: "{t.name}" }}' for t in specs),
        "engine_image_step_outputs": "\n".join(f'      output_map {{ key: "{n}" value: "_{n}" }}' for n in engine),
        "engine_image_step_inputs": "\n".join(f'      input_map {{ key: "{n}" value: "_{n}" }}' for n in engine),
        "engine_image_inputs": engine_inputs,
    }


def engine_model_name(s: Settings) -> str:
    """The model the post-processing stage sends generation requests to."""
    return Path(s.engine_model_dir).name if s.engine_model_dir else "llm"


def pick_config(model: Path, family: str | None) -> Path | None:
    """A model folder's config for the served model's family.

    ``config.<family>.pbtxt``, then ``config.multimodal.pbtxt`` (any image family, filled with
    ``family_vars``), then ``config.pbtxt`` (the text-only form); a folder without
    ``config.pbtxt`` (``mm_process``) exists only for image families.
    """
    names = [f"config.{family}.pbtxt", "config.multimodal.pbtxt"] if family else []
    for name in names + ["config.pbtxt"]:
        if (model / name).exists():
            return model / name
    return None


def render_repository(s: Settings, family: str | None = None) -> Path:
    """Copy ``model_repository/`` into the build folder with every ``${var}`` filled."""
    values = template_vars(s, family)
    out = s.repository
    if out.exists():
        shutil.rmtree(out)
    for model in sorted(p for p in TEMPLATES.iterdir() if p.is_dir()):
        if model.name == "llm" and s.engine_model_dir:
            continue  # the user's engine folder takes its place (below)
        chosen = pick_config(model, family)
        if model.name == "llm" and s.llm_engine == "vllm":
            chosen = model / "config.vllm.pbtxt"
        if chosen is None:
            continue
        dst = out / model.name
        shutil.copytree(model, dst, ignore=shutil.ignore_patterns("__pycache__", "config.*.pbtxt"))
        # Ensembles have no files in their version folder, and git keeps no empty folders.
        (dst / "1").mkdir(exist_ok=True)
        # substitute() (not safe_substitute) so a misspelt placeholder fails here, loudly.
        (dst / "config.pbtxt").write_text(string.Template(chosen.read_text()).substitute(values))
    if s.engine_model_dir:
        # Linked, not copied: an engine folder may be large; Triton follows the link.
        (out / engine_model_name(s)).symlink_to(Path(s.engine_model_dir).resolve(), target_is_directory=True)
    return out


# Models that a BLS call reaches, which loading an ensemble does not load by itself.
BLS_CALLEES = {"detokenize": "engine", "detokenize_enc_dec": "llm_enc_dec"}
GENERATION_ENSEMBLES = {
    "completion": "detokenize",
    "chat": "detokenize",
    "ensemble": "detokenize",
    "encoder_decoder_completion": "detokenize_enc_dec",
}


def models_to_load(s: Settings) -> list[str]:
    """``MODELS`` plus the engine each generation ensemble reaches through BLS; all when unset."""
    models = [m.strip() for m in s.models.split(",") if m.strip()]
    if not models:
        return ["*"]
    out = list(models)
    for m in models:
        post = GENERATION_ENSEMBLES.get(m, m if m in BLS_CALLEES else None)
        if post:
            callee = BLS_CALLEES[post]
            out.append(engine_model_name(s) if callee == "engine" else callee)
    return list(dict.fromkeys(out))


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def triton_home() -> Path:
    """The server install: ``bin/tritonserver`` and ``backends/``.

    ``TRITON_HOME`` names one (the official image sets ``/opt/tritonserver``); unset, the
    server shipped in the ``nvidia-pytriton`` wheel of this venv.
    """
    home = os.environ.get("TRITON_HOME")
    return Path(home) if home else site_packages() / "pytriton" / "tritonserver"


def ensure_python_stub() -> None:
    """The wheel ships one stub per Python; the backend wants the one for ours beside it."""
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    src = triton_home() / "python_backend_stubs" / ver / "triton_python_backend_stub"
    dst = triton_home() / "backends" / "python" / "triton_python_backend_stub"
    if not dst.exists():
        shutil.copy2(src, dst)


def server_env(s: Settings | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if s is not None:
        env["RENDERER_MAX_INPUT_BYTES"] = str(s.max_input_bytes)  # read by serving/triton_io.py
    venv_bin = str(Path(sys.executable).parent)
    # The stub runs the first python3 on PATH and uses its site-packages: make it ours.
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    libs = [str(site_packages() / "nvidia_pytriton.libs"), sysconfig.get_config_var("LIBDIR")]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(libs + [env.get("LD_LIBRARY_PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    # One BLAS thread per stub: several stub processes share few cores.
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def exit_timeout_s(s: Settings) -> int:
    """tritonserver's ``--exit-timeout-secs``: vLLM's engine needs longer to shut its processes
    down (about 13 s here)."""
    return 40 if s.llm_engine == "vllm" else 10


def tritonserver_binary() -> Path:
    return triton_home() / "bin" / "tritonserver"


def server_command(s: Settings, watchdog_token: str, binary: str | Path | None = None) -> list[str]:
    home = triton_home()
    cmd = [
        str(binary or tritonserver_binary()),
        f"--model-repository={s.repository}",
        f"--backend-directory={home / 'backends'}",
        f"--http-address={s.host}",
        f"--http-port={s.http_port}",
        f"--grpc-address={s.host}",
        f"--grpc-port={s.grpc_port}",
        f"--metrics-address={s.host}",
        f"--metrics-port={s.metrics_port}",
        f"--exit-timeout-secs={exit_timeout_s(s)}",
        f"--log-verbose={s.log_verbose}",
        "--backend-config=python,shm-default-byte-size=4194304",
        f"--backend-config=python,shm-region-prefix-name={s.shm_prefix}",
    ]
    # Explicit mode, so the watchdog can reload a model whose stub died; only the watchdog
    # holds the token the repository API asks for. Loading an ensemble loads its steps.
    cmd.append("--model-control-mode=explicit")
    cmd += [f"--load-model={m}" for m in models_to_load(s)]
    # A loader thread per model (Triton's default is 4): none waits stubless behind the others,
    # which the supervisor's load watch relies on (serving/load_watch.py).
    cmd.append(f"--model-load-thread-count={max(4, len(list(s.repository.glob('*/config.pbtxt'))))}")
    cmd += [
        f"--http-restricted-api=model-repository:{TOKEN_HEADER}={watchdog_token}",
        f"--grpc-restricted-protocol=model-repository:{TOKEN_HEADER}={watchdog_token}",
    ]
    if not gpu_visible():
        cmd += [
            "--pinned-memory-pool-byte-size=0",
            "--cuda-memory-pool-byte-size=0:0",
            "--allow-gpu-metrics=false",
        ]
    return cmd


def python_models(s: Settings) -> frozenset[str]:
    """The Python-backend models of the rendered repository (the ones with stubs)."""
    return frozenset(p.parent.name for p in s.repository.glob("*/config.pbtxt") if 'backend: "python"' in p.read_text())


def prepare(s: Settings) -> None:
    from serving import default_model, seq2seq_model

    default_tokenizer = Path(s.models_dir) / "smollm2-135m-instruct"
    if not s.model_dir and s.model != "smollm2":
        build_vlm(s)
    elif not s.model_dir:
        default_model.build(s.resolved_model_dir)
    elif not (s.resolved_model_dir / "config.json").exists():
        raise SystemExit(f"MODEL_DIR={s.model_dir} holds no config.json (not a Hugging Face model folder)")
    if s.llm_engine not in ("standin", "vllm"):
        raise SystemExit(f"LLM_ENGINE={s.llm_engine} is not an engine here; choose standin or vllm")
    if s.engine_model_dir and not (Path(s.engine_model_dir) / "config.pbtxt").exists():
        raise SystemExit(f"ENGINE_MODEL_DIR={s.engine_model_dir} holds no config.pbtxt (not a Triton model folder)")
    if s.llm_engine == "vllm" and not (Path(s.vllm_env) / "bin" / "activate").exists():
        raise SystemExit(f"LLM_ENGINE=vllm needs vLLM's environment at {s.vllm_env}: run `make engine-vllm`")
    if s.llm_engine == "vllm" and model_family(s) is not None:
        raise SystemExit(
            "LLM_ENGINE=vllm serves text models here: images through vLLM's engine are not wired "
            "(docs/ENGINES.md says why); use the stand-in for the image path"
        )
    if not s.encoder_decoder_model_dir:
        # The tiny BART borrows the default model's tokenizer.
        seq2seq_model.build(s.resolved_encdec_model_dir, default_model.build(default_tokenizer))
    ensure_python_stub()
    render_repository(s, model_family(s))


def build_vlm(s: Settings) -> Path:
    """The built-in vision-language model ``s.model`` names, on the tokenizer folders built in
    ``s.tokenizers_dir`` (only when the model itself is still to be built)."""
    from serving import vlm_model

    family = s.model.replace("-", "_")
    if vlm_model.is_built(s.resolved_model_dir):
        return s.resolved_model_dir
    from serving import reference_tokenizers

    tokenizers = reference_tokenizers.build(s.tokenizers_dir)
    return vlm_model.build(s.resolved_model_dir, tokenizers[vlm_model.TOKENIZER_OF_FAMILY[family]], family=family)


def is_ready(s: Settings) -> bool:
    return server_ready(s.http_url)


def _pid_from(pid_file: Path, marks: list[bytes]) -> int | None:
    """The live process a pid file names, if its command line carries every mark: a stale pid
    file may name a pid the system has since given to another process."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    if not alive(pid) or not all(m in cmdline for m in marks):
        return None
    return pid


def running_pid(s: Settings) -> int | None:
    """The pid of the server this build folder started, if it still runs (only a tritonserver
    serving this very repository counts)."""
    return _pid_from(s.pid_file, [f"--model-repository={s.repository}".encode()])


def supervisor_pid(s: Settings) -> int | None:
    """The supervisor of this build folder, if it runs (the background one ``start`` started,
    or a ``serve`` launcher)."""
    pid = _pid_from(s.supervisor_pid_file, [])
    if pid is None:
        return None
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    background = b"serving.supervisor" in cmdline and f"--settings={s.settings_file}".encode() in cmdline
    return pid if background or b"serving.launch" in cmdline else None


def supervisor_state(s: Settings):  # noqa: ANN201 - serving.supervisor.SupervisorState | None
    """The restart counter and current pids that the supervisor keeps in the build folder."""
    from serving.supervisor import SupervisorState

    return SupervisorState.read(s.supervisor_state_file)


def start(s: Settings) -> int:
    if supervisor_pid(s) is not None:
        print(f"tritonserver already supervised (supervisor pid {supervisor_pid(s)}); waiting for it")
        return _wait_ready(s, None)
    if running_pid(s) is not None and is_ready(s):
        print(f"tritonserver already running (pid {running_pid(s)}) at {s.http_url}")
        return 0
    prepare(s)
    s.build.mkdir(parents=True, exist_ok=True)
    s.settings_file.write_text(s.to_json())
    cmd = [
        sys.executable,
        "-m",
        "serving.supervisor",
        f"--tritonserver={tritonserver_binary()}",
        f"--settings={s.settings_file}",
    ]
    with open(s.supervisor_log_file, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(ROOT))
    # Written here too, not only by the supervisor: a `stop` right after this must find it.
    s.supervisor_pid_file.write_text(str(proc.pid))
    return _wait_ready(s, proc)


def _wait_ready(s: Settings, proc: subprocess.Popen | None) -> int:
    deadline = time.monotonic() + s.startup_timeout_s
    while time.monotonic() < deadline:
        if (proc.poll() is not None) if proc else supervisor_pid(s) is None:
            print("tritonserver did not start; last lines of its log and the supervisor's:", file=sys.stderr)
            for path in (s.log_file, s.supervisor_log_file):
                lines = path.read_text(errors="replace").splitlines() if path.exists() else []
                print("\n".join(lines[-30:]), file=sys.stderr)
            return 1
        if is_ready(s):
            print(f"tritonserver ready (pid {running_pid(s)}) at {s.http_url}, grpc {s.host}:{s.grpc_port}")
            return 0
        time.sleep(0.5)
    print(f"tritonserver not ready after {s.startup_timeout_s}s; see {s.log_file}", file=sys.stderr)
    stop(s)
    return 1


def stop(s: Settings, timeout_s: float = 60.0) -> int:
    """Stop whatever this build folder runs, at any moment (models still loading included):
    no server, stub, watchdog or front process and no /dev/shm region of the server remains."""
    from serving.supervisor import clean_regions, kill_group

    sup = supervisor_pid(s)
    if sup is not None:
        os.kill(sup, signal.SIGTERM)  # it stops the server (SIGTERM first when ready) and the rest
        if not _wait_gone(sup, timeout_s):
            os.kill(sup, signal.SIGKILL)
        _reap(sup)
    # What a supervisor killed hard (or a server started without one) leaves is ended here.
    stop_front(s)
    pid = running_pid(s)
    if pid is not None:
        if sup is None:
            _terminate(pid, exit_timeout_s(s) + 5)  # SIGTERM: the backend unlinks its regions
        # The process group also holds what the stubs started (vLLM's engine-core processes).
        kill_group(pid)
        _reap(pid)
    clean_regions(s.shm_prefix)
    for f in (s.pid_file, s.supervisor_pid_file):
        f.unlink(missing_ok=True)
    return 0


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap(pid)
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


def _terminate(pid: int, timeout_s: float) -> bool:
    """SIGTERM, then wait; whether the process is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    return _wait_gone(pid, timeout_s)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def start_watchdog(s: Settings, server_pid: int, token: str) -> subprocess.Popen:
    """Beside the server: reloads a model whose stub died (serving/watchdog.py says why)."""
    env = {**server_env(), "WATCHDOG_TOKEN": token}
    with open(s.build / "watchdog.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "serving.watchdog", "--server-pid", str(server_pid), "--http-url", s.http_url],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(ROOT),
        )


def start_front(s: Settings, follow_pid: int) -> subprocess.Popen | None:
    """Beside the server: the OpenAI- and vLLM-compatible HTTP front, unless ``OPENAI_PORT`` is
    0. It exits with ``follow_pid``: the supervisor, so it outlives a server restart."""
    if not s.openai_port:
        return None
    cmd = [
        sys.executable,
        "-m",
        "serving.openai_front",
        "--host",
        s.host,
        "--port",
        str(s.openai_port),
        "--triton",
        f"{s.host}:{s.grpc_port}",
        "--model-dir",
        str(s.resolved_model_dir),
        "--max-model-len",
        str(s.max_model_len),
        "--max-body-bytes",
        str(s.max_input_bytes),
        "--server-pid",
        str(follow_pid),
    ]
    if s.served_model_name:
        cmd += ["--served-model-name", s.served_model_name]
    with open(s.build / "openai_front.log", "ab") as log:
        proc = subprocess.Popen(
            cmd, env=server_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(ROOT)
        )
    s.front_pid_file.write_text(str(proc.pid))
    print(f"OpenAI-compatible front on http://{s.host}:{s.openai_port}/v1", flush=True)
    return proc


def stop_front(s: Settings) -> None:
    pid = _pid_from(s.front_pid_file, [b"serving.openai_front"])  # only the front this folder started
    if pid is not None and not _terminate(pid, 5.0):
        os.kill(pid, signal.SIGKILL)
    s.front_pid_file.unlink(missing_ok=True)


def serve(s: Settings) -> int:
    """Foreground: this process supervises tritonserver (its output goes to ours) until SIGTERM
    or Ctrl-C; in the container it is PID 1, which the kubelet signals."""
    from serving.supervisor import Supervisor, handle_stop_signals

    prepare(s)
    s.build.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    cmd = server_command(s, token)
    print("$ " + " ".join(c if token not in c else c.replace(token, "***") for c in cmd), flush=True)
    sup = Supervisor(s, cmd, server_env(s), token)
    handle_stop_signals(sup)
    return sup.run()


def status(s: Settings) -> int:
    ready = is_ready(s)
    state = supervisor_state(s)
    line = "ready" if ready else "not ready"
    if state is not None and state.running:
        line += f" (tritonserver pid {state.server_pid}, restarts {state.restarts}"
        line += f", last exit: {state.last_exit})" if state.last_exit else ")"
    print(line)
    return 0 if ready else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["serve", "start", "stop", "render", "status"])
    args = parser.parse_args(argv)
    s = Settings.from_env()
    if args.action == "serve":
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s supervisor %(levelname)s %(message)s")
        return serve(s)
    if args.action == "start":
        return start(s)
    if args.action == "stop":
        return stop(s)
    if args.action == "render":
        prepare(s)
        print(s.repository)
        return 0
    return status(s)


if __name__ == "__main__":
    sys.exit(main())
