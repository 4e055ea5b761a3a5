"""tritonserver's command line and environment: which binary (the ``nvidia-pytriton`` wheel's, or
``TRITON_HOME``'s), the Python stub for this venv's Python, and every flag the deployment needs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from launcher.repository import BLS_CALLEES, GENERATION_ENSEMBLES, models_to_load
from launcher.settings import ENGINES, ROOT, Settings, gpu_visible
from launcher.watchdog import TOKEN_HEADER


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def triton_home(home: str = "") -> Path:
    """The server install: ``bin/tritonserver`` and ``backends/``: ``home`` (``TRITON_HOME``) where
    set, else the server shipped in the ``nvidia-pytriton`` wheel of this venv."""
    return Path(home) if home else site_packages() / "pytriton" / "tritonserver"


class StubNotRunnableError(RuntimeError):
    """The Python-backend stub does not start here (a shared library it needs is missing, say)."""


def ensure_python_stub(home: str = "") -> None:
    """The wheel ships one stub per Python; the backend wants the one for ours beside it, and it
    must run: otherwise every Python model fails to load with Triton's misleading 'Failed to give
    execute permission' (its test is that the stub, run bare, exits 1), so say why here instead."""
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    src = triton_home(home) / "python_backend_stubs" / ver / "triton_python_backend_stub"
    dst = triton_home(home) / "backends" / "python" / "triton_python_backend_stub"
    if not dst.exists():
        shutil.copy2(src, dst)
    check_stub_runs(dst)


def check_stub_runs(stub: Path) -> None:
    """Run ``stub`` bare in the server's environment, as the backend does before each start; it
    prints its usage and exits 1 when it can run at all."""
    out = subprocess.run([str(stub)], env=server_env(), capture_output=True, text=True, timeout=60)
    if out.returncode != 1:
        why = (out.stderr or out.stdout).strip().splitlines()[-3:]
        raise StubNotRunnableError(
            f"the Python-backend stub {stub} does not run here (exit status {out.returncode}): {' '.join(why)}"
        )


MMAP_THRESHOLD_BYTES = 256 * 1024
GRPC_POOL_SIZE = 1
# The Python backend's threads per model instance where generations run: 50 generations left at
# once (each waiting for the engine's first response) stalled every stop behind Triton's 32, for
# minutes; each thread costs tritonserver about 17 KB.
GENERATION_THREAD_POOL_SIZE = 128
TRITON_THREAD_POOL_SIZE = 32


def python_thread_pool_size(s: Settings) -> int:
    """``PYTHON_THREAD_POOL_SIZE``, or the default for what the server loads."""
    if s.python_thread_pool_size > 0:
        return s.python_thread_pool_size
    loaded = models_to_load(s)
    generates = loaded == ["*"] or any(m in GENERATION_ENSEMBLES or m in BLS_CALLEES for m in loaded)
    return GENERATION_THREAD_POOL_SIZE if generates else TRITON_THREAD_POOL_SIZE


def server_env(s: Settings | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if s is not None:
        env["RENDERER_MAX_INPUT_BYTES"] = str(s.max_input_bytes)  # read by triton_io/tensors.py
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
    # A fixed mmap threshold: glibc's own rises to the largest block freed so far, after which
    # every large input (an oversized prompt the stage refuses included) is carved from the heap,
    # which fragments and never shrinks (a stub grew by 2-3 MB per refused 6 MiB prompt). Blocks
    # this large are mapped for themselves and unmapped when freed.
    env.setdefault("MALLOC_MMAP_THRESHOLD_", str(MMAP_THRESHOLD_BYTES))
    return env


def exit_timeout_s(s: Settings) -> int:
    """tritonserver's ``--exit-timeout-secs``: the engine's (``ENGINES``); for a name that is no
    engine (a stop of whatever such a setting left), the longest."""
    engine = ENGINES.get(s.llm_engine)
    return engine.exit_timeout_s if engine else max(e.exit_timeout_s for e in ENGINES.values())


def tritonserver_binary(home: str = "") -> Path:
    return triton_home(home) / "bin" / "tritonserver"


def server_command(s: Settings, watchdog_token: str, binary: str | Path | None = None) -> list[str]:
    home = triton_home(s.triton_home)
    cmd = [
        str(binary or tritonserver_binary(s.triton_home)),
        f"--model-repository={s.repository}",
        f"--backend-directory={home / 'backends'}",
        f"--http-address={s.inner.host}",
        f"--http-port={s.inner.http}",
        f"--grpc-address={s.inner.host}",
        f"--grpc-port={s.inner.grpc}",
        f"--metrics-address={s.inner.host}",
        f"--metrics-port={s.inner.metrics}",
        f"--exit-timeout-secs={exit_timeout_s(s)}",
        f"--log-verbose={s.log_verbose}",
        "--backend-config=python,shm-default-byte-size=4194304",
        # Every config here is complete: without this flag the Python backend starts one more stub
        # per model at load only to ask its auto_complete_config, importing the adapter and all it
        # needs once more (chat_render's took 3.5 of a render-only server's 5 s to ready).
        "--disable-auto-complete-config",
        # gRPC request messages kept for reuse keep the buffers of the largest they carried: with
        # Triton's 8, a server that refused oversized gRPC requests kept up to 8 request bodies.
        f"--grpc-infer-allocation-pool-size={GRPC_POOL_SIZE}",
        f"--backend-config=python,shm-region-prefix-name={s.shm_prefix}",
        f"--backend-config=python,thread-pool-size={python_thread_pool_size(s)}",
    ]
    # Explicit mode, so the watchdog can reload a model whose stub died; only the watchdog
    # holds the token the repository API asks for. Loading an ensemble loads its steps.
    cmd.append("--model-control-mode=explicit")
    cmd += [f"--load-model={m}" for m in models_to_load(s)]
    # A loader thread per model (Triton's default is 4): none waits stubless behind the others,
    # which the supervisor's load watch relies on (launcher/load_watch.py).
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
