"""Valid and invalid generation requests together, on every protocol, until the count runs out:
the traffic that crashed tritonserver within seconds (SIGSEGV in its ensemble scheduler;
docs/RELIABILITY.md "Ensembles run one step at a time").

Each client thread sends, in turn, a request that one stage must refuse and a valid one, each over
a channel drawn from a seeded generator: Triton's HTTP ``generate`` and ``generate_stream``, a
tritonclient gRPC stream (some cancelled after their first response), and the OpenAI front through
the ``openai`` package, streamed or not (some streams dropped after their first chunk). The invalid
requests are refused by ``chat_render``, ``tokenize``, ``generation_params``, ``ensemble_params``
or the front itself; a valid one must answer exactly what the same request answered alone before
the load began. At the end tritonserver must be the process it was, its log must show no signal,
and the supervisor must count no restart.

    HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.mixed_traffic --requests 20000

Exit status 0 when every check held. ``--report`` writes the counts as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PORT = 24300
MODELS = "completion,chat,ensemble"
CHANNELS = ("http_generate", "http_stream", "grpc_stream", "front")

GOOD_CHAT = '[{"role": "user", "content": "What is the capital of France?"}]'
GOOD_PROMPT = "The capital of France is"


@dataclass(frozen=True)
class Case:
    """One request of the mix, as the JSON body of Triton's HTTP generate endpoints."""

    name: str
    """What it is, for the report: ``stage: what is wrong`` for an invalid one."""
    model: str
    """The ensemble it goes to."""
    body: dict[str, Any]
    """Inputs by name (``stream`` is set per channel)."""
    error: str | None = None
    """A piece of the 400's message; None for a valid request."""
    front: bool = True
    """Whether it goes through the OpenAI front too (which has no field for some inputs)."""


# What each stage refuses (the step whose error it is, as it stood in the ensemble before the
# chain: chat_render and tokenize ran beside generation_params / ensemble_params).
INVALID = (
    Case("chat_render: no messages", "chat", {"messages": "[]", "max_tokens": 4}, "empty conversation"),
    Case(
        "chat_render: both continue and add_generation_prompt",
        "chat",
        {
            "messages": GOOD_CHAT,
            "chat_params": '{"add_generation_prompt": true, "continue_final_message": true}',
            "max_tokens": 4,
        },
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
    ),
    Case("tokenize: empty prompt", "completion", {"prompt": "", "max_tokens": 4}, "prompt"),
    Case(
        "tokenize: bad truncation side",
        "completion",
        {"prompt": GOOD_PROMPT, "tokenize_params": '{"truncation_side": "middle"}', "max_tokens": 4},
        "`truncation_side` must be either 'left' or 'right'.",
        front=False,  # the front, like vLLM's, has no truncation_side field and ignores it
    ),
    Case("tokenize: empty text_input", "ensemble", {"text_input": "", "max_tokens": 4}, "prompt"),
    Case("generation_params: max_tokens 0", "completion", {"prompt": GOOD_PROMPT, "max_tokens": 0}, "max_tokens"),
    Case(
        "generation_params: negative temperature",
        "chat",
        {"messages": GOOD_CHAT, "max_tokens": 4, "sampling_params": '{"temperature": -1}'},
        "temperature",
    ),
    Case(
        "ensemble_params: beam search",
        "ensemble",
        {"text_input": GOOD_PROMPT, "max_tokens": 4, "beam_width": 2},
        "beam_width",
    ),
)
VALID = (
    Case("completion", "completion", {"prompt": GOOD_PROMPT, "max_tokens": 4}),
    Case("chat", "chat", {"messages": GOOD_CHAT, "max_tokens": 4}),
    Case("ensemble", "ensemble", {"text_input": GOOD_PROMPT, "max_tokens": 4}),
)
# The TensorRT-LLM front has no OpenAI route; the front takes chat and completion only.
FRONT_MODELS = ("chat", "completion")


@dataclass
class Outcome:
    """One request's result: ``ok`` (valid, as answered alone), ``refused`` (invalid, a 400 with
    its message), ``cancelled`` (a stream the client ended early), or ``wrong`` with a detail."""

    kind: str
    detail: str = ""


@dataclass
class Report:
    requests: int = 0
    outcomes: Counter = field(default_factory=Counter)
    by_channel: Counter = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)
    seconds: float = 0.0
    server_pid_before: int | None = None
    server_pid_after: int | None = None
    restarts: int | None = None
    signals_in_log: list[str] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    """Memory (MB of RSS) and thread counts of tritonserver and each stub, every ``sample_s``."""
    attacks: dict[str, Any] | None = None
    """What the attackers beside the traffic saw (``benchmarks/attacks.py``), when they ran."""

    @property
    def passed(self) -> bool:
        return (
            not self.wrong
            and not (self.attacks or {}).get("wrong")
            and self.server_pid_before is not None
            and self.server_pid_before == self.server_pid_after
            and not self.restarts
            and not self.signals_in_log
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "seconds": round(self.seconds, 1),
            "outcomes": dict(self.outcomes),
            "by_channel": dict(self.by_channel),
            "wrong": self.wrong[:50],
            "wrong_count": len(self.wrong),
            "server_pid_before": self.server_pid_before,
            "server_pid_after": self.server_pid_after,
            "restarts": self.restarts,
            "signals_in_log": self.signals_in_log,
            "memory_mb": memory_summary(self.samples),
            "memory_total_mb": memory_series(self.samples),
            "attacks": self.attacks,
            "passed": self.passed,
        }


class Sender:
    """Sends one case over one channel and says how it went."""

    def __init__(
        self,
        host: str,
        http_port: int,
        grpc_port: int,
        openai_port: int,
        timeout_s: float = 60.0,
        grpc_error_header: bool = False,
    ) -> None:
        self.grpc_headers = {"triton_grpc_error": "true"} if grpc_error_header else None
        self.http = f"http://{host}:{http_port}"
        self.grpc_url = f"{host}:{grpc_port}"
        self.front = f"http://{host}:{openai_port}/v1" if openai_port else None
        self.timeout_s = timeout_s
        self._local = threading.local()

    # --- clients, one per thread ------------------------------------------------------------
    def _grpc(self) -> Any:
        if getattr(self._local, "grpc", None) is None:
            import tritonclient.grpc as grpcclient

            self._local.grpc = grpcclient.InferenceServerClient(self.grpc_url)
        return self._local.grpc

    def _openai(self) -> Any:
        if getattr(self._local, "openai", None) is None:
            import openai

            self._local.openai = openai.OpenAI(
                base_url=self.front, api_key="unused", max_retries=0, timeout=self.timeout_s
            )
        return self._local.openai

    def _model_id(self) -> str:
        if getattr(self, "_served", None) is None:
            self._served = self._openai().models.list().data[0].id
        return self._served

    def close(self) -> None:
        for name in ("grpc", "openai"):
            c = getattr(self._local, name, None)
            if c is not None:
                c.close()

    # --- channels ---------------------------------------------------------------------------
    def send(self, channel: str, case: Case, drop_early: bool = False, stream: bool = False) -> tuple[int | str, str]:
        """(status, text): status 200 / a 4xx or 5xx code / a gRPC code name / "cancelled";
        text the generated text or the error's message. ``stream`` picks the front's streamed
        form (the other channels' form is the channel); ``drop_early`` ends a stream after its
        first piece of text."""
        if channel == "front":
            return self._front(case, drop_early, stream)
        return getattr(self, f"_{channel}")(case, drop_early)

    def _http_generate(self, case: Case, drop_early: bool) -> tuple[int | str, str]:
        body = {**case.body, "stream": False}
        status, raw = self._post(f"/v2/models/{case.model}/generate", body)
        if status != 200:
            return status, _error_message(raw)
        out = json.loads(raw)
        return 200, _text(out.get("text_output", ""))

    def _http_stream(self, case: Case, drop_early: bool) -> tuple[int | str, str]:
        body = {**case.body, "stream": True}
        req = urllib.request.Request(  # noqa: S310 (http:// only)
            f"{self.http}/v2/models/{case.model}/generate_stream",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            resp = urllib.request.urlopen(req, timeout=self.timeout_s)  # noqa: S310 (http:// only)
        except urllib.error.HTTPError as e:
            return e.code, _error_message(e.read())
        text = []
        with resp:
            for line in resp:
                if not line.startswith(b"data:"):
                    continue
                event = json.loads(line[5:])
                if "error" in event:
                    return "stream error", event["error"]
                text.append(_text(event.get("text_output", "")))
                if drop_early:
                    return "cancelled", ""  # leaving the with-block closes the connection mid-stream
        return 200, "".join(text)

    def _grpc_stream(self, case: Case, drop_early: bool) -> tuple[int | str, str]:
        import queue

        import tritonclient.grpc as grpcclient

        client = self._grpc()
        inputs = []
        for name, value in {**case.body, "stream": True}.items():
            arr = _tensor(value)
            t = grpcclient.InferInput(name, list(arr.shape), _dtype(arr))
            t.set_data_from_numpy(arr)
            inputs.append(t)
        q: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: q.put((result, error)), headers=self.grpc_headers)
        ended = False
        try:
            client.async_stream_infer(case.model, inputs, enable_empty_final_response=True)
            text = []
            while True:
                try:
                    result, error = q.get(timeout=self.timeout_s)
                except queue.Empty:
                    return "timeout", f"no response within {self.timeout_s} s"
                if error is not None:
                    ended = True
                    return error.status() or "no code", error.message() or ""
                out = result.as_numpy("text_output")
                if out is not None:
                    text.append(_text(out.reshape(-1)[0]))
                if result.get_response().parameters["triton_final_response"].bool_param:
                    ended = True
                    return 200, "".join(text)
                if drop_early and out is not None:
                    return "cancelled", ""
        finally:
            client.stop_stream(cancel_requests=not ended)

    def _front(self, case: Case, drop_early: bool, stream: bool) -> tuple[int | str, str]:
        import openai

        client = self._openai()
        stream = stream or drop_early
        b = case.body
        common: dict[str, Any] = {"model": self._model_id(), "max_tokens": b["max_tokens"], "temperature": 0.0}
        if "sampling_params" in b:
            common.update(json.loads(b["sampling_params"]))
        if "chat_params" in b:
            common["extra_body"] = json.loads(b["chat_params"])
        try:
            if case.model == "chat":
                call: Callable[..., Any] = client.chat.completions.create
                args = {"messages": json.loads(b["messages"]), **common}
            else:
                call = client.completions.create
                args = {"prompt": b["prompt"], **common}
                if "tokenize_params" in b:
                    args.setdefault("extra_body", {}).update(json.loads(b["tokenize_params"]))
            if not stream:
                r = call(**args)
                c = r.choices[0]
                return 200, (c.message.content or "") if case.model == "chat" else c.text
            text = []
            with call(stream=True, **args) as chunks:
                for chunk in chunks:
                    if not chunk.choices:
                        continue
                    c = chunk.choices[0]
                    text.append((c.delta.content or "") if case.model == "chat" else c.text)
                    if drop_early:
                        return "cancelled", ""
            return 200, "".join(text)
        except openai.APIStatusError as e:
            return e.status_code, str(e.message)
        except openai.APIConnectionError as e:
            return "connection error", repr(e)

    def _post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        req = urllib.request.Request(  # noqa: S310 (http:// only)
            self.http + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:  # noqa: S310 (http:// only)
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()


def _text(value: Any) -> str:
    if isinstance(value, list):
        value = value[0] if value else ""
    return value.decode() if isinstance(value, bytes) else str(value)


def _error_message(raw: bytes) -> str:
    """The message of an error body: Triton's JSON, or the server-sent event it is on a stream."""
    raw = raw.strip()
    if raw.startswith(b"data:"):
        raw = raw[5:]
    try:
        out = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")
    err = out.get("error", out)
    return err.get("message", str(err)) if isinstance(err, dict) else str(err)


def _tensor(value: Any) -> np.ndarray:
    if isinstance(value, bool):
        return np.array([[value]], np.bool_)
    if isinstance(value, int):
        return np.array([[value]], np.int32)
    if isinstance(value, float):
        return np.array([[value]], np.float32)
    return np.array([[str(value).encode()]], np.object_)


def _dtype(arr: np.ndarray) -> str:
    return {np.bool_: "BOOL", np.int32: "INT32", np.float32: "FP32"}.get(arr.dtype.type, "BYTES")


def is_client_error(status: int | str, message: str) -> bool:
    """A 4xx, gRPC's INVALID_ARGUMENT, or an error a stream brought without a code that reads as
    a model's refusal (``client.stream_error_kind``): never a 5xx, INTERNAL or UNKNOWN."""
    from client import stream_error_kind

    if status == "no code":
        return stream_error_kind(message) == "client"
    return (isinstance(status, int) and 400 <= status < 500) or status == "StatusCode.INVALID_ARGUMENT"


def cases_for(channel: str, pool: tuple[Case, ...]) -> tuple[Case, ...]:
    return tuple(c for c in pool if channel != "front" or (c.front and c.model in FRONT_MODELS))


def baselines(sender: Sender, channels: tuple[str, ...]) -> dict[tuple[str, str], str]:
    """Each valid case's answer on each channel, sent alone before the load (greedy, so the
    answer under load must be the same)."""
    out = {}
    for channel in channels:
        for case in cases_for(channel, VALID):
            for stream in (False, True) if channel == "front" else (False,):
                status, text = sender.send(channel, case, stream=stream)
                if status != 200:
                    raise RuntimeError(f"{channel} {case.name}: {status} {text} before any load")
                out[(channel, case.name, stream)] = text
    return out


def classify(case: Case, status: int | str, text: str, expected: str | None) -> Outcome:
    if status == "cancelled":
        return Outcome("cancelled")
    if case.error is None:
        if status != 200:
            return Outcome("wrong", f"valid request answered {status}: {text[:200]}")
        if text != expected:
            return Outcome("wrong", f"valid request answered {text!r}, alone {expected!r}")
        return Outcome("ok")
    if not is_client_error(status, text):
        return Outcome("wrong", f"invalid request answered {status}: {text[:200]}")
    if case.error not in text:
        return Outcome("wrong", f"400 without {case.error!r}: {text[:200]}")
    return Outcome("refused")


def drive(
    sender: Sender,
    requests: int,
    seconds: float,
    threads: int = 4,
    seed: int = 0,
    channels: tuple[str, ...] = CHANNELS,
    drop_rate: float = 0.1,
    kinds: tuple[str, ...] = ("invalid", "valid"),
    server_alive: Callable[[], bool] = lambda: True,
) -> Report:
    """Send up to ``requests`` (within ``seconds``) from ``threads`` clients, an invalid and a
    valid request in turn on each; the report of what came back (the server checks are the
    caller's). Stops early once ``server_alive`` says the server is gone."""
    expected = baselines(sender, channels)
    report = Report()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    left = [requests]

    def worker(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        k = 0
        try:
            while time.monotonic() < deadline:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                channel = rng.choice(channels)
                kind = kinds[k % len(kinds)]
                case = rng.choice(cases_for(channel, INVALID if kind == "invalid" else VALID))
                drop = case.error is None and channel != "http_generate" and rng.random() < drop_rate
                stream = channel == "front" and rng.random() < 0.5
                k += 1
                try:
                    status, text = sender.send(channel, case, drop_early=drop, stream=stream)
                except Exception as e:  # noqa: BLE001 - a transport failure is an outcome too
                    status, text = "exception", repr(e)
                outcome = classify(case, status, text, expected.get((channel, case.name, stream)))
                with lock:
                    report.requests += 1
                    report.outcomes[outcome.kind] += 1
                    report.by_channel[channel] += 1
                    if outcome.kind == "wrong":
                        report.wrong.append(f"{channel} / {case.name}: {outcome.detail}")
                if outcome.kind == "wrong" and not server_alive():
                    with lock:
                        left[0] = 0  # the server died: what follows would only count its absence
                    return
        finally:
            sender.close()

    start = time.monotonic()
    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    report.seconds = time.monotonic() - start
    return report


def signals_in(log: Path, offset: int) -> list[str]:
    """Lines of the server log past ``offset`` that record a signal (a native crash of the server
    or of a stub)."""
    if not log.exists():
        return []
    with log.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    return [ln for ln in lines if "Signal (" in ln or "exited unexpectedly" in ln]


def _status(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def sample(server_pid: int) -> dict[str, Any]:
    """RSS (MB) and threads of the server and each stub now (a stub by model and pid)."""
    from launcher.watchdog import stubs_of

    row: dict[str, Any] = {"t": round(time.time(), 1), "server_mb": (_status(server_pid, "VmRSS") or 0) / 1024}
    for pid, stub in sorted(stubs_of(server_pid).items()):
        rss, threads = _status(pid, "VmRSS"), _status(pid, "Threads")
        if rss is not None:
            row[f"{stub.model}/{pid}"] = {"mb": round(rss / 1024, 1), "threads": threads}
    return row


def memory_series(samples: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(seconds since the first sample, RSS of the server and its stubs together, MB) of each sample."""
    if not samples:
        return []
    t0 = samples[0]["t"]
    return [
        (round(row["t"] - t0), round(sum(v if k == "server_mb" else v["mb"] for k, v in row.items() if k != "t")))
        for row in samples
    ]


def memory_summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """First, last and largest RSS of each process over the run, and its most threads."""
    out: dict[str, Any] = {}
    for row in samples:
        for name, v in row.items():
            if name == "t":
                continue
            mb, threads = (v, None) if name == "server_mb" else (v["mb"], v["threads"])
            s = out.setdefault(name, {"first": mb, "max": mb, "max_threads": threads})
            s.update(last=mb, max=max(s["max"], mb))
            if threads is not None:
                s["max_threads"] = max(s["max_threads"] or 0, threads)
    return out


def check_server(settings: Any, sender: Sender, run: Callable[[], Report], sample_s: float = 30.0) -> Report:
    """``run`` with the server watched: its pid before and after, restarts, signals in its log,
    and its and its stubs' memory and threads every ``sample_s``."""
    from launcher import cli as launch

    log = Path(settings.log_file)
    offset = log.stat().st_size if log.exists() else 0
    state = launch.supervisor_state(settings)
    restarts_before = state.restarts if state else 0
    pid_before = launch.running_pid(settings)
    samples: list[dict[str, Any]] = []
    done = threading.Event()

    def sampler() -> None:
        while pid_before is not None and not done.is_set():
            samples.append(sample(pid_before))
            done.wait(sample_s)

    watcher = threading.Thread(target=sampler, daemon=True)
    watcher.start()
    try:
        report = run()
    finally:
        done.set()
        watcher.join()
    if pid_before is not None and launch.running_pid(settings) == pid_before:
        samples.append(sample(pid_before))
    report.samples = samples
    report.server_pid_before = pid_before
    report.server_pid_after = launch.running_pid(settings)
    state = launch.supervisor_state(settings)
    report.restarts = (state.restarts if state else 0) - restarts_before
    report.signals_in_log = signals_in(log, offset) + signals_in(Path(settings.build_dir) / "supervisor.log", 0)
    return report


def settings(build_dir: Path, port: int, models: str = MODELS) -> Any:
    """A server as ``make serve`` runs it (the deployment defaults: no batching delay, which is
    when a stage answers soonest), with the front, on ``port`` to ``port + 3``, in a fresh build
    folder (only this run's log is read)."""
    import shutil

    from benchmarks.servers import server_settings

    shutil.rmtree(build_dir, ignore_errors=True)
    return server_settings(
        build_dir=str(build_dir),
        models=models,
        http_port=port,
        grpc_port=port + 1,
        metrics_port=port + 2,
        openai_port=port + 3,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--seconds", type=float, default=3600.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--channels", default=",".join(CHANNELS))
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build" / "mixed-traffic")
    ap.add_argument("--report", type=Path, default=None)
    ap.add_argument("--drop-rate", type=float, default=0.1, help="share of valid streams the client ends early")
    ap.add_argument("--kinds", default="invalid,valid", help="the turn of requests each client sends")
    ap.add_argument(
        "--grpc-error-header",
        action="store_true",
        help="gRPC streams with triton_grpc_error, as this project's clients no longer send it (crashes 2.51)",
    )
    ap.add_argument(
        "--attacks",
        action="store_true",
        help="the attacks of benchmarks/attacks.py beside the traffic (oversized, slow headers, bad JSON, abandoned)",
    )
    a = ap.parse_args(argv)

    from launcher import cli as launch

    # The attacks' /infer requests go to render_completion.
    s = settings(a.build_dir, PORT, MODELS + ",render_completion" if a.attacks else MODELS)
    if launch.start(s) != 0:
        print(f"server did not start; see {s.log_file}", file=sys.stderr)
        return 1
    sender = Sender(s.host, s.http_port, s.grpc_port, s.openai_port, grpc_error_header=a.grpc_error_header)
    channels = tuple(a.channels.split(","))
    kinds = tuple(a.kinds.split(","))

    pid = launch.running_pid(s)

    def traffic() -> Report:
        alive = lambda: launch.running_pid(s) == pid  # noqa: E731
        return drive(sender, a.requests, a.seconds, a.threads, a.seed, channels, a.drop_rate, kinds, alive)

    def run() -> Report:
        if not a.attacks:
            return traffic()
        from benchmarks import attacks

        report, seen = attacks.run_beside(s, traffic)
        report.attacks = seen.as_json()
        return report

    try:
        report = check_server(s, sender, run)
    finally:
        launch.stop(s)
    out = report.as_json()
    print(json.dumps(out, indent=2))
    if a.report:
        a.report.parent.mkdir(parents=True, exist_ok=True)
        a.report.write_text(json.dumps(out, indent=2) + "\n")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
