"""Which signal tells an autoscaler how overloaded a renderer pod is: CPU or Triton's queue time.

Starts a server (``render_chat`` and ``render_completion``, the default instance counts) and drives
``render_chat`` with perf_analyzer at rising concurrency, past the point where throughput stops
growing. Around each step it reads, from the server's own Prometheus metrics and ``/proc``:

- throughput and p50 latency (perf_analyzer);
- queue time per request of each stage (``nv_inference_queue_duration_us`` over
  ``nv_inference_request_success``, differenced over the step): what the HPA's Pods metric is
  (``docker/k8s/metrics/``);
- pending requests (``nv_inference_pending_request_count``, read mid-step);
- the CPU the server's process tree used (tritonserver and its stubs, ``utime + stime``), in cores.

Overload is offered load over capacity; past saturation CPU is pinned at the cores the pod has and
stays there however deep the overload, while queue time grows with it. The HPA scales by
``current * metric / target``, so a pinned metric can only ask for ``100% / target`` more pods per
step; queue time asks for as many as the overload needs.

    python -m benchmarks.overload_signal [--seconds 5] [--concurrency 1,2,4,8,16,32,64]

Writes ``benchmarks/results/overload_signal.json``; ``make bench``'s report shows it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks import make_inputs
from benchmarks import perf_analyzer as pa
from benchmarks.layout import ROOT, WORK

PORT = 19340  # HTTP; gRPC +1, metrics +2: apart from make bench's servers
STAGES = ("chat_render", "tokenize", "render_chat")
_SAMPLE = re.compile(r'^(nv_[a-z_]+)\{model="([^"]+)",version="[^"]*"\} ([0-9.e+]+)$', re.M)
OUT = ROOT / "benchmarks" / "results" / "overload_signal.json"


def scrape(metrics_port: int) -> dict[tuple[str, str], float]:
    """Triton's per-model counters and gauges: {(metric, model): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:  # noqa: S310 - loopback
        text = r.read().decode()
    return {(m, model): float(v) for m, model, v in _SAMPLE.findall(text)}


def tree_cpu_seconds(root_pid: int) -> float:
    """utime + stime of ``root_pid`` and every live descendant (the stubs), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, float] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(d.name))
        stats[int(d.name)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [root_pid]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def per_request_queue_us(before: dict, after: dict, model: str) -> float | None:
    n = after.get(("nv_inference_request_success", model), 0) - before.get(("nv_inference_request_success", model), 0)
    q = after.get(("nv_inference_queue_duration_us", model), 0) - before.get(
        ("nv_inference_queue_duration_us", model), 0
    )
    return round(q / n, 1) if n else None


def step(s: Any, server_pid: int, conc: int, seconds: float) -> dict[str, Any]:
    data = make_inputs.path_of("chat_mix")
    pending: list[float] = []

    def sample_pending() -> None:  # the gauge, read a few times while the step runs
        time.sleep(seconds / 2)
        try:
            pending.append(scrape(s.metrics_port).get(("nv_inference_pending_request_count", "chat_render"), 0.0))
        except OSError:
            pass

    before, cpu0, t0 = scrape(s.metrics_port), tree_cpu_seconds(server_pid), time.monotonic()
    sampler = threading.Thread(target=sample_pending, daemon=True)
    sampler.start()
    # Three windows (perf_analyzer's fewest for its stability check), any spread accepted: the step
    # is measured, not searched for a steady state.
    window = ["--measurement-mode", "time_windows", "--measurement-interval", str(int(seconds * 1000 / 3))]
    window += ["--stability-percentage", "1000", "--max-trials", "3"]
    row: dict[str, Any] = {"concurrency": conc}
    try:
        r = pa.run(
            "render_chat",
            f"127.0.0.1:{s.grpc_port}",
            "grpc",
            data,
            conc,
            window=window,
            timeout_s=120,
            log=WORK / "overload_pa.log",
        )
        row.update(requests_per_s=round(r.throughput, 1), p50_ms=r.p50_ms)
    except RuntimeError as e:
        row["error"] = str(e)[-600:]
    sampler.join()
    after, cpu1, t1 = scrape(s.metrics_port), tree_cpu_seconds(server_pid), time.monotonic()
    row["server_cpu_cores"] = round((cpu1 - cpu0) / (t1 - t0), 2)
    row["pending_chat_render"] = pending[0] if pending else None
    for model in STAGES:
        row[f"queue_us_per_request_{model}"] = per_request_queue_us(before, after, model)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)

    from benchmarks.servers import server_settings
    from launcher import cli as launch

    s = server_settings(
        models="render_completion,render_chat",
        build_dir=str(WORK / "overload-server"),
        http_port=PORT,
        grpc_port=PORT + 1,
        metrics_port=PORT + 2,
    )
    if launch.start(s) != 0:
        print(f"server did not start; see {s.log_file}", file=sys.stderr)
        return 1
    try:
        pid = launch.running_pid(s)
        assert pid is not None
        rows = []
        for c in [int(x) for x in a.concurrency.split(",")]:
            row = step(s, pid, c, a.seconds)
            rows.append(row)
            print(
                f"c={c:<3} {row.get('requests_per_s', 'FAILED')!s:>8} req/s  p50 {row.get('p50_ms', '-')!s:>7} ms  "
                f"cpu {row['server_cpu_cores']:.2f} cores  pending {row['pending_chat_render']}  queue/request "
                f"chat_render {row['queue_us_per_request_chat_render']} us  tokenize {row['queue_us_per_request_tokenize']} us"
            )
    finally:
        launch.stop(s)
    result = {
        "measured": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "seconds_per_step": a.seconds,
        "instances": {"chat_render": s.resolved_chat_render_instances, "tokenize": s.resolved_tokenize_instances},
        "rows": rows,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.out.relative_to(ROOT) if a.out.is_relative_to(ROOT) else a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
