"""The container's entrypoint, for real: ``docker/entrypoint.sh serve`` in the foreground as in the pod,
with the cpu overlay's ConfigMap environment (only the bind address, ports and folders changed for
this host), answering the probes, the metrics the autoscaler reads and both protocols, and stopping
cleanly on the kubelet's SIGTERM.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path
from unittest import mock

import pytest
import ports

from launcher import cli as launch
from launcher import server
from manifests import kustomize, launcher_env, OVERLAYS

PORT = ports.port("deployment")


ROOT = Path(__file__).resolve().parents[2]

DOCKER = ROOT / "docker"
SETTING_NAMES = {f.name.upper() for f in fields(launch.Settings)}


def _image_like_triton_home(tmp: Path) -> Path:
    """A TRITON_HOME laid out like the image's /opt/tritonserver (bin/, backends/), made of
    links to this venv's server, so the entrypoint runs with TRITON_HOME set as in the image."""
    wheel = server.site_packages() / "pytriton" / "tritonserver"
    server.ensure_python_stub()  # the wheel's stub for this Python, as the Dockerfile installs one
    home = tmp / "tritonserver"
    home.mkdir()
    (home / "bin").symlink_to(wheel / "bin")
    (home / "backends").symlink_to(wheel / "backends")
    return home


@pytest.fixture(scope="module")
def container(tmp_path_factory):
    """docker/entrypoint.sh serve, in the foreground as in the pod, with the cpu overlay's
    ConfigMap environment; only the bind address, ports and folders are changed for this host."""
    from model_builders.default_model import build

    tmp = tmp_path_factory.mktemp("container")
    model_dir = build(ROOT / "build" / "models" / "smollm2-135m-instruct")
    env = {k: v for k, v in os.environ.items() if k not in SETTING_NAMES}
    env.update(launcher_env(kustomize(OVERLAYS["cpu"])))
    env.update(
        HOST="127.0.0.1",
        HTTP_PORT=str(PORT),
        GRPC_PORT=str(PORT + 1),
        METRICS_PORT=str(PORT + 2),
        OPENAI_PORT=str(PORT + 3),
        MODEL_DIR=str(model_dir),
        MODELS_DIR=str(model_dir.parent),
        BUILD_DIR=str(tmp / "build"),
        TRITON_HOME=str(_image_like_triton_home(tmp)),
        PYTHON=sys.executable,
    )
    env.pop("CLEAN_STALE_SHM", None)  # other servers' regions live in this host's /dev/shm
    with mock.patch.dict(os.environ, env, clear=True):
        settings = launch.Settings.from_env()  # what the launcher in the pod reads
    log = open(tmp / "entrypoint.log", "wb")
    proc = subprocess.Popen(
        [str(DOCKER / "entrypoint.sh"), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 240
        while not launch.is_ready(settings):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (tmp / "entrypoint.log").read_text(errors="replace")[-4000:]
                pytest.fail(f"entrypoint did not become ready (rc={proc.poll()}):\n{tail}")
            time.sleep(0.5)
        yield settings, proc, tmp / "entrypoint.log"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)  # what the kubelet sends; the supervising launcher is this pid
            try:
                proc.wait(timeout=45)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # Whatever a failed test left running (the server group, the front) goes with its pid files.
        subprocess.run([sys.executable, "-m", "launcher", "stop"], env=env, cwd=ROOT, check=False)
        log.close()


@pytest.mark.live
def test_entrypoint_supervises_tritonserver_with_the_configmap_settings(container):
    settings, proc, log = container
    # exec all the way to the launcher, which supervises tritonserver: SIGTERM reaches it.
    assert launch.supervisor_state(settings).supervisor_pid == proc.pid
    server_pid = int(settings.pid_file.read_text())
    exe = os.readlink(f"/proc/{server_pid}/exe")
    assert exe.endswith("/tritonserver"), exe
    cmdline = Path(f"/proc/{server_pid}/cmdline").read_bytes().split(b"\0")
    # The ConfigMap's ports are the edge's; tritonserver listens behind it on the loopback.
    assert b"--http-address=127.0.0.1" in cmdline and b"--grpc-address=127.0.0.1" in cmdline
    assert f"--http-port={PORT}".encode() not in cmdline
    from launcher.edge import edge_dir

    edge_conf = (edge_dir(settings) / "nginx.conf").read_text()
    assert f"listen {settings.host}:{PORT} " in edge_conf and f"listen {settings.host}:{PORT + 1} http2 " in edge_conf
    assert f"--model-repository={settings.repository}".encode() in cmdline
    tokenize_cfg = (settings.repository / "tokenize" / "config.pbtxt").read_text()
    assert f"max_batch_size: {settings.max_batch_size}" in tokenize_cfg
    assert f"count: {settings.resolved_tokenize_instances} kind: KIND_CPU" in tokenize_cfg


@pytest.mark.live
def test_health_and_metrics_endpoints_the_manifests_use(container):
    import urllib.request

    settings = container[0]
    for path in ("/v2/health/ready", "/v2/health/live"):
        with urllib.request.urlopen(settings.http_url + path, timeout=5) as r:
            assert r.status == 200, path
    # The readiness probe's: the OpenAI front the container's launcher started, on its port.
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://{settings.host}:{settings.openai_port}/health", timeout=5) as r:
                assert r.status == 200
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    url = f"http://{settings.host}:{settings.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    # What the autoscaler's adapter rule reads, per stage.
    for metric in ("nv_inference_request_success", "nv_inference_queue_duration_us"):
        for model in ("tokenize", "chat_render"):
            assert re.search(rf'^{metric}{{model="{model}",', text, re.M), (metric, model)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.live
def test_render_completion_answers(container, protocol, hf_tokenizer):
    from client import RendererClient

    settings = container[0]
    port = settings.http_port if protocol == "http" else settings.grpc_port
    with RendererClient(f"{settings.host}:{port}", protocol) as c:
        r = c.render_completion("Hello from the container")
    assert r.input_ids == hf_tokenizer("Hello from the container").input_ids
    assert r.rendered_prompt == "Hello from the container"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.live
def test_render_chat_answers(container, protocol, hf_tokenizer):
    from client import RendererClient

    settings = container[0]
    port = settings.http_port if protocol == "http" else settings.grpc_port
    with RendererClient(f"{settings.host}:{port}", protocol) as c:
        r = c.render_chat([{"role": "user", "content": "Hello from the container"}])
    assert "Hello from the container" in r.rendered_prompt
    assert r.input_ids == hf_tokenizer(r.rendered_prompt, add_special_tokens=False).input_ids


@pytest.mark.live
def test_sigterm_stops_the_server_and_frees_shared_memory(container):
    """Last (module order): the kubelet's SIGTERM ends the pod's server cleanly."""
    settings, proc, _ = container
    # This server's regions exactly (other servers on the host make their own meanwhile).
    maps = Path(f"/proc/{int(settings.pid_file.read_text())}/maps").read_text()
    mine = set(re.findall(r"(/dev/shm/triton_python_backend_shm_region_\S+)", maps))
    assert mine, "the server maps no shared-memory regions: nothing to check"
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=45) == 0
    assert not launch.is_ready(settings)
    assert not (mine & set(glob.glob("/dev/shm/triton_python_backend_shm_region_*")))
