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


def test_the_report_judges_the_render_tier_targets():
    """The report's verdicts follow the figures (memory, start, throughput against vllm-rs and the
    floor, p50 against the floor), each one able to go either way."""
    from benchmarks.report import sections

    def server(name, total, start, per):
        fp = {"total_mb": total, "processes": len(per), "per_process_mb": per}
        return {"server": name, "start_s": start, "restart_after_sigkill_s": start + 1, "after_load": fp}

    def row(model, side, c, rps, p50):
        return {"model": model, "side": side, "target": side, "concurrency": c, "requests_per_s": rps, "p50_ms": p50}

    res = {
        "footprint": {
            "cpus": 2,
            "servers": [
                server("render", 276.0, 2.6, {"tokenize": [90.3], "chat_render": [69.8]}),
                server("default", 1271.6, 5.6, {"tokenize": [84.6], "detokenize": [59.4], "llm": [867.2]}),
            ],
        },
        "head_to_head": {
            "rows": [
                row("render_chat", "ours", 8, 1600.0, None),
                row("render_chat", "vllm_rs", 8, 4000.0, None),
                row("render_chat", "floor", 8, 1800.0, None),
                row("render_chat", "ours", 1, 800.0, 1.10),
                row("render_chat", "floor", 1, 900.0, 0.95),
                row("render_chat", "vllm_rs", 1, 1700.0, 0.5),
            ]
        },
    }
    text = "\n".join(sections.lean_targets_section(res))
    verdict = {
        line.split(" | ")[0].lstrip("| "): line.rsplit(" | ", 1)[-1].rstrip(" |")
        for line in text.splitlines()
        if line.startswith("| ")
    }
    assert verdict["render-only server PSS after load <= 300 MB"] == "met"
    assert verdict["heaviest text stage (tokenize) <= 80 MB"] == "**not met**"
    assert verdict["render_chat throughput / vllm-rs >= 1.0"] == "**not met**"
    assert verdict["render_chat throughput / the Triton floor >= 0.85"] == "met"
    assert verdict["render_chat p50 at c=1 within 0.1 ms of the floor (vllm-rs 0.50 ms)"] == "**not met**"
    assert "design's limit" in text
