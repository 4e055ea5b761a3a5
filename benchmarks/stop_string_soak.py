"""Soak the stop-string path of ``completion``, where ``detokenize`` once crashed (docs/RELIABILITY.md).

Each iteration sends the requests of ``tests/live/test_completion_live.py``'s stop-string test: a greedy
completion, the same one stopped at its second word, and that one streamed, alternating HTTP and
gRPC. It stops at the first stub crash the server log records. ``--busy N`` runs N busy loops
beside it, the load under which the crash came most often.

    HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.stop_string_soak --iterations 120 --busy 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "The capital of France is"
PORT = 24100


def _busy() -> None:
    while True:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=120)
    ap.add_argument("--busy", type=int, default=0, help="busy loops to run beside the server")
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build" / "stop-string-soak")
    a = ap.parse_args(argv)

    from benchmarks.run import server_settings
    from client import RendererClient, RequestError
    from launcher import cli as launch

    shutil.rmtree(a.build_dir, ignore_errors=True)  # a fresh log: only this run's crashes count
    s = server_settings(
        build_dir=str(a.build_dir),
        models="completion",
        http_port=PORT,
        grpc_port=PORT + 1,
        metrics_port=PORT + 2,
        tokenize_instances=1,
    )
    if launch.start(s) != 0:
        print(f"server did not start; see {s.log_file}", file=sys.stderr)
        return 1
    hogs = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(a.busy)]
    for h in hogs:
        h.start()
    start, outcome = time.monotonic(), "no crash"
    try:
        for i in range(a.iterations):
            protocol = "http" if i % 2 == 0 else "grpc"
            port = s.http_port if protocol == "http" else s.grpc_port
            try:
                with RendererClient(f"{s.host}:{port}", protocol, timeout_s=20) as c:
                    [whole] = c.generate("completion", prompt=PROMPT, max_tokens=24, stream=False)
                    stop = {"stop": [whole.text.strip().split()[1]]}
                    for stream in (False, True):
                        list(
                            c.generate("completion", prompt=PROMPT, max_tokens=24, stream=stream, sampling_params=stop)
                        )
            except RequestError as e:
                outcome = f"error at iteration {i}: {e.kind} {e.message[:100]}"
            if "Fatal Python error" in Path(s.log_file).read_text(errors="replace"):
                outcome = f"stub crash at iteration {i} ({s.log_file})"
            if outcome != "no crash":
                break
    finally:
        for h in hogs:
            h.terminate()
        launch.stop(s)
    print(f"{outcome}; {i + 1} iterations in {time.monotonic() - start:.0f} s, {a.busy} busy loops")
    return 0 if outcome == "no crash" else 1


if __name__ == "__main__":
    sys.exit(main())
