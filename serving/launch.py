"""Fill the model repository templates and run a real ``tritonserver`` on them.

``python -m serving.launch serve``  foreground (what ``make serve`` runs)
``python -m serving.launch start``  background, waits until ready (tests and benchmarks)
``python -m serving.launch stop``   SIGTERM, so the Python backend frees its /dev/shm regions
``python -m serving.launch render`` only write the generated repository

Every deployment choice is an environment variable (see ``Settings``); the same launcher is the
container entrypoint, so a Kubernetes ConfigMap sets the same names.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import string
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, fields
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WATCHDOG_HEADER = "watchdog-token"
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
    max_model_len: int = 0
    """Context length; 0 takes the model config's."""
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
                values[f.name] = raw.strip().lower() in ("1", "true", "yes", "on")
            elif isinstance(default, int):
                values[f.name] = int(raw)
            elif isinstance(default, float):
                values[f.name] = float(raw)
            else:
                values[f.name] = raw
        return cls(**values)

    @property
    def build(self) -> Path:
        return Path(self.build_dir)

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


def gpu_visible() -> bool:
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return shutil.which("nvidia-smi") is not None and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True
    ).returncode == 0


def model_family(s: Settings) -> str | None:
    """The image-processor family of the served model, or None for a text-only model."""
    from renderer.multimodal.registry import detect_family

    return detect_family(s.resolved_model_dir)


def template_vars(s: Settings) -> dict[str, str]:
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
        "max_model_len": str(s.max_model_len),
        "tokenizer_backend": s.tokenizer_backend,
        "mm_cache_bytes": str(s.mm_cache_bytes),
        "media_dir": str(Path(s.media_dir).resolve()) if s.media_dir else "",
        "media_hosts": s.media_hosts,
    }


def engine_model_name(s: Settings) -> str:
    """The model the post-processing stage sends generation requests to."""
    return Path(s.engine_model_dir).name if s.engine_model_dir else "llm"


def pick_config(model: Path, family: str | None) -> Path | None:
    """A model folder's config for the served model's family.

    ``config.<family>.pbtxt``, then ``config.multimodal.pbtxt`` (any image family), then
    ``config.pbtxt`` (the text-only form); a folder with only family variants (``mm_process``)
    exists only for those families.
    """
    names = [f"config.{family}.pbtxt", "config.multimodal.pbtxt"] if family else []
    for name in names + ["config.pbtxt"]:
        if (model / name).exists():
            return model / name
    return None


def render_repository(s: Settings, family: str | None = None) -> Path:
    """Copy ``model_repository/`` into the build folder with every ``${var}`` filled."""
    values = template_vars(s)
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
GENERATION_ENSEMBLES = {"completion": "detokenize", "chat": "detokenize", "ensemble": "detokenize",
                        "encoder_decoder_completion": "detokenize_enc_dec"}


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


def server_command(s: Settings, watchdog_token: str) -> list[str]:
    home = triton_home()
    cmd = [
        str(home / "bin" / "tritonserver"),
        f"--model-repository={s.repository}",
        f"--backend-directory={home / 'backends'}",
        f"--http-address={s.host}",
        f"--http-port={s.http_port}",
        f"--grpc-address={s.host}",
        f"--grpc-port={s.grpc_port}",
        f"--metrics-address={s.host}",
        f"--metrics-port={s.metrics_port}",
        # vLLM's engine needs longer to shut its processes down (about 13 s here).
        f"--exit-timeout-secs={40 if s.llm_engine == 'vllm' else 10}",
        f"--log-verbose={s.log_verbose}",
        "--backend-config=python,shm-default-byte-size=4194304",
    ]
    # Explicit mode, so the watchdog can reload a model whose stub died; only the watchdog
    # holds the token the repository API asks for. Loading an ensemble loads its steps.
    cmd.append("--model-control-mode=explicit")
    cmd += [f"--load-model={m}" for m in models_to_load(s)]
    cmd += [f"--http-restricted-api=model-repository:{WATCHDOG_HEADER}={watchdog_token}",
            f"--grpc-restricted-protocol=model-repository:{WATCHDOG_HEADER}={watchdog_token}"]
    if not gpu_visible():
        cmd += [
            "--pinned-memory-pool-byte-size=0",
            "--cuda-memory-pool-byte-size=0:0",
            "--allow-gpu-metrics=false",
        ]
    return cmd


def prepare(s: Settings) -> None:
    from serving import default_model, seq2seq_model

    default_tokenizer = Path(s.models_dir) / "smollm2-135m-instruct"
    if not s.model_dir and s.model != "smollm2":
        from serving import test_tokenizers, vlm_model

        test_tokenizers.build(Path(s.models_dir).parent / "tokenizers")
        vlm_model.build(s.resolved_model_dir, family=s.model.replace("-", "_"))
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
        raise SystemExit("LLM_ENGINE=vllm serves text models here: images through vLLM's engine are not wired "
                         "(docs/ENGINES.md says why); use the stand-in for the image path")
    if not s.encoder_decoder_model_dir:
        # The tiny BART borrows the default model's tokenizer.
        seq2seq_model.build(s.resolved_encdec_model_dir, default_model.build(default_tokenizer))
    ensure_python_stub()
    render_repository(s, model_family(s))


def is_ready(s: Settings) -> bool:
    try:
        with urllib.request.urlopen(s.http_url + "/v2/health/ready", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


def running_pid(s: Settings) -> int | None:
    """The pid of the server this build folder started, if it still runs.

    A stale pid file may name a pid the system has since given to another process (another
    server, even): only a tritonserver serving this very repository counts.
    """
    try:
        pid = int(s.pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    if f"--model-repository={s.repository}".encode() not in cmdline:
        return None
    return pid


def start(s: Settings) -> int:
    if running_pid(s) is not None and is_ready(s):
        print(f"tritonserver already running (pid {running_pid(s)}) at {s.http_url}")
        return 0
    prepare(s)
    s.build.mkdir(parents=True, exist_ok=True)
    log = open(s.log_file, "ab")
    token = secrets.token_hex(16)
    proc = subprocess.Popen(
        server_command(s, token), env=server_env(s), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    s.pid_file.write_text(str(proc.pid))
    start_watchdog(s, proc.pid, token)
    start_front(s, proc.pid)
    deadline = time.monotonic() + s.startup_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            print(f"tritonserver exited with {proc.returncode}; last log lines:", file=sys.stderr)
            print("\n".join(s.log_file.read_text(errors="replace").splitlines()[-40:]), file=sys.stderr)
            s.pid_file.unlink(missing_ok=True)
            return 1
        if is_ready(s):
            print(f"tritonserver ready (pid {proc.pid}) at {s.http_url}, grpc {s.host}:{s.grpc_port}")
            return 0
        time.sleep(0.5)
    print(f"tritonserver not ready after {s.startup_timeout_s}s; see {s.log_file}", file=sys.stderr)
    stop(s)
    return 1


def stop(s: Settings, timeout_s: float = 60.0) -> int:
    stop_front(s)
    pid = running_pid(s)
    if pid is None:
        s.pid_file.unlink(missing_ok=True)
        return 0
    _terminate(pid, timeout_s)  # SIGTERM: the backend unlinks its shared-memory regions
    # The server's process group (start_new_session) also holds what its stubs started, such as
    # vLLM's engine-core processes, which outlive a server that exits first: none may remain.
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    s.pid_file.unlink(missing_ok=True)
    return 0


def _terminate(pid: int, timeout_s: float) -> bool:
    """SIGTERM, then wait; whether the process is gone."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        _reap(pid)
        time.sleep(0.1)
    return False


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def start_watchdog(s: Settings, server_pid: int, token: str) -> None:
    """Beside the server: reloads a model whose stub died (serving/watchdog.py says why)."""
    env = {**server_env(), "WATCHDOG_TOKEN": token}
    with open(s.build / "watchdog.log", "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "serving.watchdog", "--server-pid", str(server_pid), "--http-url", s.http_url],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(ROOT),
        )


def start_front(s: Settings, server_pid: int) -> None:
    """Beside the server: the OpenAI- and vLLM-compatible HTTP front (it follows the server's
    life: ``--server-pid``), unless ``OPENAI_PORT`` is 0."""
    if not s.openai_port:
        return
    cmd = [sys.executable, "-m", "serving.openai_front", "--host", s.host, "--port", str(s.openai_port),
           "--triton", f"{s.host}:{s.grpc_port}", "--model-dir", str(s.resolved_model_dir),
           "--max-model-len", str(s.max_model_len), "--server-pid", str(server_pid)]
    if s.served_model_name:
        cmd += ["--served-model-name", s.served_model_name]
    with open(s.build / "openai_front.log", "ab") as log:
        proc = subprocess.Popen(cmd, env=server_env(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=str(ROOT))
    s.front_pid_file.write_text(str(proc.pid))


def stop_front(s: Settings) -> None:
    try:
        pid = int(s.front_pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        s.front_pid_file.unlink(missing_ok=True)
        return
    if b"serving.openai_front" in cmdline and not _terminate(pid, 5.0):  # only the front this folder started
        os.kill(pid, signal.SIGKILL)
    s.front_pid_file.unlink(missing_ok=True)


def serve(s: Settings) -> int:
    prepare(s)
    s.build.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    cmd = server_command(s, token)
    print("$ " + " ".join(c if token not in c else c.replace(token, "***") for c in cmd), flush=True)
    # exec keeps this pid, so the watchdog and the front started now follow the server itself.
    start_watchdog(s, os.getpid(), token)
    start_front(s, os.getpid())
    if s.openai_port:
        print(f"OpenAI-compatible front on http://{s.host}:{s.openai_port}/v1", flush=True)
    os.execve(cmd[0], cmd, server_env(s))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["serve", "start", "stop", "render", "status"])
    args = parser.parse_args(argv)
    s = Settings.from_env()
    if args.action == "serve":
        return serve(s)
    if args.action == "start":
        return start(s)
    if args.action == "stop":
        return stop(s)
    if args.action == "render":
        prepare(s)
        print(s.repository)
        return 0
    ready = is_ready(s)
    print("ready" if ready else "not ready")
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main())
