"""Can a decoupled Python model read a request's input after ``execute`` has returned?

Hypothesis tested: in Triton 2.51 (Python backend r24.10) the backend frees a request's input
shared-memory blocks when the stub's ``execute`` returns, so a thread that reads
``get_input_tensor_by_name(request, "X").as_numpy()`` later, or forwards that tensor to a BLS
call, reads freed memory. The script serves three decoupled models that answer on a thread
``--delay`` seconds after ``execute`` returned:

``late``      reads the input on the thread and echoes it;
``early``     copies the input inside ``execute`` (the control);
``late_bls``  forwards the request's own ``X`` tensor object to the BLS model ``echo`` on the thread.

It streams ``--requests`` random int32 arrays (length 1..512) to each from ``--threads`` gRPC
streams and counts responses whose ``Y`` differs from the ``X`` sent. The stub also records where
each input's numpy data lies: inside the /dev/shm pool mapping or not, and whether its address is
handed again to another request while the first is still unanswered (what a freed block would show)
or only after it was answered (the allocator does reuse). It starts and stops its own
``tritonserver`` (``launcher.triton_home()``) and prints a JSON summary.

Result on this host (r24.10): no mismatches and no crash. The shared-memory blocks are reference
counted across the two processes (``AllocatedShmOwnership``): the stub's tensor holds one
reference, so the server's ``InferRequest`` going away does not free them; and ``as_numpy()`` of a
request input is a private copy (pybind11's ``py::array`` without a base copies), never a view of
/dev/shm.

    .venv/bin/python benchmarks/late_input_read.py --requests 2000 --threads 4 --delay 0.05
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from launcher.server import ensure_python_stub, server_env, triton_home  # noqa: E402

MODEL_PY = """
import json, threading, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"]).get("parameters", {})
        self.mode = params["MODE"]["string_value"]
        self.delay = float(params.get("DELAY", {}).get("string_value", "0.05"))
        # Addresses of the input blocks of requests still answered, and of those already answered:
        # a block freed at execute's return would show up again while its request is still live.
        self.lock, self.live, self.done = threading.Lock(), {}, set()
        self.stats = {"inputs": 0, "data_inside_dev_shm_mapping": 0,
                      "addr_of_live_request_reused": 0, "addr_of_answered_request_reused": 0}

    @staticmethod
    def in_shm(addr):
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "/dev/shm/" in line:
                    lo, hi = (int(v, 16) for v in line.split()[0].split("-"))
                    if lo <= addr < hi:
                        return True
        return False

    def finalize(self):
        if self.mode != "echo":
            print("LATE_INPUT_STATS " + json.dumps({"model": self.mode, **self.stats}), flush=True)

    def execute(self, requests):
        if self.mode == "echo":
            return [pb_utils.InferenceResponse([pb_utils.Tensor(
                "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy().copy())]) for r in requests]
        for r in requests:
            addr = pb_utils.get_input_tensor_by_name(r, "X").as_numpy().ctypes.data
            with self.lock:
                self.stats["inputs"] += 1
                self.stats["data_inside_dev_shm_mapping"] += self.in_shm(addr)
                self.stats["addr_of_live_request_reused"] += addr in self.live
                self.stats["addr_of_answered_request_reused"] += addr in self.done
                self.live[addr] = self.live.get(addr, 0) + 1
            early = None
            if self.mode == "early":
                early = np.array(pb_utils.get_input_tensor_by_name(r, "X").as_numpy(), copy=True)
            threading.Thread(target=self._answer, args=(r, r.get_response_sender(), early, addr), daemon=True).start()
        return None

    def _answer(self, request, sender, early, addr):
        time.sleep(self.delay)
        try:
            if early is not None:
                y = early
            elif self.mode == "late_bls":
                x = pb_utils.get_input_tensor_by_name(request, "X")
                resp = pb_utils.InferenceRequest(model_name="echo", requested_output_names=["Y"], inputs=[x]).exec()
                if resp.has_error():
                    raise RuntimeError("BLS: " + resp.error().message())
                y = pb_utils.get_output_tensor_by_name(resp, "Y").as_numpy()
            else:
                y = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            out = pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array(y, dtype=np.int32, copy=True))])
        except Exception as e:  # noqa: BLE001
            out = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{type(e).__name__}: {e}"))
        with self.lock:
            self.live[addr] -= 1
            if not self.live[addr]:
                del self.live[addr]
            self.done.add(addr)
        sender.send(out, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
{policy}
input [ {{ name: "X" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_INT32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "MODE" value: {{ string_value: "{name}" }} }}
parameters {{ key: "DELAY" value: {{ string_value: "{delay}" }} }}
"""

MODELS = ("late", "early", "late_bls")
CRASH_MARKS = ("Signal (11)", "Signal (6)", "Segmentation", "double free", "corrupted", "Stub process", "unhealthy")


def write_repository(repo: Path, delay: float) -> None:
    for name in (*MODELS, "echo"):
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        (repo / name / "1" / "model.py").write_text(MODEL_PY)
        policy = "" if name == "echo" else "model_transaction_policy { decoupled: true }"
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, policy=policy, delay=delay))


def server_cmd(repo: Path, port: int, prefix: str) -> list[str]:
    home, host = triton_home(), "127.0.0.1"
    cpu_only = "--pinned-memory-pool-byte-size=0 --cuda-memory-pool-byte-size=0:0 --allow-gpu-metrics=false"
    return (
        [str(home / "bin" / "tritonserver"), f"--model-repository={repo}", f"--backend-directory={home / 'backends'}"]
        + [
            f"--{kind}-{what}={value}"
            for kind, p in (("http", port), ("grpc", port + 1), ("metrics", port + 2))
            for what, value in (("address", host), ("port", p))
        ]
        + [
            "--backend-config=python,shm-default-byte-size=4194304",
            f"--backend-config=python,shm-region-prefix-name={prefix}",
            *cpu_only.split(),
        ]
    )


def wait_ready(port: int, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"tritonserver exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("tritonserver not ready in time")


def stream_worker(url: str, model: str, n: int, seed: int, window: int, out: dict, lock: threading.Lock) -> None:
    import tritonclient.grpc as grpcclient

    rng = np.random.default_rng(seed)
    sent: dict[str, np.ndarray] = {}
    done: queue.Queue = queue.Queue()
    slots = threading.Semaphore(window)

    def callback(result, error) -> None:  # noqa: ANN001
        done.put((result, error))
        slots.release()

    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=callback)
    for i in range(n):
        slots.acquire()
        x = rng.integers(-(2**31), 2**31 - 1, size=int(rng.integers(1, 513)), dtype=np.int32)
        rid = f"{seed}-{i}"
        sent[rid] = x
        inp = grpcclient.InferInput("X", list(x.shape), "INT32")
        inp.set_data_from_numpy(x)
        client.async_stream_infer(model, [inp], request_id=rid, outputs=[grpcclient.InferRequestedOutput("Y")])
    stats = {"ok": 0, "mismatch": 0, "error": 0, "missing": 0}
    errors: list[str] = []
    example = None
    for _ in range(n):
        try:
            result, error = done.get(timeout=60)
        except queue.Empty:
            stats["missing"] += 1
            continue
        if error is not None:
            stats["error"] += 1
            errors.append(str(error)[:200])
            continue
        x = sent[result.get_response().id]
        y = result.as_numpy("Y")
        if y is not None and y.shape == x.shape and np.array_equal(x, y):
            stats["ok"] += 1
        else:
            stats["mismatch"] += 1
            if example is None:
                same = int(np.sum(x[: len(y)] == y[: len(x)])) if y is not None else 0
                got = None if y is None else y[:6].tolist()
                example = {"id": result.get_response().id, "len_sent": len(x), "len_got": None if y is None else len(y),
                           "equal_elements": same, "expected": x[:6].tolist(), "got": got}  # fmt: skip
    client.stop_stream()
    client.close()
    with lock:
        for k, v in stats.items():
            out[k] = out.get(k, 0) + v
        out.setdefault("errors", []).extend(errors[: 3 - len(out.get("errors", []))])
        if example is not None and "example" not in out:
            out["example"] = example


def run_model(url: str, model: str, requests: int, threads: int, window: int) -> dict:
    out: dict = {}
    lock = threading.Lock()
    per = [requests // threads + (1 if i < requests % threads else 0) for i in range(threads)]
    ts = [
        threading.Thread(
            target=stream_worker, args=(url, model, per[i], 1000 * (MODELS.index(model) + 1) + i, window, out, lock)
        )
        for i in range(threads)
    ]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out["seconds"] = round(time.monotonic() - t0, 2)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000, help="requests per model")
    ap.add_argument("--threads", type=int, default=4, help="concurrent gRPC streams")
    ap.add_argument("--window", type=int, default=16, help="requests in flight per stream")
    ap.add_argument("--delay", type=float, default=0.05, help="seconds the answer thread sleeps")
    ap.add_argument("--port", type=int, default=18900, help="HTTP port; gRPC and metrics take the next two")
    ap.add_argument("--workdir", default="", help="keep the repository and server log here (default: a temp dir)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    args = ap.parse_args()

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="late_input_read_"))
    repo = work / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    write_repository(repo, args.delay)
    ensure_python_stub()
    prefix = f"uafdemo{os.getpid()}_"
    log_path = work / "server.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            server_cmd(repo, args.port, prefix),
            env=server_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    summary: dict = {"server_pid": proc.pid, "log": str(log_path), "delay_s": args.delay,
                     "requests_per_model": args.requests, "threads": args.threads, "models": {}}  # fmt: skip
    try:
        wait_ready(args.port, proc)
        for model in args.models.split(","):
            summary["models"][model] = run_model(
                f"127.0.0.1:{args.port + 1}", model, args.requests, args.threads, args.window
            )
            summary["models"][model]["server_alive_after"] = proc.poll() is None
    finally:
        summary["server_alive_at_end"] = proc.poll() is None
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        summary["server_returncode"] = proc.returncode
        for leftover in Path("/dev/shm").glob(f"{prefix}*"):
            leftover.unlink(missing_ok=True)
        text = log_path.read_text(errors="replace")
        for ln in text.splitlines():
            if ln.startswith("LATE_INPUT_STATS "):
                st = json.loads(ln.split(" ", 1)[1])
                summary["models"].setdefault(st.pop("model"), {})["stub_input_addresses"] = st
        summary["log_crash_lines"] = [ln[:200] for ln in text.splitlines() if any(k in ln for k in CRASH_MARKS)][:10]
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
