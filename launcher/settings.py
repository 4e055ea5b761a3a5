"""Every deployment choice as one frozen ``Settings``: each field reads the environment variable of
its upper-case name (the Makefile, the container and a Kubernetes ConfigMap set the same names),
and the paths of the build folder derive from it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from renderer import media_defaults, template_defaults
from renderer.flags import parse_flag

ROOT = Path(__file__).resolve().parent.parent


BUILTIN_MODELS = {"smollm2": "smollm2-135m-instruct", "qwen2-vl": "tiny-qwen2_vl", "pixtral": "tiny-pixtral"}


TEMPLATES = ROOT / "model_repository"


@dataclass(frozen=True)
class EngineChoice:
    """One engine ``LLM_ENGINE`` may put behind ``llm`` (TensorRT-LLM's interface either way)."""

    config: str
    """The ``llm`` config template it loads with (``model_repository/llm/``)."""

    exit_timeout_s: int
    """tritonserver's ``--exit-timeout-secs`` with it loaded: vLLM's engine needs longer to shut its
    processes down (about 13 s here)."""

    decoupled_only: bool
    """Whether it serves only TensorRT-LLM's ``decoupled_mode: true`` (``LLM_DECOUPLED=1``)."""

    environment: bool
    """Whether it runs in vLLM's own Python environment (``VLLM_ENV``, ``make engine-vllm``)."""


ENGINES = {
    "standin": EngineChoice("config.pbtxt", exit_timeout_s=10, decoupled_only=False, environment=False),
    "vllm": EngineChoice("config.vllm.pbtxt", exit_timeout_s=40, decoupled_only=True, environment=True),
}
"""The engines ``LLM_ENGINE`` names."""

# The encoder-decoder ensembles and the stages only they use (served with ``encoder_decoder``).
ENCODER_DECODER_MODELS = (
    "render_encoder_decoder",
    "encoder_decoder_completion",
    "tokenize_enc_dec",
    "llm_enc_dec",
    "detokenize_enc_dec",
)


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def usable_cpus(cgroup_cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota (a pod's CPU
    limit, which the affinity does not show)."""
    n = len(os.sched_getaffinity(0))
    try:
        quota, period = cgroup_cpu_max.read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return n


def default_instances(share: float, least: int, cpus: int | None = None) -> int:
    """Instances of a stage that does ``share`` of a request's CPU work, so that together they can
    use that share of the ``cpus`` (each Python stub runs on one core at a time): at least ``least``.
    More instances than that add no capacity and cost latency: each serves a smaller share of the
    requests with colder caches, and they contend for the same cores (docs/PERFORMANCE.md)."""
    return max(least, math.ceil(share * (usable_cpus() if cpus is None else cpus)))


# Each stage's share of a request's CPU (benchmarks/cpu_cost.py, benchmarks/results/cpu_cost.json):
# chat_render about 0.41 of a chat's; tokenize about 0.46 of a completion's. One tokenize instance
# on two cores serves as much as two since its text lane, and each instance weighs about 85 MB
# (the figures: docs/PERFORMANCE.md, "Sizing: instances per pod, pods per load").
CHAT_RENDER_SHARE, TOKENIZE_SHARE = 0.41, 0.46


@dataclass(frozen=True)
class InnerPorts:
    """Where tritonserver's endpoints and the front listen (``Settings.inner``)."""

    host: str
    """Their address: the loopback behind the edge."""
    http: int
    """tritonserver's HTTP port."""
    grpc: int
    """tritonserver's gRPC port."""
    metrics: int
    """tritonserver's metrics port."""
    front: int
    """The OpenAI-compatible front's port (0: no front)."""
    front_grpc: int
    """The front's gRPC proxy for ``ModelStreamInfer`` (``openai_front/grpc_proxy.py``), which the
    edge sends gRPC streams to, so that a client that leaves stops its generations (0: no proxy,
    the streams go to tritonserver; always without the edge, which alone can route one method)."""


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
    image_device: str = media_defaults.DEFAULT_IMAGE_DEVICE
    """Where ``mm_process`` resizes, rescales, normalizes and patches images: "cuda" as vLLM's fast
    processors do with ``device="cuda"``, "cpu" (the numba kernels), or "auto": "cuda" where
    ``mm_process`` runs ``KIND_GPU`` (``mm_instance_kind``), else "cpu"."""
    image_decode_device: str = media_defaults.DEFAULT_IMAGE_DECODE_DEVICE
    """Where JPEG images are decoded: "cpu" (Pillow, as vLLM decodes) or "cuda" (nvJPEG through
    torchvision, opt-in; needs ``image_device`` cuda, the fast processor and torchvision)."""
    mm_device_do_normalize: bool = False
    """vLLM's ``mm_device_do_normalize``: for a family whose vLLM model normalizes images itself
    (Qwen2-VL), ``pixel_values`` leave ``mm_process`` as the resized uint8 patches, unrescaled and
    unnormalized (a quarter of float32's bytes), as vLLM's render server sends them by default,
    and the engine normalizes them. Off: normalized float32, as vLLM's processor makes them with
    the setting off. A family vLLM cannot normalize on the device (Pixtral) keeps float32."""
    encoder_decoder: bool = False
    """Serve the encoder-decoder ensembles (``render_encoder_decoder``, ``encoder_decoder_completion``)
    and their stages; also on when ``encoder_decoder_model_dir`` is set or ``models`` names one of
    them. Off, their stubs (about 0.9 GB with transformers' models) are not started."""
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
    """The OpenAI- and vLLM-compatible HTTP front (``openai_front``); 0 turns it off."""
    edge: bool = True
    """nginx at the four ports above, with tritonserver and the front behind it on loopback ports
    (``launcher/edge.py`` says what it guards against); off, they bind the ports themselves."""
    edge_header_timeout_s: float = 10.0
    """The edge closes a connection whose request headers (or the next part of its body) take
    longer than this."""
    edge_idle_timeout_s: float = 600.0
    """The edge closes a keep-alive connection idle this long (clients' pools keep connections
    idle for minutes; each costs the edge a few hundred bytes)."""
    edge_upstream_timeout_s: float = 600.0
    """The longest the edge waits for the next bytes of an answer (a whole non-streamed generation
    included) before it answers 504 and cancels the request."""
    max_request_bytes: int = 0
    """Largest request body the edge passes on, per HTTP request or gRPC call (a gRPC stream: per
    message, as Triton reads it); 0: ``max_input_bytes`` plus 1 MiB for the rest of a request."""
    inner_ports: str = ""
    """The loopback ports behind the edge: tritonserver's HTTP, gRPC and metrics, the front's HTTP
    and its gRPC stream proxy (0 for both without the front), comma-separated; empty: free ones,
    picked when the server starts."""
    served_model_name: str = ""
    """The model id the HTTP front serves (``/v1/models``); empty: the model folder's name."""
    tokenize_instances: int = 0
    """CPU instances of ``tokenize``; 0: sized to the CPUs this process may use
    (``resolved_tokenize_instances``)."""
    chat_render_instances: int = 0
    """CPU instances of ``chat_render``; 0: sized to the CPUs this process may use
    (``resolved_chat_render_instances``)."""
    llm_instances: int = 1
    """Instances of the downstream ``llm``."""
    llm_decoupled: bool = True
    """TensorRT-LLM's ``decoupled_mode`` for ``llm``: on, any number of responses per request
    (streaming); off, exactly one, for clients that send plain requests (a streamed one is
    refused in TensorRT-LLM's words). The generation ensembles stay decoupled either way."""
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
    python_thread_pool_size: int = 0
    """Threads per Python-backend model instance for its BLS calls and decoupled responses
    (Triton's ``thread-pool-size``); 0: 128 where a generation model loads, Triton's 32 otherwise.
    Each generation that waits for the engine's first response holds one in ``detokenize``, and
    stopping a generation needs one free: with more generations than this waiting at once, the
    stops of abandoned ones wait for a running generation to end (docs/RELIABILITY.md)."""
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
    enable_auto_tool_choice: bool = False
    """vLLM's ``--enable-auto-tool-choice``: off, ``tool_choice`` "auto" (the default when a request
    sends ``tools``) is refused with vLLM's message; on, it needs ``tool_call_parser``."""
    tool_call_parser: str = ""
    """vLLM's ``--tool-call-parser``, one of ``renderer.output_parsers.registry.TOOL_PARSERS``, in use only with
    ``enable_auto_tool_choice``; without one, "required" and a named ``tool_choice`` are refused too."""
    reasoning_parser: str = ""
    """vLLM's ``--reasoning-parser``, one of ``renderer.output_parsers.registry.REASONING_PARSERS``: a chat's thinking comes back as
    ``reasoning``, apart from the content; its markers must be tokens of the model."""
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
    chat_template_engine: str = "auto"
    """Engine that renders the model's chat template for plain chats (string contents, no tools),
    and tool chats where it reads messages only by role, content and name and never names tools
    (``renderer/chat/compiled_template.py``): "auto" (``minijinja`` where the template uses only
    constructs both engines agree on and it renders every load-time probe as Jinja does, else
    Jinja; the reason is logged), or "jinja2"."""
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
    load_stall_s: float = 60.0
    """A start whose server (tritonserver, its stubs and what they started) uses almost no CPU
    this long while a model still loads has hung, and is started again (``launcher/load_watch.py``)."""
    triton_home: str = ""
    """A tritonserver install with ``bin/`` and ``backends/`` (the official image's
    ``/opt/tritonserver``); empty: the server shipped in this venv's ``nvidia-pytriton`` wheel."""

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
    def resolved_tokenize_instances(self) -> int:
        """``tokenize_instances``, or when 0 its share of the CPUs (1 on two cores, 8 on sixteen)."""
        return self.tokenize_instances or default_instances(TOKENIZE_SHARE, least=1)

    @property
    def resolved_chat_render_instances(self) -> int:
        """``chat_render_instances``, or when 0 its share of the CPUs (1 on two cores, 7 on
        sixteen: on two cores one instance against three, render_chat p50 at c=1 1.33 against
        1.50 ms and 0.90 against 1.19 ms of CPU per chat; one against two, no less throughput and
        about 80 µs less chat_render CPU per chat: docs/PERFORMANCE.md, "Sizing"); at least 2 with
        request templates trusted, so that one request's template rendering up to its deadline
        cannot stall every chat."""
        least = 2 if self.trust_request_chat_template else 1
        return self.chat_render_instances or default_instances(CHAT_RENDER_SHARE, least=least)

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
    def serves_encoder_decoder(self) -> bool:
        """Whether the encoder-decoder ensembles are served (``encoder_decoder``)."""
        named = {m.strip() for m in self.models.split(",")} & set(ENCODER_DECODER_MODELS)
        return self.encoder_decoder or bool(self.encoder_decoder_model_dir) or bool(named)

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
        """The HTTP endpoint clients reach (the edge's, when it runs)."""
        return f"http://{self.host}:{self.http_port}"

    @property
    def inner(self) -> "InnerPorts":
        """Where tritonserver and the front listen: behind the edge, the loopback ports of
        ``inner_ports``; without it, the ports clients reach."""
        if not self.edge:
            return InnerPorts(self.host, self.http_port, self.grpc_port, self.metrics_port, self.openai_port, 0)
        ports = [int(p) for p in self.inner_ports.split(",") if p.strip()]
        if len(ports) != 5:
            raise ValueError(
                "INNER_PORTS must name 5 ports (HTTP, gRPC, metrics, front, front's gRPC proxy), "
                f"got {self.inner_ports!r}"
            )
        return InnerPorts("127.0.0.1", *ports)

    @property
    def triton_http_url(self) -> str:
        """tritonserver's own HTTP endpoint (the launcher's health checks and the watchdog)."""
        return f"http://{self.inner.host}:{self.inner.http}"

    @property
    def resolved_max_request_bytes(self) -> int:
        """``max_request_bytes``, or ``max_input_bytes`` plus 1 MiB."""
        return self.max_request_bytes or self.max_input_bytes + 1024 * 1024

    @property
    def front_pid_file(self) -> Path:
        return self.build / "openai_front.pid"

    @property
    def supervisor_pid_file(self) -> Path:
        return self.build / "supervisor.pid"

    @property
    def supervisor_state_file(self) -> Path:
        """Restart counter and current pids (``launcher.supervisor.SupervisorState``)."""
        return self.build / "supervisor.json"

    @property
    def supervisor_log_file(self) -> Path:
        return self.build / "supervisor.log"

    @property
    def watchdog_log_file(self) -> Path:
        return self.build / "watchdog.log"

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
