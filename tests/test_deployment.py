"""Offline checks of docker/: the image recipe and the Kubernetes manifests.

No Docker engine and no cluster are needed: every kustomize overlay is rendered with kubectl's
built-in kustomize (the renderer `kubectl apply -k` uses), each resulting object is validated
against the Kubernetes JSON schemas (kubernetes-validate), the Dockerfile is linted (hadolint),
and the container's entrypoint runs here with the environment the manifests' ConfigMap sets.
The tools are pinned in requirements.txt and live in this venv's bin/.
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
import yaml

from launcher import cli as launch
from launcher import server

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
# What the image must carry: every Python package of the project but the tests and benchmarks, and
# the model repository (a new package that the Dockerfile forgets fails here).
PROJECT_FOLDERS = sorted(
    p.name for p in ROOT.iterdir() if (p / "__init__.py").exists() and p.name not in ("tests", "benchmarks")
) + ["model_repository"]
K8S = DOCKER / "k8s"
OVERLAYS = {"cpu": K8S / "overlays" / "cpu", "gpu": K8S / "overlays" / "gpu"}
KUSTOMIZATIONS = {**OVERLAYS, "loadtest": K8S / "loadtest"}
VENV_BIN = Path(sys.executable).parent
# Oldest Kubernetes still commonly run, and the newest the schemas know.
K8S_VERSIONS = ["1.29", "latest"]
SETTING_NAMES = {f.name.upper() for f in fields(launch.Settings)}
APP = {"app.kubernetes.io/name": "triton-renderer"}


def tool(name: str) -> str:
    path = VENV_BIN / name
    assert path.exists(), f"{path} missing: it is pinned in requirements.txt; run `make venv`"
    return str(path)


def kustomize(folder: Path) -> list[dict]:
    out = subprocess.run([tool("kubectl"), "kustomize", str(folder)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: kustomize(folder) for name, folder in KUSTOMIZATIONS.items()}


def one(objs: list[dict], kind: str) -> dict:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, (kind, [o["kind"] for o in objs])
    return found[0]


def launcher_env(objs: list[dict]) -> dict[str, str]:
    deploy = one(objs, "Deployment")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    (ref,) = [e["configMapRef"]["name"] for e in container["envFrom"]]
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == ref]
    return dict(cm["data"])


# ---------------------------------------------------------------- (a) + (b): render, validate


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_manifests_validate_against_kubernetes_schemas(rendered, name, version):
    import kubernetes_validate.utils as kv

    version = kv.latest_version() if version == "latest" else version
    objs = rendered[name]
    assert objs, f"{name} rendered nothing"
    for obj in objs:
        # strict: unknown fields (a typo'd key that the API server would drop) fail too.
        try:
            kv.validate(obj, version, strict=True)
        except kv.ValidationError as e:
            where = ".".join(str(p) for p in e.path)
            pytest.fail(f"{name}: {obj['kind']}/{obj['metadata']['name']} at {where}: {e.message}")
        except kv.SchemaNotFoundError as e:
            pytest.fail(f"{name}: {e.message}")


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_overlay_has_every_piece(rendered, overlay):
    objs = rendered[overlay]
    assert sorted(o["kind"] for o in objs) == sorted(
        ["ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"]
    )
    deploy, svc = one(objs, "Deployment"), one(objs, "Service")
    hpa, pdb = one(objs, "HorizontalPodAutoscaler"), one(objs, "PodDisruptionBudget")
    pod = deploy["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    env = launcher_env(objs)

    # Every ConfigMap key is a launcher setting (a misspelt one would be silently ignored).
    assert set(env) <= SETTING_NAMES, set(env) - SETTING_NAMES
    assert env["HOST"] == "0.0.0.0"

    # Ports: ConfigMap == container == Service; probes on Triton's health endpoints and the front's.
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert (
        ports
        == {
            "http": int(env["HTTP_PORT"]),
            "grpc": int(env["GRPC_PORT"]),
            "metrics": int(env["METRICS_PORT"]),
            "openai": int(env["OPENAI_PORT"]),
        }
        == {"http": 8000, "grpc": 8001, "metrics": 8002, "openai": 9000}
    )
    assert {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]} == {
        n: (p, n) for n, p in ports.items()
    }
    assert c["startupProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "openai"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    ann = pod["metadata"]["annotations"]
    assert (ann["prometheus.io/scrape"], ann["prometheus.io/port"]) == ("true", str(ports["metrics"]))

    # /dev/shm: an in-memory emptyDir with a size limit; requests and limits set.
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    (shm,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert vols[shm["name"]]["emptyDir"]["medium"] == "Memory"
    assert vols[shm["name"]]["emptyDir"]["sizeLimit"]
    assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and {"cpu", "memory"} <= set(c["resources"]["limits"])
    # BUILD_DIR must be writable under a read-only root filesystem.
    mounts = [m["mountPath"] for m in c["volumeMounts"]]
    assert any(env["BUILD_DIR"].startswith(m.rstrip("/") + "/") for m in mounts), (env["BUILD_DIR"], mounts)

    # Selectors reach the pods; the autoscaler and budget aim at this Deployment.
    labels = pod["metadata"]["labels"]
    for selector in (
        deploy["spec"]["selector"]["matchLabels"],
        svc["spec"]["selector"],
        pdb["spec"]["selector"]["matchLabels"],
    ):
        assert selector == APP and APP.items() <= labels.items()
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deploy["metadata"]["name"],
    }
    assert hpa["spec"]["minReplicas"] >= 2, "a PodDisruptionBudget with one replica blocks node drains"

    gpus = c["resources"]["limits"].get("nvidia.com/gpu")
    if overlay == "gpu":
        assert env["MM_INSTANCE_KIND"] == "KIND_GPU" and gpus == 1
        assert c["resources"]["requests"].get("nvidia.com/gpu") == 1
        assert c["image"].endswith(":gpu")
    else:
        assert env["MM_INSTANCE_KIND"] == "KIND_CPU" and gpus is None
        assert c["image"].endswith(":cpu")


def test_autoscaler_scales_on_the_queue_time_metric_the_adapter_publishes(rendered):
    """The HPA's Pods metric is the one the prometheus-adapter rules publish, built from Triton
    metrics of models this repository has (docker/k8s/metrics/prometheus-adapter-values.yaml)."""
    values = yaml.safe_load((ROOT / "docker" / "k8s" / "metrics" / "prometheus-adapter-values.yaml").read_text())
    (rule,) = values["rules"]["custom"]
    for overlay in ("cpu", "gpu"):
        hpa = one(rendered[overlay], "HorizontalPodAutoscaler")
        pods = [m["pods"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
        assert [p["metric"]["name"] for p in pods] == [rule["name"]["as"]], overlay
        assert float(pods[0]["target"]["averageValue"]) > 0
        assert any(m["type"] == "Resource" for m in hpa["spec"]["metrics"]), "CPU stays as the fallback"
    stages = re.search(r'model=~"([^"]+)"', rule["seriesQuery"]).group(1).split("|")
    assert all((ROOT / "model_repository" / m).is_dir() for m in stages), stages
    for metric in ("nv_inference_queue_duration_us", "nv_inference_request_success"):
        assert metric in rule["metricsQuery"]
    assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}


def test_loadtest_job_targets_the_service(rendered):
    job = one(rendered["loadtest"], "Job")
    (c,) = job["spec"]["template"]["spec"]["containers"]
    args = c["args"]
    assert c["command"] == ["perf_analyzer"]
    assert args[args.index("-m") + 1] == "render_completion"
    assert args[args.index("-u") + 1] == "triton-renderer:8001"
    data = (K8S / "loadtest" / "render_completion.json").read_text()
    assert "prompt" in yaml.safe_load(data)["data"][0]


# ---------------------------------------------------------------- (c) + (d): the Dockerfile


def test_dockerfile_lints_clean():
    out = subprocess.run(
        [tool("hadolint"), "--no-color", "--failure-threshold", "style", str(DOCKER / "Dockerfile")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_entrypoint_is_valid_bash():
    path = DOCKER / "entrypoint.sh"
    assert os.access(path, os.X_OK)
    out = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def _pip_installs(text: str) -> list[str]:
    """The `pip install ...` commands of a Dockerfile or Makefile, continuation lines joined."""
    text = text.replace("\\\n", " ")
    return [m.group(0) for m in re.finditer(r"pip install[^\n&;]*", text)]


def test_dockerfile_installs_the_makefiles_requirements():
    dockerfile = (DOCKER / "Dockerfile").read_text()
    makefile = (ROOT / "Makefile").read_text()
    docker_pip, make_pip = _pip_installs(dockerfile), _pip_installs(makefile)

    def installs(cmds: list[str], req: str, no_deps: bool) -> bool:
        return any(f"-r {req}" in c and (("--no-deps" in c) == no_deps) for c in cmds)

    # The one pinned list, the same way in both places.
    for req, no_deps in (("requirements.txt", False), ("requirements-nodeps.txt", True)):
        assert installs(make_pip, req, no_deps), f"Makefile does not install {req}"
        assert installs(docker_pip, req, no_deps), f"Dockerfile does not install {req}"
        assert re.search(rf"^COPY .*\b{re.escape(req)}\b", dockerfile, re.M)
    # The server wheel only outside the image: the image has /opt/tritonserver.
    assert installs(make_pip, "requirements-server.txt", True)
    assert not any("requirements-server.txt" in c for c in docker_pip)
    assert re.search(r"pip download .*-r requirements-server.txt", dockerfile.replace("\\\n", " "))
    assert "nvidia-pytriton" not in (ROOT / "requirements.txt").read_text()
    # Every line of every list is pinned.
    for req in ("requirements.txt", "requirements-nodeps.txt", "requirements-server.txt"):
        for line in (ROOT / req).read_text().splitlines():
            line = line.split("#")[0].strip()
            assert not line or re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[^\s]+", line), (req, line)


def test_dockerfile_bakes_the_project_and_uses_the_launcher():
    text = (DOCKER / "Dockerfile").read_text()
    joined = text.replace("\\\n", " ")
    assert re.search(r"^ARG TRITON_TAG=24\.10-py3$", text, re.M)
    assert "FROM nvcr.io/nvidia/tritonserver:${TRITON_TAG}" in text
    for folder in PROJECT_FOLDERS:
        assert re.search(rf"^COPY {folder}/ {folder}/$", text, re.M), folder
    assert re.search(r"^RUN python -m model_builders\.default_model ", text, re.M)
    # ...and every other built-in model the launcher prepares: MODELS_DIR is read-only in the pod.
    assert re.search(r"^ && BUILD_DIR=\S+ python -m launcher render", text, re.M)
    env = dict(
        re.findall(r"\b([A-Z_]+)=(\S+)", " ".join(line for line in joined.splitlines() if line.startswith("ENV ")))
    )
    assert env["HOST"] == "0.0.0.0" and env["TRITON_HOME"] == "/opt/tritonserver"
    assert env["MODEL_DIR"].startswith(env["MODELS_DIR"] + "/")
    assert env["MODEL_DIR"] in re.search(r"^RUN python -m model_builders\.default_model (\S+)", text, re.M).group(0)
    # The image's Python matches this venv's (the stub is taken for that version).
    (py,) = set(re.findall(r"^ARG PYTHON_VERSION=(\S+)$", text, re.M))
    assert py == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert '"/opt/renderer/docker/entrypoint.sh"' in text and 'CMD ["serve"]' in text
    assert "-m launcher" in (DOCKER / "entrypoint.sh").read_text()
    # The build context is allow-listed; entrypoint.sh and all copied sources are in it.
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    for path in (
        *(f"{folder}/" for folder in PROJECT_FOLDERS),
        "docker/entrypoint.sh",
        "requirements.txt",
        "requirements-nodeps.txt",
        "requirements-server.txt",
    ):
        assert f"!{path}" in ignore, path


# ---------------------------------------------------------------- the launcher's TRITON_HOME


def test_triton_home_override(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITON_HOME", raising=False)
    assert server.triton_home() == server.site_packages() / "pytriton" / "tritonserver"
    monkeypatch.setenv("TRITON_HOME", str(tmp_path))
    cmd = server.server_command(launch.Settings(build_dir=str(tmp_path / "b")), "token")
    assert cmd[0] == str(tmp_path / "bin" / "tritonserver")
    assert f"--backend-directory={tmp_path / 'backends'}" in cmd


# ---------------------------------------------------------------- (e) the entrypoint, for real


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
def container(tmp_path_factory, rendered):
    """docker/entrypoint.sh serve, in the foreground as in the pod, with the cpu overlay's
    ConfigMap environment; only the bind address, ports and folders are changed for this host."""
    from model_builders.default_model import build

    tmp = tmp_path_factory.mktemp("container")
    model_dir = build(ROOT / "build" / "models" / "smollm2-135m-instruct")
    env = {k: v for k, v in os.environ.items() if k not in SETTING_NAMES}
    env.update(launcher_env(rendered["cpu"]))
    env.update(
        HOST="127.0.0.1",
        HTTP_PORT="19000",
        GRPC_PORT="19001",
        METRICS_PORT="19002",
        OPENAI_PORT="19003",
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
    assert b"--http-port=19000" in cmdline and b"--grpc-port=19001" in cmdline
    assert f"--model-repository={settings.repository}".encode() in cmdline
    tokenize_cfg = (settings.repository / "tokenize" / "config.pbtxt").read_text()
    assert f"max_batch_size: {settings.max_batch_size}" in tokenize_cfg
    assert f"count: {settings.tokenize_instances} kind: KIND_CPU" in tokenize_cfg


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


def test_readme_commands_name_real_files():
    readme = (DOCKER / "README.md").read_text()
    for path in re.findall(r"(docker/[\w./-]+)", readme):
        assert (ROOT / path.rstrip(".")).exists(), path
    assert "apply -k docker/k8s/overlays/cpu" in readme and "apply -k docker/k8s/loadtest" in readme
    assert "perf_analyzer" in readme and "render_completion" in readme
