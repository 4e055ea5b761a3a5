"""Offline checks of docker/: the image recipe and the Kubernetes manifests.

No Docker engine and no cluster are needed: every kustomize overlay is rendered with kubectl's
built-in kustomize (the renderer `kubectl apply -k` uses), each resulting object is validated
against the Kubernetes JSON schemas (kubernetes-validate), the Dockerfile is linted (hadolint),
and the container's entrypoint runs here with the environment the manifests' ConfigMap sets.
The tools are pinned in requirements.txt and live in this venv's bin/.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import pytest
import yaml

from launcher import cli as launch
from launcher import server
from manifests import K8S, KUSTOMIZATIONS, kustomize, launcher_env, one, OVERLAYS, tool


ROOT = Path(__file__).resolve().parents[2]

DOCKER = ROOT / "docker"

# What the image must carry: every Python package of the project but the tests and benchmarks, and
# the model repository (a new package that the Dockerfile forgets fails here).
PROJECT_FOLDERS = sorted(
    p.name for p in ROOT.iterdir() if (p / "__init__.py").exists() and p.name not in ("tests", "benchmarks")
) + ["model_repository"]

# Oldest Kubernetes still commonly run, and the newest the schemas know.
K8S_VERSIONS = ["1.29", "latest"]

SETTING_NAMES = {f.name.upper() for f in fields(launch.Settings)}

APP = {"app.kubernetes.io/name": "triton-renderer"}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: kustomize(folder) for name, folder in KUSTOMIZATIONS.items()}


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
        # The cpu overlay deploys exactly the image `make image` builds and `make image-test` runs.
        built = re.search(r'^IMAGE="\$\{IMAGE:-([^}]+)\}"', (ROOT / "docker" / "build-image.sh").read_text(), re.M)
        assert built and c["image"] == built.group(1), (c["image"], built)


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


def test_podmonitor_scrapes_both_metrics_endpoints_of_the_pods(rendered):
    """docker/k8s/metrics/podmonitor.yaml selects the Deployment's pods and scrapes Triton's port
    (the HPA's series) and the front's (the dashboard's latency), by the container's port names."""
    monitor = yaml.safe_load((K8S / "metrics" / "podmonitor.yaml").read_text())
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    for overlay in sorted(OVERLAYS):
        deploy = one(rendered[overlay], "Deployment")
        assert monitor["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"], overlay
        (c,) = deploy["spec"]["template"]["spec"]["containers"]
        names = {p["name"] for p in c["ports"]}
        endpoints = monitor["spec"]["podMetricsEndpoints"]
        assert sorted(e["port"] for e in endpoints) == ["metrics", "openai"] and names >= {"metrics", "openai"}
        assert all(e["path"] == "/metrics" for e in endpoints)


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
    dockerfile, cpu_stage = (DOCKER / "Dockerfile").read_text().split("FROM ${CPU_BASE} AS cpu")
    makefile = (ROOT / "Makefile").read_text()
    docker_pip, make_pip = _pip_installs(dockerfile), _pip_installs(makefile)
    cpu_pip = _pip_installs(cpu_stage)

    def installs(cmds: list[str], req: str, no_deps: bool) -> bool:
        return any(f"-r {req}" in c and (("--no-deps" in c) == no_deps) for c in cmds)

    # The images install the server's list, the venv that list and the test tools on top of it.
    assert installs(make_pip, "requirements.txt", False)
    assert (ROOT / "requirements.txt").read_text().splitlines().count("-r requirements-runtime.txt") == 1
    for req, no_deps in (("requirements-runtime.txt", False), ("requirements-nodeps.txt", True)):
        assert installs(docker_pip, req, no_deps), f"Dockerfile does not install {req}"
        assert installs(cpu_pip, req, no_deps), f"the cpu target does not install {req}"
        assert re.search(rf"^COPY .*\b{re.escape(req)}\b", dockerfile, re.M)
    assert installs(make_pip, "requirements-nodeps.txt", True)
    for stage in (dockerfile, cpu_stage):
        assert not any(re.search(r"-r requirements\.txt\b", c) for c in _pip_installs(stage)), "test tools in an image"
    # The server wheel where the Makefile installs it and in the cpu target (its server, as
    # `make serve` runs it); not in the GPU image, which has /opt/tritonserver.
    assert installs(make_pip, "requirements-server.txt", True)
    assert installs(cpu_pip, "requirements-server.txt", True)
    assert not any("requirements-server.txt" in c for c in docker_pip)
    assert re.search(r"pip download .*-r requirements-server.txt", dockerfile.replace("\\\n", " "))
    assert "nvidia-pytriton" not in (ROOT / "requirements.txt").read_text()
    # Every line of every list is pinned, each package once across them.
    seen: dict[str, str] = {}
    for req in ("requirements-runtime.txt", "requirements.txt", "requirements-nodeps.txt", "requirements-server.txt"):
        for line in (ROOT / req).read_text().splitlines():
            line = line.split("#")[0].strip()
            if not line or line == "-r requirements-runtime.txt":
                continue
            assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[^\s]+", line), (req, line)
            name = re.split(r"[\[=]", line)[0].lower().replace("_", "-")
            assert name not in seen, (name, seen.get(name), req)
            seen[name] = req


def test_dockerfile_bakes_the_project_and_uses_the_launcher():
    text = (DOCKER / "Dockerfile").read_text()
    joined = text.replace("\\\n", " ")
    assert re.search(r"^ARG TRITON_TAG=24\.10-py3$", text, re.M)
    assert "FROM nvcr.io/nvidia/tritonserver:${TRITON_TAG}" in text
    # The project's files once, in the `project` stage both images copy.
    project = text.split("FROM scratch AS project\n", 1)[1].split("\nFROM ", 1)[0]
    for folder in PROJECT_FOLDERS:
        assert re.search(rf"^COPY {folder}/ {folder}/$", project, re.M), folder
        assert text.count(f"COPY {folder}/") == 1, folder
    assert "COPY docker/entrypoint.sh docker/entrypoint.sh" in project
    assert text.count("COPY --from=project /opt/renderer/ ./") == 2
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
        "requirements-runtime.txt",
        "requirements-nodeps.txt",
        "requirements-server.txt",
    ):
        assert f"!{path}" in ignore, path
    # buildah reads that file only when told (`make image`).
    assert "--ignorefile docker/Dockerfile.dockerignore" in (DOCKER / "build-image.sh").read_text()


# ---------------------------------------------------------------- the launcher's TRITON_HOME


def test_triton_home_override(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITON_HOME", raising=False)
    assert (
        server.triton_home(launch.Settings.from_env().triton_home)
        == server.site_packages() / "pytriton" / "tritonserver"
    )
    monkeypatch.setenv("TRITON_HOME", str(tmp_path))
    s = replace(launch.Settings.from_env(), build_dir=str(tmp_path / "b"), edge=False)
    cmd = server.server_command(s, "token")
    assert cmd[0] == str(tmp_path / "bin" / "tritonserver")
    assert f"--backend-directory={tmp_path / 'backends'}" in cmd


def test_a_stub_that_cannot_run_is_named_before_triton_blames_permissions(tmp_path):
    """The stub of this venv runs; one that cannot (as with a base image lacking libpython: the loader
    exits 127) is refused with the loader's words, not Triton's 'Failed to give execute permission'."""
    server.ensure_python_stub()  # this venv's stub passes the same check
    broken = tmp_path / "triton_python_backend_stub"
    broken.write_text("#!/bin/sh\necho 'error while loading shared libraries: libpython3.11.so.1.0' >&2\nexit 127\n")
    broken.chmod(0o755)
    with pytest.raises(server.StubNotRunnableError, match=r"exit status 127\): error while loading shared libraries"):
        server.check_stub_runs(broken)


def test_the_dockerfile_and_make_image_name_the_same_cpu_base():
    """docker/build-image.sh makes the base and passes its tag; the Dockerfile's default must name
    that same base, or a plain `docker build --target cpu` starts from an older or missing one."""
    default = re.search(r"^ARG CPU_BASE=(\S+)$", (DOCKER / "Dockerfile").read_text(), re.M)
    made = re.search(r'^BASE="\$\{CPU_BASE:-([^}]+)\}"$', (DOCKER / "build-image.sh").read_text(), re.M)
    assert default and made and default.group(1) == made.group(1)


def test_readme_commands_name_real_files():
    readme = (DOCKER / "README.md").read_text()
    for path in re.findall(r"(docker/[\w./-]+)", readme):
        assert (ROOT / path.rstrip(".")).exists(), path
    assert "apply -k docker/k8s/overlays/cpu" in readme and "apply -k docker/k8s/loadtest" in readme
    assert "perf_analyzer" in readme and "render_completion" in readme


def test_the_peer_environment_pins_the_fastokens_the_server_runs():
    """`make engine-vllm` reads the fastokens pin from the server's list (CI caught it reading a
    list that no longer held it)."""
    from model_builders.vllm_env import fastokens_pin

    pin = fastokens_pin()
    assert pin.startswith("fastokens==") and pin in (ROOT / "requirements-runtime.txt").read_text().splitlines()


def test_every_setting_has_one_readme_row_and_every_row_is_a_setting():
    """A setting is declared once, as a ``Settings`` field (its environment variable is the field's
    name in capitals); README's configuration table documents exactly those."""
    names = {f.name.upper() for f in fields(launch.Settings)}
    table = (ROOT / "README.md").read_text().split("\n## Configuration\n", 1)[1]
    rows = {
        name
        for line in table.splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1])
    }
    assert names - rows == set(), f"settings without a README row: {sorted(names - rows)}"
    assert rows - names == set(), f"README rows that are no setting: {sorted(rows - names)}"


@pytest.mark.parametrize("setting", ["TOOL_CALL_PARSER", "REASONING_PARSER"])
def test_readme_names_exactly_the_parsers_there_are(setting):
    from renderer.output_parsers.registry import REASONING_PARSERS, TOOL_PARSERS

    [row] = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith(f"| `{setting}` |")]
    meaning = re.split(r"[(;]", row.split("|")[3])[0]  # the list comes before the first aside
    named = {n for n in re.findall(r"`([a-z0-9_]+)`", meaning)}
    assert named == set(TOOL_PARSERS if setting == "TOOL_CALL_PARSER" else REASONING_PARSERS)
