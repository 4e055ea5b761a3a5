"""The autoscaling-signal and CPU-cost benchmarks' bookkeeping (no server): reading Triton's
Prometheus text, differencing counters per request, and a process tree's CPU time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks import cpu_cost, overload_signal

METRICS = """# HELP nv_inference_request_success Number of successful inference requests
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="chat_render",version="1"} 120
nv_inference_request_success{model="tokenize",version="1"} 240
nv_inference_queue_duration_us{model="chat_render",version="1"} 60000
nv_inference_queue_duration_us{model="tokenize",version="1"} 1.2e+05
nv_inference_pending_request_count{model="chat_render",version="1"} 3
nv_gpu_utilization{gpu_uuid="GPU-1"} 0.5
"""


def test_metrics_text_is_read_per_model(monkeypatch) -> None:
    class Response:
        def __enter__(self):  # noqa: ANN204
            return self

        def __exit__(self, *a: object) -> None:
            pass

        def read(self) -> bytes:
            return METRICS.encode()

    monkeypatch.setattr(overload_signal.urllib.request, "urlopen", lambda *a, **k: Response())
    m = overload_signal.scrape(1)
    assert m[("nv_inference_queue_duration_us", "tokenize")] == 120000.0
    assert m[("nv_inference_pending_request_count", "chat_render")] == 3.0
    assert not [k for k in m if k[0] == "nv_gpu_utilization"]  # no model label: not a stage metric


def test_queue_time_per_request_differences_the_counters() -> None:
    before = {
        ("nv_inference_request_success", "tokenize"): 100.0,
        ("nv_inference_queue_duration_us", "tokenize"): 5000.0,
    }
    after = {
        ("nv_inference_request_success", "tokenize"): 300.0,
        ("nv_inference_queue_duration_us", "tokenize"): 45000.0,
    }
    assert overload_signal.per_request_queue_us(before, after, "tokenize") == 200.0
    assert overload_signal.per_request_queue_us(before, before, "tokenize") is None  # no request: no figure


def test_process_tree_cpu_counts_children() -> None:
    # A child that burns CPU: the tree's time must include it, the parent's own time alone must not.
    code = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass\ntime.sleep(5)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while cpu_cost.cpu_seconds(child.pid) < 0.25 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert overload_signal.tree_cpu_seconds(os.getpid()) - cpu_cost.cpu_seconds(os.getpid()) >= 0.25
    finally:
        child.kill()
        child.wait()
