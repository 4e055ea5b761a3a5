"""CPU time per request of each process in the server: the numbers a sizing plan multiplies.

Throughput against instance counts cannot show how the renderer grows with cores on a 2-core
machine (every configuration saturates the same two cores). What carries over to a bigger node is
what one request costs in CPU, per process: tritonserver itself (HTTP/gRPC front ends, ensemble
scheduling, tensor copies to and from the stubs) and each stage's Python stub, each of which is
single-threaded (one core at most per instance). This starts a server with one instance per stage,
saturates each ensemble with perf_analyzer (gRPC), and divides each process's CPU time
(``utime + stime`` from ``/proc``) by the requests the ensemble completed (Triton's
``nv_inference_request_success``) over the same interval.

    python -m benchmarks.cpu_cost [--seconds 8] [--concurrency 8] [--floor] [--rounds 1]

``--floor`` also starts the Triton floor (``benchmarks/floor``: the same ensembles, configs and
instances with stand-in ``tokenize`` and ``chat_render`` stubs that do no rendering work) beside
ours, measures the two in alternating rounds (an idle server costs no CPU), and reports each
process's median CPU per request over the rounds and ours over the floor's: the part of a request's
CPU that is the renderer's own work, process by process.

Writes ``benchmarks/results/cpu_cost.json``; docs/PERFORMANCE.md ("Sizing") turns it into
instance and replica counts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per server and model: each process's median CPU per request over the rounds (with the
    total's range), and where the floor ran, ours over the floor's."""
    out: list[dict[str, Any]] = []
    for server in dict.fromkeys(r["server"] for r in rows):
        for model in dict.fromkeys(r["model"] for r in rows):
            mine = [r for r in rows if r["server"] == server and r["model"] == model]
            if not mine:
                continue
            procs = dict.fromkeys(k for r in mine for k in r["cpu_us_per_request"])
            totals = [r["cpu_us_per_request_total"] for r in mine]
            out.append(
                {
                    "server": server,
                    "model": model,
                    "rounds": len(mine),
                    "requests_per_s": statistics.median(r["requests_per_s"] for r in mine),
                    "cpu_us_per_request": {
                        k: round(statistics.median(r["cpu_us_per_request"].get(k, 0.0) for r in mine), 1) for k in procs
                    },
                    "cpu_us_per_request_total": round(statistics.median(totals), 1),
                    "cpu_us_per_request_total_range": [min(totals), max(totals)],
                }
            )
    floor = {r["model"]: r for r in out if r["server"] == "floor"}
    for r in out:
        if r["server"] == "ours" and r["model"] in floor:
            r["of_floor_cpu"] = round(r["cpu_us_per_request_total"] / floor[r["model"]]["cpu_us_per_request_total"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--floor", action="store_true", help="measure the floor beside ours, in alternating rounds")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)

    from benchmarks.servers import floor_templates, server_settings, start_on
    from launcher import cli as launch
    from launcher import repository

    def settings(name: str, port: int) -> Any:
        return server_settings(
            models="render_completion,render_chat",
            build_dir=str(WORK / name),
            http_port=port,
            grpc_port=port + 1,
            metrics_port=port + 2,
            tokenize_instances=1,
            chat_render_instances=1,
        )

    servers = {"ours": (settings("cpu-cost-server", PORT), repository.TEMPLATES)}
    if a.floor:
        servers["floor"] = (settings("cpu-cost-floor", PORT + 10), floor_templates())
    started: dict[str, tuple[Any, int]] = {}
    rows: list[dict[str, Any]] = []
    try:
        for name, (s, templates) in servers.items():
            if not start_on(s, templates):
                print(f"{name} server did not start; see {s.log_file}", file=sys.stderr)
                return 1
            pid = launch.running_pid(s)
            assert pid is not None
            started[name] = (s, pid)
        for i in range(a.rounds):
            order = list(started) if i % 2 == 0 else list(reversed(started))
            for name in order:
                s, pid = started[name]
                for m, input_name in MAIN_INPUTS.items():
                    rows.append(
                        {"server": name, "round": i, **measure(s, pid, m, input_name, a.concurrency, a.seconds)}
                    )
    finally:
        for s, _ in started.values():
            launch.stop(s)
    for r in rows:
        print(
            f"{r['server']:6} {r['model']:18} {r['requests_per_s']:8.1f} req/s  CPU us/request {r['cpu_us_per_request']}"
        )
    result = {
        "measured": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": "python -m benchmarks.cpu_cost " + " ".join(argv if argv is not None else sys.argv[1:]),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "instances": {"tokenize": 1, "chat_render": 1},
        "summary": summary(rows),
        "rows": rows,
    }
    for r in result["summary"]:
        ratio = f"  {r['of_floor_cpu']}x the floor's CPU" if "of_floor_cpu" in r else ""
        print(f"{r['server']:6} {r['model']:18} median CPU us/request {r['cpu_us_per_request']}{ratio}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
