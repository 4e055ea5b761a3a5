"""``benchmarks.footprint``'s accounting: every process below the root is found, named as the
report names it (a stub by its model, a Python module by its name), and weighed by PSS."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks import footprint


def test_a_process_tree_is_weighed_process_by_process():
    code = "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while len(footprint.process_tree(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = footprint.process_tree(parent.pid)
        assert tree[0] == parent.pid and len(tree) == 2
        fp = footprint.footprint(parent.pid)
        assert fp["processes"] == 2
        (weights,) = fp["per_process_mb"].values()
        assert len(weights) == 2 and all(w > 1 for w in weights)
        assert abs(fp["total_mb"] - sum(weights)) < 0.2
    finally:
        parent.kill()
        parent.wait()


def test_a_stub_is_named_by_its_model(tmp_path, monkeypatch):
    cmdline = tmp_path / "cmdline"
    cmdline.write_bytes(b"/x/triton_python_backend_stub\0/build/model_repository/tokenize/1/model.py\0region\0")
    real = footprint.Path

    def fake(p: str):
        return cmdline if p.endswith("/cmdline") else real(p)

    monkeypatch.setattr(footprint, "Path", fake)
    assert footprint.process_name(123) == "tokenize"
    cmdline.write_bytes(b"/venv/bin/python\0-m\0launcher.supervisor\0--x\0")
    assert footprint.process_name(123) == "launcher.supervisor"
