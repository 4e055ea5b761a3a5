"""CPU time per request of each process in the server: the numbers a sizing plan multiplies.

Throughput against instance counts cannot show how the renderer grows with cores on a 2-core
machine (every configuration saturates the same two cores). What carries over to a bigger node is
what one request costs in CPU, per process: tritonserver itself (HTTP/gRPC front ends, ensemble
scheduling, tensor copies to and from the stubs) and each stage's Python stub, each of which is
single-threaded (one core at most per instance). This starts a server with one instance per stage,
saturates each ensemble with perf_analyzer (gRPC), and divides each process's CPU time
(``utime + stime`` from ``/proc``) by the requests the ensemble completed (Triton's
``nv_inference_request_success``) over the same interval.

    python -m benchmarks.cpu_cost [--seconds 8] [--concurrency 8]

Writes ``benchmarks/results/cpu_cost.json``; docs/PERFORMANCE.md ("Sizing") turns it into
instance and replica counts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import make_inputs
from benchmarks import perf_analyzer as pa
from benchmarks.layout import MAIN_INPUTS, ROOT, WORK
from benchmarks.overload_signal import scrape

PORT = 19350  # HTTP; gRPC +1, metrics +2
OUT = ROOT / "benchmarks" / "results" / "cpu_cost.json"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def processes(server_pid: int) -> dict[str, list[int]]:
    """{"tritonserver": [pid], "<model>": [stub pids]}."""
    from launcher.watchdog import stubs_of

    out: dict[str, list[int]] = {"tritonserver": [server_pid]}
    for pid, stub in stubs_of(server_pid).items():
        out.setdefault(stub.model, []).append(pid)
    return out


def measure(s: Any, server_pid: int, model: str, input_name: str, conc: int, seconds: float) -> dict[str, Any]:
    procs = processes(server_pid)
    window = ["--measurement-mode", "time_windows", "--measurement-interval", str(int(seconds * 1000 / 3))]
    window += ["--stability-percentage", "1000", "--max-trials", "3"]
    before = scrape(s.metrics_port)
    cpu0 = {k: sum(cpu_seconds(p) for p in pids) for k, pids in procs.items()}
    t0 = time.monotonic()
    r = pa.run(model, f"127.0.0.1:{s.grpc_port}", "grpc", make_inputs.path_of(input_name), conc, window=window)
    t1 = time.monotonic()
    cpu1 = {k: sum(cpu_seconds(p) for p in pids) for k, pids in procs.items()}
    after = scrape(s.metrics_port)
    key = ("nv_inference_request_success", model)
    n = after.get(key, 0) - before.get(key, 0)
    us = {k: round((cpu1[k] - cpu0[k]) / n * 1e6, 1) for k in procs if cpu1[k] - cpu0[k] > 0}
    return {
        "model": model,
        "input": input_name,
        "concurrency": conc,
        "requests": int(n),
        "requests_per_s": round(r.throughput, 1),
        "p50_ms": r.p50_ms,
        "wall_s": round(t1 - t0, 1),
        "cpu_us_per_request": us,
        "cpu_us_per_request_total": round(sum(us.values()), 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)

    from benchmarks.run import server_settings
    from launcher import cli as launch

    s = server_settings(
        models="render_completion,render_chat",
        build_dir=str(WORK / "cpu-cost-server"),
        http_port=PORT,
        grpc_port=PORT + 1,
        metrics_port=PORT + 2,
        tokenize_instances=1,
        chat_render_instances=1,
    )
    if launch.start(s) != 0:
        print(f"server did not start; see {s.log_file}", file=sys.stderr)
        return 1
    try:
        pid = launch.running_pid(s)
        assert pid is not None
        rows = [measure(s, pid, m, name, a.concurrency, a.seconds) for m, name in MAIN_INPUTS.items()]
    finally:
        launch.stop(s)
    for r in rows:
        print(f"{r['model']:18} {r['requests_per_s']:8.1f} req/s  CPU us/request {r['cpu_us_per_request']}")
    result = {
        "measured": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "instances": {"tokenize": 1, "chat_render": 1},
        "rows": rows,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
