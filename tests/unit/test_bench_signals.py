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
        # Clock ticks are whole hundredths: 1.15 - 0.9 is 0.2499... in floats, so compare in ticks.
        children = overload_signal.tree_cpu_seconds(os.getpid()) - cpu_cost.cpu_seconds(os.getpid())
        assert round(children, 2) >= 0.25
    finally:
        child.kill()
        child.wait()


def _row(server: str, model: str, tokenize: float, total: float, rps: float) -> dict:
    return {
        "server": server,
        "model": model,
        "requests_per_s": rps,
        "cpu_us_per_request": {"tritonserver": total - tokenize, "tokenize": tokenize},
        "cpu_us_per_request_total": total,
    }


def test_cpu_cost_summary_takes_medians_per_server_and_ours_over_the_floor() -> None:
    rows = [
        _row("ours", "render_chat", 200.0, 800.0, 1500.0),
        _row("floor", "render_chat", 100.0, 500.0, 3000.0),
        _row("ours", "render_chat", 260.0, 900.0, 1400.0),
        _row("floor", "render_chat", 120.0, 520.0, 3100.0),
        _row("ours", "render_chat", 230.0, 860.0, 1450.0),
        _row("floor", "render_chat", 110.0, 510.0, 2900.0),
        _row("ours", "render_completion", 150.0, 600.0, 2000.0),
    ]
    ours, completion, floor = cpu_cost.summary(rows)  # by server, then model, as first seen
    assert (ours["server"], ours["model"], ours["rounds"]) == ("ours", "render_chat", 3)
    assert ours["cpu_us_per_request"] == {"tritonserver": 630.0, "tokenize": 230.0}
    assert ours["cpu_us_per_request_total"] == 860.0 and ours["cpu_us_per_request_total_range"] == [800.0, 900.0]
    assert floor["cpu_us_per_request_total"] == 510.0 and floor["requests_per_s"] == 3000.0
    assert ours["of_floor_cpu"] == round(860 / 510, 2) and "of_floor_cpu" not in floor
    assert completion["model"] == "render_completion" and "of_floor_cpu" not in completion  # no floor row
