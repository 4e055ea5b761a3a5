"""`make image-test`: the CPU image `make image` built, run as Kubernetes runs the cpu overlay's pod.

The container gets what the rendered Deployment gives it and nothing else (tests/support/pod.py:
its user, read-only root filesystem, dropped capabilities, the two ``emptyDir`` volumes, the
ConfigMap environment, its args); the entrypoint is PID 1. Checked through the published ports:
the manifest's probes, renders and a generation over HTTP and gRPC, the OpenAI front, a SIGKILLed
tritonserver brought back by the supervisor inside, and the kubelet's stop (preStop, then SIGTERM)
ending everything within the grace period. Tests run in module order; the stop is last.
"""

from __future__ import annotations

import http.client
import json
import os
import time
from pathlib import Path

import pytest
import ports

from pod import PodSpec, podman, wait_probe


pytestmark = [pytest.mark.live, pytest.mark.image]

ROOT = Path(__file__).resolve().parents[2]
# The image the cpu overlay deploys (`make image` builds that tag); IMAGE= runs another build.
IMAGE = os.environ.get("IMAGE") or PodSpec.cpu_overlay().container["image"]
# This module's host ports (the container's are the manifest's).
HOST_PORTS = {name: ports.port("image") + i for i, name in enumerate(("http", "grpc", "metrics", "openai"))}
REPORT = Path(os.environ.get("IMAGE_TEST_REPORT", ROOT / "build" / "image-test" / "report.json"))
PROMPT = "Hello from the image"


class Pod:
    """The running container and what the test measured of it."""

    def __init__(self, spec: PodSpec, name: str) -> None:
        self.spec, self.name = spec, name
        self.report: dict[str, object] = {"image": IMAGE}

    def host_port(self, name: str) -> int:
        return HOST_PORTS[name]

    def alive(self) -> bool:
        out = podman("inspect", "--format", "{{.State.Running}}", self.name, check=False)
        return out.stdout.strip() == "true"

    def exec(self, *cmd: str, check: bool = True) -> str:
        return podman("exec", self.name, *cmd, check=check).stdout

    def logs(self, tail: int | None = 6000) -> str:
        out = podman("logs", self.name, check=False)
        text = out.stdout + out.stderr
        return text if tail is None else text[-tail:]

    def tritonserver_pid(self) -> int | None:
        """The pid (inside the container) of the one tritonserver process; None between restarts.

        The Python backend forks each stub from tritonserver and then execs it: until the exec, the
        child's command line is still tritonserver's. So a process counts only where its parent is
        not a tritonserver too (CI once saw the server and such a child together, mid-restart).
        """
        script = (
            "import os\n"
            "def argv0(p):\n"
            "    try: return open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')[0]\n"
            "    except OSError: return b''\n"
            "def ppid(p):\n"
            "    try: return open(f'/proc/{p}/stat', 'rb').read().rsplit(b')', 1)[1].split()[1].decode()\n"
            "    except (OSError, IndexError): return ''\n"
            "servers = [p for p in filter(str.isdigit, os.listdir('/proc')) if argv0(p).endswith(b'/tritonserver')]\n"
            "for p in servers:\n"
            "    if ppid(p) not in servers: print(p)\n"
        )
        pids = self.exec("python3", "-c", script).split()
        assert len(pids) <= 1, f"more than one tritonserver in the container: {pids}"
        return int(pids[0]) if pids else None

    def write_report(self) -> None:
        REPORT.parent.mkdir(parents=True, exist_ok=True)
        REPORT.write_text(json.dumps(self.report, indent=2) + "\n")


@pytest.fixture(scope="module")
def pod():
    spec = PodSpec.cpu_overlay()
    if podman("image", "exists", IMAGE, check=False).returncode != 0:
        pytest.fail(f"no image {IMAGE}: `make image-test` builds it first (`make image`)")
    name = f"triton-renderer-image-test-{os.getpid()}"
    podman("rm", "--force", "--ignore", name)
    host_ports = {spec.ports[n]: HOST_PORTS[n] for n in HOST_PORTS}
    p = Pod(spec, name)
    size = podman("image", "inspect", IMAGE, "--format", "{{.Size}}").stdout.strip()
    p.report["image_size_mb"] = round(int(size) / 1e6)
    t0 = time.monotonic()
    podman("run", "--detach", "--name", name, *spec.run_options(host_ports), IMAGE, *spec.container["args"])
    try:
        startup = spec.probe("startupProbe")
        waited = wait_probe(startup, HOST_PORTS["http"], p.alive)
        if waited is None:
            pytest.fail(f"the startup probe never passed (running={p.alive()}):\n{p.logs()}")
        p.report["start_to_startup_probe_s"] = round(time.monotonic() - t0, 1)
        ready = wait_probe(spec.probe("readinessProbe"), HOST_PORTS["openai"], p.alive)
        if ready is None:
            pytest.fail(f"the readiness probe never passed:\n{p.logs()}")
        p.report["start_to_ready_s"] = round(time.monotonic() - t0, 1)
        yield p
    finally:
        p.write_report()
        podman("rm", "--force", "--time", "0", name, check=False)


def test_pid_1_is_the_launcher_as_the_pods_user_on_a_read_only_root(pod):
    argv = pod.exec("cat", "/proc/1/cmdline").split("\0")
    assert argv[1:4] == ["-m", "launcher", "serve"], argv
    status = dict(line.split(":\t", 1) for line in pod.exec("cat", "/proc/1/status").splitlines() if ":\t" in line)
    sec = pod.spec.pod["securityContext"]
    assert status["Uid"].split()[0] == str(sec["runAsUser"]) and status["Gid"].split()[0] == str(sec["runAsGroup"])
    assert status["CapEff"].strip() == "0000000000000000"  # capabilities: drop ALL
    assert status["NoNewPrivs"].strip() == "1"  # allowPrivilegeEscalation: false
    denied = podman("exec", pod.name, "touch", "/opt/renderer/written", check=False)
    assert denied.returncode != 0 and "Read-only file system" in denied.stderr, denied
    # Writable: exactly the manifest's volume mounts, at their size limits.
    mounts = {line.split()[1]: line.split() for line in pod.exec("cat", "/proc/mounts").splitlines()}
    for mount in pod.spec.container["volumeMounts"]:
        fields = mounts[mount["mountPath"]]
        assert fields[2] == "tmpfs" and "size=1048576k" in fields[3], fields
        pod.exec("touch", f"{mount['mountPath']}/written")
    # The launcher's generated repository went where the ConfigMap says, on the writable volume.
    assert "config.pbtxt" in pod.exec("ls", f"{pod.spec.env['BUILD_DIR']}/model_repository/tokenize")


def test_the_manifests_probes_pass(pod):
    assert pod.report["start_to_ready_s"] <= pod.spec.probe("startupProbe").period_s * 120
    for kind, port in (("startupProbe", "http"), ("readinessProbe", "openai"), ("livenessProbe", "http")):
        probe = pod.spec.probe(kind)
        assert probe.container_port == pod.spec.ports[port], kind
        assert probe.passes(pod.host_port(port)), kind
    conn = http.client.HTTPConnection("127.0.0.1", pod.host_port("metrics"), timeout=5)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    assert 'nv_inference_queue_duration_us{model="tokenize"' in body  # what the HPA's metric reads


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_renders_over_both_protocols(pod, protocol, hf_tokenizer):
    from client import RendererClient

    with RendererClient(f"127.0.0.1:{pod.host_port(protocol)}", protocol) as c:
        completion = c.render_completion(PROMPT)
        chat = c.render_chat([{"role": "user", "content": PROMPT}])
    assert completion.input_ids == hf_tokenizer(PROMPT).input_ids
    # vLLM's default for a chat request: add_generation_prompt=True.
    want = hf_tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True
    )
    assert chat.rendered_prompt == want
    assert chat.input_ids == hf_tokenizer(want, add_special_tokens=False).input_ids


def test_a_generation_over_both_protocols(pod, hf_tokenizer):
    from client import RendererClient

    outs = []
    for protocol in ("http", "grpc"):
        with RendererClient(f"127.0.0.1:{pod.host_port(protocol)}", protocol) as c:
            [whole] = c.generate("completion", prompt=PROMPT, max_tokens=8, sampling_params={"temperature": 0.0})
        outs.append(whole)
    assert 1 <= len(outs[0].output_ids) <= 8
    assert outs[0].output_ids == outs[1].output_ids and outs[0].text == outs[1].text  # greedy
    assert outs[0].text == hf_tokenizer.decode(outs[0].output_ids, skip_special_tokens=True)


def test_the_openai_front_on_its_port(pod, hf_tokenizer):
    from openai import OpenAI

    oai = OpenAI(base_url=f"http://127.0.0.1:{pod.host_port('openai')}/v1", api_key="unused", max_retries=0)
    [model] = oai.models.list().data
    r = oai.completions.create(model=model.id, prompt=PROMPT, max_tokens=8, temperature=0)
    assert r.usage.prompt_tokens == len(hf_tokenizer(PROMPT).input_ids) and r.usage.completion_tokens >= 1
    conn = http.client.HTTPConnection("127.0.0.1", pod.host_port("openai"), timeout=60)
    messages = [{"role": "user", "content": PROMPT}]
    conn.request("POST", "/v1/chat/completions/render", json.dumps({"model": model.id, "messages": messages}))
    resp = conn.getresponse()
    out = json.loads(resp.read())
    assert resp.status == 200, out
    assert (
        out["token_ids"]
        == hf_tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=True)[
            "input_ids"
        ]
    )


def test_a_sigkilled_tritonserver_is_restarted_inside_the_container(pod):
    before = pod.tritonserver_pid()
    assert before is not None, pod.logs()
    pid1 = podman("inspect", "--format", "{{.State.Pid}}", pod.name).stdout.strip()
    t0 = time.monotonic()
    pod.exec("bash", "-c", f"kill -KILL {before}")
    ready = pod.spec.probe("readinessProbe")
    deadline = time.monotonic() + 300
    while True:  # down first (the front asks the server), then back
        after = pod.tritonserver_pid() if pod.alive() else None
        if after not in (None, before) and ready.passes(pod.host_port("openai")):
            break
        assert pod.alive() and time.monotonic() < deadline, pod.logs()
        time.sleep(0.5)
    pod.report["sigkill_to_ready_again_s"] = round(time.monotonic() - t0, 1)
    # The same container (PID 1 never changed): the launcher restarted the server, not the runtime.
    assert podman("inspect", "--format", "{{.State.Pid}}", pod.name).stdout.strip() == pid1
    # The supervisor's own account: the death it saw and the restart it made.
    full = pod.logs(tail=None)
    assert f"tritonserver (pid {before})" in full and "restart 1 of tritonserver" in full, pod.logs()
    from client import RendererClient

    with RendererClient(f"127.0.0.1:{pod.host_port('grpc')}", "grpc") as c:
        assert c.render_completion(PROMPT).input_ids


def test_the_kubelets_stop_ends_everything_within_the_grace_period(pod):
    """Last: preStop's command, then SIGTERM with the grace period (``podman stop --time``)."""
    host_pids = podman("top", pod.name, "hpid").stdout.split()[1:]
    assert len(host_pids) >= 3, host_pids  # launcher, front, tritonserver and its stubs
    t0 = time.monotonic()
    pod.exec(*pod.spec.pre_stop)
    podman("stop", "--time", str(pod.spec.grace_s), pod.name, timeout=pod.spec.grace_s + 30)
    took = time.monotonic() - t0
    pod.report["stop_s"] = round(took, 1)
    state = podman("inspect", "--format", "{{.State.ExitCode}} {{.State.Status}}", pod.name).stdout.split()
    # Exit 0: PID 1 stopped its children and left by itself; a SIGKILL at the grace period is 137.
    assert state == ["0", "exited"], (state, pod.logs())
    assert took < pod.spec.grace_s, took
    left = [p for p in host_pids if Path(f"/proc/{p}").exists()]
    assert not left, left
