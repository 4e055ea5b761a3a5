"""docker/'s Kubernetes manifests rendered as ``kubectl apply -k`` renders them, and the pieces the
deployment tests read from them (the tools are pinned in requirements.txt and live in this venv's bin/).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml


ROOT = Path(__file__).resolve().parents[2]

DOCKER = ROOT / "docker"

K8S = DOCKER / "k8s"

OVERLAYS = {name: K8S / "overlays" / name for name in ("cpu", "gpu", "render")}

KUSTOMIZATIONS = {**OVERLAYS, "loadtest": K8S / "loadtest"}

VENV_BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = VENV_BIN / name
    assert path.exists(), f"{path} missing: it is pinned in requirements.txt; run `make venv`"
    return str(path)


def kustomize(folder: Path) -> list[dict]:
    out = subprocess.run([tool("kubectl"), "kustomize", str(folder)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


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
