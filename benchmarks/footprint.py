"""What a server weighs and how fast it starts: the numbers a pod's requests and probes follow.

    python -m benchmarks.footprint                 # both servers, results to build/bench/footprint.json
    python -m benchmarks.footprint --only render   # the render-only server alone

For each server (render-only: ``MODELS=render_chat,render_completion``, what a render pod runs;
default: everything ``make serve`` loads), one after the other on this machine:

- start: ``launcher start`` until Triton is ready (the launcher's own wait), with the tokenizer
  record already built (a pod's image builds it once; the first start on a new model adds a few
  seconds for it);
- memory: PSS summed over every process of the server (supervisor, watchdog, front, tritonserver,
  every stub), after a warm-up (a few requests of each kind) and again after a load (render
  requests from 8 client threads for ``--load-s`` seconds); PSS, not RSS, so that shared
  libraries count once across processes;
- restart: tritonserver killed with SIGKILL, the time until the supervisor has it ready again.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.layout import BUILD, ROOT

WORK = BUILD / "bench" / "footprint-server"
PORTS = (19350, 19351, 19352, 19353)
SERVERS = {
    "render": "render_chat,render_completion",
    "default": "",
}


def children() -> dict[int, list[int]]:
    """Parent pid -> child pids of every live process."""
    out: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        out.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return out


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    kids, out = children(), [root]
    for pid in out:
        out += kids.get(pid, [])
    return out


def pss_mb(pid: int) -> float | None:
    """Proportional set size of one process, in MB (None if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def process_name(pid: int) -> str:
    """A stub's model name, else the program (and module) it runs."""
    try:
        args = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return "?"
    model = next((a for a in args if a.endswith(".py") and "/1/" in a), None)
    if model:
        return Path(model).parent.parent.name
    if args and args[0].startswith("nginx: "):  # nginx writes its role over its argv
        return "nginx " + args[0].split()[1]
    if len(args) > 2 and args[1] == "-m":
        return args[2]
    return Path(args[0]).name if args else "?"


def footprint(root: int) -> dict[str, Any]:
    """PSS of every process under ``root``, grouped by name, and the total."""
    per: dict[str, list[float]] = {}
    for pid in process_tree(root):
        mb = pss_mb(pid)
        if mb is not None:
            per.setdefault(process_name(pid), []).append(round(mb, 1))
    return {
        "total_mb": round(sum(sum(v) for v in per.values()), 1),
        "processes": sum(len(v) for v in per.values()),
        "per_process_mb": per,
    }


def _send(client: Any, kind: str, request: dict[str, Any]) -> None:
    if kind == "chat":
        client.render_chat(request["messages"], chat_params=request["chat_params"])
    else:
        client.render_completion(request["prompt"])


def drive(grpc_url: str, seconds: float, threads: int = 8, generate: bool = False) -> int:
    """Render requests (chats and completions of the bench inputs) from ``threads`` clients for
    ``seconds``; with ``generate``, a short generation per thread too. Returns the requests sent."""
    from benchmarks import make_inputs
    from client import RendererClient

    work = [("chat", r) for r in make_inputs.load("chat_mix")] + [
        ("completion", r) for r in make_inputs.load("completion_mix")
    ]
    sent = [0] * threads
    end = time.monotonic() + seconds

    def one(k: int) -> None:
        with RendererClient(grpc_url, "grpc") as c:
            if generate:
                list(c.generate("completion", prompt="The capital of France is", max_tokens=4))
            i = k
            while True:
                kind, req = work[i % len(work)]
                _send(c, kind, req)
                sent[k] += 1
                i += threads
                if time.monotonic() >= end:
                    return

    pool = [threading.Thread(target=one, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(sent)


def measure(name: str, models: str, load_s: float) -> dict[str, Any]:
    """Start, weigh, load, weigh, kill and time the restart of one server."""
    from launcher import cli as launch
    from launcher.settings import Settings

    s = replace(
        Settings.from_env(),
        models=models,
        build_dir=str(WORK / name),
        http_port=PORTS[0],
        grpc_port=PORTS[1],
        metrics_port=PORTS[2],
        openai_port=PORTS[3],
    )
    launch.stop(s)
    # The tokenizer record and the models are built once, outside the timed start (as in an image).
    from launcher import repository

    repository.prepare(s)
    t0 = time.monotonic()
    if launch.start(s) != 0:
        raise RuntimeError(f"{name} server did not start; see {s.log_file}")
    start_s = time.monotonic() - t0
    try:
        root = int(s.supervisor_pid_file.read_text())
        grpc = f"{s.host}:{s.grpc_port}"
        drive(grpc, 2.0, threads=2, generate=not models)
        time.sleep(1.0)
        warm = footprint(root)
        sent = drive(grpc, load_s, generate=not models)
        time.sleep(1.0)
        loaded = footprint(root)
        restart_s = time_restart(s)
    finally:
        launch.stop(s)
    return {
        "server": name,
        "models": models or "all (make serve)",
        "start_s": round(start_s, 2),
        "restart_after_sigkill_s": restart_s,
        "after_warmup": warm,
        "after_load": loaded,
        "load_requests": sent,
        "load_s": load_s,
    }


def time_restart(s: Any, timeout_s: float = 120.0) -> float | None:
    """SIGKILL tritonserver and wait until the supervisor has a new one ready."""
    from launcher.watchdog import server_ready

    old = int(s.pid_file.read_text())
    t0 = time.monotonic()
    os.kill(old, signal.SIGKILL)
    while time.monotonic() - t0 < timeout_s:
        time.sleep(0.1)
        try:
            pid = int(s.pid_file.read_text())
        except (OSError, ValueError):
            continue
        if pid != old and server_ready(s.http_url):
            return round(time.monotonic() - t0, 2)
    return None


def run(only: str | None = None, load_s: float = 15.0) -> dict[str, Any]:
    names = [only] if only else list(SERVERS)
    return {"cpus": os.cpu_count(), "servers": [measure(n, SERVERS[n], load_s) for n in names]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=sorted(SERVERS))
    ap.add_argument("--load-s", type=float, default=15.0)
    ap.add_argument("--out", type=Path, default=BUILD / "bench" / "footprint.json")
    a = ap.parse_args(argv)
    res = run(a.only, a.load_s)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    for r in res["servers"]:
        print(
            f"{r['server']}: start {r['start_s']} s, restart {r['restart_after_sigkill_s']} s, "
            f"PSS {r['after_warmup']['total_mb']} MB warm, {r['after_load']['total_mb']} MB after "
            f"{r['load_requests']} requests; per process {r['after_load']['per_process_mb']}"
        )
    print(f"written to {os.path.relpath(a.out, ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
