"""The client installs with pip into a fresh environment and the README's Python example runs from
any directory against the session's server.

The install is a full one (no ``--no-deps``, no ``--system-site-packages``): the point is that
``pyproject.toml`` declares everything the client needs, and from the pip cache it takes seconds.
The sources are copied out of the checkout first, so the build's ``build/`` and ``*.egg-info``
never land in the working tree another session is using.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
# What the distribution is built from (pyproject.toml's packages and readme); nothing else travels.
SOURCES = ("pyproject.toml", "README.md", "client", "renderer")
README_ADDRESS = "127.0.0.1:8001"


def readme_example() -> str:
    """The README's one Python block that uses ``RendererClient``."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    found = [b for b in blocks if "from client import RendererClient" in b]
    assert len(found) == 1, f"expected one README example of RendererClient, found {len(found)}"
    assert README_ADDRESS in found[0], "the example no longer talks to the default gRPC address"
    return found[0]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (not this one's site-packages) with the project pip-installed into it."""
    base = tmp_path_factory.mktemp("client-install")
    src = base / "src"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, f"pip install failed:\n{pip.stdout}\n{pip.stderr}"
    return venv


def run_outside(venv: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``args`` with the venv's interpreter, from ``cwd``, with no path back into the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_readme_example_runs_from_anywhere(installed, server, http_client, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(readme_example().replace(README_ADDRESS, f"{server.host}:{server.grpc_port}"))
    where = run_outside(installed, ["python", "-c", "import client; print(client.__file__)"], tmp_path)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed), f"client imported from {where.stdout}"

    ran = run_outside(installed, ["python", str(script)], tmp_path)
    assert ran.returncode == 0, f"README example failed:\n{ran.stdout}\n{ran.stderr}"
    expected = http_client.render_completion("Hello world", tokenize_params={"truncate_prompt_tokens": 8})
    first, _, generated = ran.stdout.partition("\n")
    assert first == f"{expected.input_ids} {expected.rendered_prompt}"
    assert generated.strip(), "the streamed generation printed nothing"


def test_console_script(installed, server, tmp_path):
    ran = run_outside(
        installed,
        ["triton-renderer-client", "--url", f"{server.host}:{server.http_port}", "render", "Hello world"],
        tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    assert '"rendered_prompt": "Hello world"' in ran.stdout
