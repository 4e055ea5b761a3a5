"""The cpu overlay's pod, run with podman the way the kubelet runs it: the container spec of the
rendered Deployment (user, read-only root filesystem, dropped capabilities, its ``emptyDir``
volumes and nothing else mounted, the ConfigMap and ``env`` as environment, its args) turned into
``podman run`` options, and its probes polled with the kubelet's rules (``httpGet``, period,
timeout, failure threshold; a status from 200 to 399 passes).

What differs from a cluster, and why: ports are published on host ports of the test's range (the
container's ports are the manifest's); both ``emptyDir`` volumes are tmpfs of their ``sizeLimit``
(the disk-backed one too, so the size holds); the ulimits are this machine's (it refuses
``setrlimit`` above them); no resource limits (podman's cgroupfs manager here sets none).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from manifests import OVERLAYS, kustomize, launcher_env, one


PODMAN = [shutil.which("podman") or "podman", "--runtime", "/usr/sbin/runc", "--cgroup-manager=cgroupfs"]

# These machines refuse setrlimit above their own limits (nproc 32768 in a container).
ULIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=30000:30000"]

# Kubernetes quantities podman's tmpfs size takes (the manifests use Gi).
_UNITS = {"Ki": "k", "Mi": "m", "Gi": "g"}


@dataclass(frozen=True)
class Probe:
    """One of the container's probes, as the kubelet runs an ``httpGet`` probe."""

    path: str
    """The ``httpGet`` path."""

    container_port: int
    """The container port the probe's named port resolves to."""

    period_s: float
    """``periodSeconds``."""

    timeout_s: float
    """``timeoutSeconds``."""

    failure_threshold: int
    """``failureThreshold``: this many failures in a row fail the probe."""

    def passes(self, host_port: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{host_port}{self.path}", timeout=self.timeout_s) as r:
                return 200 <= r.status < 400
        except (urllib.error.URLError, OSError):
            return False


@dataclass(frozen=True)
class PodSpec:
    """The parts of the cpu overlay's Deployment a container runtime acts on."""

    container: dict
    """The one container of the pod template."""

    pod: dict
    """The pod template's spec."""

    env: dict[str, str]
    """The ConfigMap's keys, then the container's own ``env``."""

    @classmethod
    def cpu_overlay(cls) -> "PodSpec":
        objs = kustomize(OVERLAYS["cpu"])
        pod = one(objs, "Deployment")["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        env = {**launcher_env(objs), **{e["name"]: e["value"] for e in container.get("env", [])}}
        return cls(container, pod, env)

    @property
    def ports(self) -> dict[str, int]:
        return {p["name"]: p["containerPort"] for p in self.container["ports"]}

    @property
    def grace_s(self) -> int:
        return self.pod["terminationGracePeriodSeconds"]

    @property
    def pre_stop(self) -> list[str]:
        return self.container["lifecycle"]["preStop"]["exec"]["command"]

    def probe(self, kind: str) -> Probe:
        p = self.container[kind]
        port = p["httpGet"]["port"]
        return Probe(
            p["httpGet"]["path"],
            self.ports[port] if isinstance(port, str) else port,
            p["periodSeconds"],
            p["timeoutSeconds"],
            p["failureThreshold"],
        )

    def run_options(self, host_ports: dict[int, int]) -> list[str]:
        """``podman run`` options for this container, its ports published as ``host_ports`` says."""
        sec, ctx = self.pod["securityContext"], self.container["securityContext"]
        opts = ["--user", f"{sec['runAsUser']}:{sec['runAsGroup']}", "--group-add", str(sec["fsGroup"])]
        if ctx.get("readOnlyRootFilesystem"):
            # Only the volumes below are writable, as in the pod (podman adds tmpfs on /tmp,
            # /run and /var/tmp to a read-only container unless told not to).
            opts += ["--read-only", "--read-only-tmpfs=false"]
        opts += [f"--cap-drop={c}" for c in ctx["capabilities"]["drop"]]
        if ctx.get("allowPrivilegeEscalation") is False:
            opts += ["--security-opt=no-new-privileges"]
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        for mount in self.container["volumeMounts"]:
            empty_dir = volumes[mount["name"]]["emptyDir"]  # the pod mounts nothing else
            size = empty_dir["sizeLimit"]
            size = size[:-2] + _UNITS[size[-2:]] if size[-2:] in _UNITS else size
            opts += ["--mount", f"type=tmpfs,destination={mount['mountPath']},tmpfs-size={size},tmpfs-mode=1777"]
        for name, value in self.env.items():
            opts += ["--env", f"{name}={value}"]
        for container_port, host_port in host_ports.items():
            opts += ["--publish", f"127.0.0.1:{host_port}:{container_port}"]
        return opts + ULIMITS


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: rc={out.returncode}\n{out.stdout}\n{out.stderr}")
    return out


def wait_probe(probe: Probe, host_port: int, alive: Callable[[], bool], poll_s: float = 0.5) -> float | None:
    """Seconds until the probe first passes, or None if it has not within the kubelet's budget
    (``periodSeconds`` x ``failureThreshold``) or the container ended. Polled every ``poll_s``
    rather than every period, so the start-to-ready time is measured, not rounded up to 5 s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < probe.period_s * probe.failure_threshold and alive():
        if probe.passes(host_port):
            return time.monotonic() - t0
        time.sleep(poll_s)
    return None
