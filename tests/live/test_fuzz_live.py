"""Live fuzz: thousands of malformed or random requests against every client-facing model.

Every response must be a success or a client error (HTTP 4xx, gRPC INVALID_ARGUMENT and kin:
``RequestError.kind == "client"``) with a message; an internal error (500, gRPC INTERNAL or
UNKNOWN) or an error without a status fails the run however good its message; no stub process
may die or restart; the server stays ready throughout and its memory stays bounded. Requests go to
loopback only, and the run is bounded in count (FUZZ_REQUESTS, default 5000) and time.
"""

from __future__ import annotations

import json
import os
import random
import string
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

# Every test here talks to a real tritonserver.
pytestmark = pytest.mark.live

N_REQUESTS = int(os.environ.get("FUZZ_REQUESTS", 5000))
TIME_BUDGET_S = float(os.environ.get("FUZZ_SECONDS", 600))
RENDER_MODELS = ["render_completion", "render_chat", "render_encoder_decoder"]
GENERATE_MODELS = ["completion", "chat", "encoder_decoder_completion"]


def tree_pids(root: int) -> dict[int, tuple[int, str]]:
    """The server and every process under it, each with its parent and command line."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(text[text.rindex(")") + 2 :].split()[1])
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [root]
    while todo:
        p = todo.pop()
        out[p] = (parents.get(p, 0), describe(p))
        todo += children.get(p, [])
    return out


def is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] == "Z"


def describe(pid: int) -> str:
    """A process's command line, cut short (what a failure message needs to name it)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "(exited)"
    return " ".join(a.decode(errors="replace") for a in argv)[:300]


@dataclass(frozen=True)
class ServerProcesses:
    """The processes under a tritonserver, by role."""

    stubs: frozenset[int]
    """The Python backend stubs (the server's children): one per model instance."""

    template_workers: dict[int, int]
    """Request-template worker pid -> the chat_render stub that owns it. A worker is replaced by
    design after a request over its limits, so only their owners and count must hold."""

    others: dict[int, str]
    """Anything else under the server, with its command line: there should be nothing."""

    exited: frozenset[int] = frozenset()
    """Children that have exited and that the server never reaped (zombies): a stub that crashed
    before this snapshot (Triton 2.51 does not wait for it). The fuzz may add none."""

    @classmethod
    def of(cls, server_pid: int, settle_s: float = 10.0) -> "ServerProcesses":
        """A snapshot; a process neither stub nor worker (a fork not yet exec'd, a short-lived
        helper) gets up to ``settle_s`` to go before it counts."""
        deadline = time.monotonic() + settle_s
        while True:
            tree = tree_pids(server_pid)
            stubs = frozenset(p for p, (pp, argv) in tree.items() if pp == server_pid and "python_backend_stub" in argv)
            workers = {p: pp for p, (pp, argv) in tree.items() if pp in stubs and "template_worker" in argv}
            rest = {p: argv for p, (_, argv) in tree.items() if p != server_pid and p not in stubs and p not in workers}
            exited = frozenset(p for p in rest if is_zombie(p))
            others = {p: argv for p, argv in rest.items() if p not in exited}
            if not others or time.monotonic() > deadline:
                return cls(stubs, workers, others, exited)
            time.sleep(0.2)

    @property
    def pids(self) -> set[int]:
        return set(self.stubs) | set(self.template_workers) | set(self.others)


def rss_mb(pids) -> float:
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def random_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31, -(2**63), 10**30, 7])
    if kind == 3:
        return rng.choice([0.5, -1e308, 1e-9, 3.0])
    if kind == 4:
        return "".join(rng.choice(string.printable + "中🦩\u0000") for _ in range(rng.randrange(12)))
    if kind in (5, 6):
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = [
        "role",
        "content",
        "type",
        "text",
        "truncate_prompt_tokens",
        "add_generation_prompt",
        "chat_template",
        "tools",
        "max_total_tokens",
        "image_url",
        "url",
        "x",
    ]
    return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randrange(4))}


def random_bytes(rng: random.Random) -> bytes:
    choice = rng.randrange(6)
    if choice == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
    if choice == 1:
        return json.dumps(random_json(rng)).encode()
    if choice == 2:
        return b"{" * rng.randrange(1, 5000)  # deep nesting
    if choice == 3:
        return ("x" * rng.randrange(0, 200_000)).encode()
    if choice == 4:
        return json.dumps([{"role": "user", "content": random_json(rng)}]).encode()
    return "".join(rng.choice(string.ascii_letters + " ") for _ in range(rng.randrange(300))).encode()


INPUTS = {
    "render_completion": ["prompt", "prompt_token_ids", "prompt_embeds", "tokenize_params", "cache_salt"],
    "render_chat": ["messages", "chat_params", "tokenize_params", "cache_salt"],
    "render_encoder_decoder": [
        "encoder_prompt",
        "encoder_prompt_token_ids",
        "decoder_prompt",
        "decoder_prompt_token_ids",
        "tokenize_params",
    ],
}
INPUTS["completion"] = INPUTS["render_completion"] + ["max_tokens", "stream", "sampling_params"]
INPUTS["chat"] = INPUTS["render_chat"] + ["max_tokens", "stream", "sampling_params"]
INPUTS["encoder_decoder_completion"] = INPUTS["render_encoder_decoder"] + ["max_tokens", "stream", "sampling_params"]


def random_request(rng: random.Random, model: str) -> dict[str, np.ndarray]:
    names = rng.sample(INPUTS[model], rng.randrange(0, len(INPUTS[model]) + 1))
    if rng.random() < 0.05:
        names.append(rng.choice(["bogus", "input_ids", "PROMPT"]))
    tensors: dict[str, np.ndarray] = {}
    for name in names:
        r = rng.random()
        if name.endswith("token_ids"):
            n = rng.randrange(0, 40)
            ids = [rng.choice([rng.randrange(49152), -rng.randrange(1, 10), 2**31 - 1]) for _ in range(n)]
            tensors[name] = np.array([ids], np.int32) if r < 0.9 else np.array([ids], np.int64)
        elif name == "max_tokens":
            tensors[name] = np.array([[rng.choice([0, 1, 2, -5, 10**6])]], np.int32)
        elif name == "stream":
            tensors[name] = np.array([[rng.random() < 0.5]], np.bool_)
        elif r < 0.05:
            tensors[name] = np.array([[random_bytes(rng), random_bytes(rng)]], dtype=object)  # two elements
        elif r < 0.08:
            tensors[name] = np.array([[1.5]], np.float32)  # wrong dtype
        else:
            tensors[name] = np.array([[random_bytes(rng)]], dtype=object)
    return tensors


@pytest.mark.timeout(int(TIME_BUDGET_S) + 300)
def test_fuzz_every_client_facing_model(server, hf_tokenizer):
    """Long because it is one seeded loop over every client-facing model and both protocols, with its classifier inline so a reader sees in one place what counts as a pass."""

    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException, np_to_triton_dtype

    from client import RendererClient, RequestError, error_kind

    pid = int(Path(server.pid_file).read_text())
    before = ServerProcesses.of(pid)
    assert len(before.stubs) > 3, "no stub processes found under the server"
    assert not before.others, f"unexpected processes under the server: {before.others}"
    if before.exited:
        print(f"\nexited and never reaped before the fuzz (a stub crashed earlier): {sorted(before.exited)}")
    mem_before = rss_mb(before.pids | {pid})
    log_before = Path(server.log_file).stat().st_size
    outcomes: dict[str, int] = {}
    bad: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + TIME_BUDGET_S
    local = threading.local()

    def clients():
        if not hasattr(local, "http"):
            local.http = httpclient.InferenceServerClient(f"{server.host}:{server.http_port}", network_timeout=120)
            local.grpc = grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}")
            local.gen = {
                p: RendererClient(f"{server.host}:{port}", p, timeout_s=120)
                for p, port in (("http", server.http_port), ("grpc", server.grpc_port))
            }
        return local

    def record(kind: str, detail: str = "") -> None:
        with lock:
            outcomes[kind] = outcomes.get(kind, 0) + 1
            if kind.startswith("unexpected") and len(bad) < 20:
                bad.append(detail)

    def record_error(kind: str, status: str, message: str, where: str) -> None:
        # Only the status says whose fault it was: internal errors carry messages too.
        if kind == "client" and message:
            record("client error")
        else:
            record(f"unexpected: {kind} error", f"{where} {kind} error ({status or 'no status'}): {message[:200]}")

    def one(i: int) -> None:
        if time.monotonic() > deadline:
            record("skipped (time budget)")
            return
        rng = random.Random(i)
        c = clients()
        if i % 5 == 0:
            # Valid requests interleaved with the garbage must still be answered correctly.
            text = "".join(rng.choice(string.ascii_letters + " 中🦩") for _ in range(rng.randrange(1, 80)))
            try:
                got = c.gen["grpc" if i % 2 else "http"].render_completion(text).input_ids
                ok = got == hf_tokenizer(text).input_ids
                record("ok" if ok else "unexpected", f"wrong ids for {text!r}")
            except RequestError as e:
                record("unexpected", f"valid request refused: {e!r}"[:300])
            return
        generate = rng.random() < 0.15
        model = rng.choice(GENERATE_MODELS if generate else RENDER_MODELS)
        tensors = random_request(rng, model)
        if generate and "max_tokens" in tensors and tensors["max_tokens"].dtype == np.int32:
            tensors["max_tokens"] = np.minimum(tensors["max_tokens"], 2)  # keep generation short
        protocol = "grpc" if i % 2 else "http"
        try:
            if generate:
                try:
                    list(c.gen[protocol].stream(model, tensors))
                except ValueError:  # not expressible as generate-endpoint JSON: gRPC carries anything
                    list(c.gen["grpc"].stream(model, tensors))
            else:
                mod = grpcclient if protocol == "grpc" else httpclient
                inputs = []
                for name, arr in tensors.items():
                    inp = mod.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
                    inp.set_data_from_numpy(arr)
                    inputs.append(inp)
                (c.grpc if protocol == "grpc" else c.http).infer(model, inputs)
            record("ok")
        except RequestError as e:
            # Triton's own generate endpoint answered 500 to a JSON value of the wrong type; the
            # front serves those paths now, and any 5xx is a bad outcome.
            record_error(e.kind, e.status, e.message, f"{model} {protocol} stream")
        except InferenceServerException as e:
            status = str(e.status() or "")
            record_error(error_kind(status), status, str(e.message() or ""), f"{model} {protocol} infer")
        if i % 500 == 0:
            with RendererClient(f"{server.host}:{server.http_port}") as probe:
                if not probe.is_ready():
                    record("unexpected", f"server not ready after request {i}")

    with ThreadPoolExecutor(4) as ex:
        list(ex.map(one, range(N_REQUESTS)))

    after = ServerProcesses.of(pid)
    mem_after = rss_mb(after.pids | {pid})
    new_log = Path(server.log_file).read_bytes()[log_before:].decode(errors="replace")
    print(f"\nfuzz outcomes: {outcomes}; server+stubs RSS {mem_before:.0f} MB -> {mem_after:.0f} MB")
    report = Path(server.build_dir).parent / "reports" / "fuzz.json"  # cited by docs/RELIABILITY.md
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(
        json.dumps(
            {
                "requests": N_REQUESTS,
                "outcomes": outcomes,
                "rss_mb_before": round(mem_before),
                "rss_mb_after": round(mem_after),
                "stubs": len(before.stubs),
            },
            indent=1,
        )
    )
    assert not bad, "unexpected responses:\n" + "\n".join(bad)
    assert outcomes.get("ok", 0) + outcomes.get("client error", 0) >= min(N_REQUESTS, 2000)
    assert outcomes.get("ok", 0) > 0 and outcomes.get("client error", 0) > 0
    assert after.stubs == before.stubs, (
        f"a stub died or was restarted: gone {sorted(before.stubs - after.stubs)}, new {sorted(after.stubs - before.stubs)}"
    )
    assert sorted(after.template_workers.values()) == sorted(before.template_workers.values()), (
        f"chat_render stubs' template workers changed: {before.template_workers} -> {after.template_workers}"
    )
    assert not after.others, f"unexpected processes under the server: {after.others}"
    assert after.exited <= before.exited, f"processes under the server died: {sorted(after.exited - before.exited)}"
    for marker in ("Non-graceful termination", "Stub process", "unhealthy", "Segmentation", "Signal ("):
        assert marker not in new_log, f"server log shows {marker!r}"
    assert mem_after - mem_before < 500, f"memory grew by {mem_after - mem_before:.0f} MB"
    with RendererClient(f"{server.host}:{server.http_port}") as c:
        assert c.is_ready()
        assert c.render_completion("still answering").input_ids
