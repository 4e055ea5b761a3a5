"""Hostile requests on a live server in its default configuration (request templates refused): deep
request fields are a 400 and never a 500 or a stub crash, and a crashed stub leaves no process or
shared-memory region of the old instances behind once the watchdog has reloaded its model."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import ports

from client import RendererClient, RequestError
from launcher.watchdog import alive, expected_stubs, stubs_of
from renderer.json_fields import MAX_NESTING_DEPTH
from triton_io.outbox import DEFAULT_STALL_S

# Every test here talks to a real tritonserver.
pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
HI = [{"role": "user", "content": "hi"}]
INSTANCES = 3


def nested_text(levels: int) -> str:
    """JSON text of ``levels`` objects inside each other (built as text: json.dumps recurses)."""
    return '{"a": ' * levels + '"x"' + "}" * levels


def deep_cases(levels: int) -> dict[str, tuple[str, str | None]]:
    """(messages, chat_params) JSON texts, one field nested ``levels`` deep; none sends a template."""
    inner = nested_text(levels)
    hi = json.dumps(HI)
    arguments = json.dumps(nested_text(levels))  # a JSON string holding deep JSON
    call = '{"id": "1", "type": "function", "function": {"name": "f", "arguments": %s}}' % arguments
    return {
        "tools": (hi, '{"tools": [{"type": "function", "function": {"name": "f", "parameters": %s}}]}' % inner),
        "documents": (hi, '{"documents": [%s]}' % inner),
        "tool_call_arguments": (
            '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "tool_calls": [%s]}]' % call,
            '{"continue_final_message": true, "add_generation_prompt": false}',
        ),
        "chat_template_kwargs": (hi, '{"chat_template_kwargs": {"tools": [%s]}}' % inner),
        "content_part": ('[{"role": "user", "content": [{"type": "text", "text": "hi", "x": %s}]}]' % inner, None),
        "messages_brackets": ("[" * levels + "]" * levels, None),
    }


@pytest.fixture(scope="module")
def default_server(server_settings):
    from launcher import cli as launch

    s = replace(
        server_settings,
        openai_port=0,
        build_dir=str(ROOT / "build" / "b-stub-crash"),
        models="render_chat",
        http_port=ports.port("stub_crash"),
        grpc_port=ports.port("stub_crash") + 1,
        metrics_port=ports.port("stub_crash") + 2,
        tokenize_instances=1,
        chat_render_instances=INSTANCES,
        trust_request_chat_template=False,  # the default: no request template renders
    )
    launch.stop(s)
    assert launch.start(s) == 0, f"tritonserver did not start; see {s.log_file}"
    yield s
    launch.stop(s)


def server_pid(s) -> int:
    try:
        return int(Path(s.pid_file).read_text())
    except FileNotFoundError:
        # The supervisor unlinks it when the server exits or is ended (its log, in the report, says why).
        pytest.fail(f"tritonserver's pid file {s.pid_file} is gone: the server exited or was ended")


def wait_for_watchdog(s, timeout_s: float = 30.0) -> None:
    """Until this server's watchdog has taken its baseline of stubs (it does once the server is
    ready): a stub killed before that is found by another path (fewer stubs than the configs say)."""
    watchdog_log = s.watchdog_log_file
    marker = f"stubs of tritonserver pid {server_pid(s)}\n"  # this server's watchdog, not an earlier one's
    deadline = time.monotonic() + timeout_s
    while marker not in (watchdog_log.read_text() if watchdog_log.exists() else ""):
        assert time.monotonic() < deadline, "the watchdog never started watching"
        time.sleep(0.2)


def stub_pids(s, model: str) -> set[int]:
    return {pid for pid, stub in stubs_of(server_pid(s)).items() if stub.model == model}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_deep_input_is_a_400_on_the_default_path(default_server, hf_tokenizer, protocol):
    """Past the limit and 100,000 deep: a 400 naming the field, every stub alive; 600 deep (tools,
    documents and arguments used to reach copy.deepcopy outside the render guard: a RecursionError,
    a 500) and vLLM's 963 render."""
    s = default_server
    before = set(stubs_of(server_pid(s)))
    port = s.http_port if protocol == "http" else s.grpc_port
    with RendererClient(f"{s.host}:{port}", protocol, timeout_s=60) as c:
        for levels in (MAX_NESTING_DEPTH + 1, 100_000):
            for name, (messages, chat_params) in deep_cases(levels).items():
                kwargs = {} if chat_params is None else {"chat_params": chat_params}
                with pytest.raises(RequestError) as e:
                    c.render_chat(messages, **kwargs)
                assert e.value.kind == "client", f"{name} at {levels}: {e.value!r}"
                assert f"is nested more than {MAX_NESTING_DEPTH} levels deep" in e.value.message, f"{name} at {levels}"
        # A depth within the limit renders, and normal requests still do.
        for levels in (600, 960):
            ok = c.render_chat(HI, chat_params='{"chat_template_kwargs": {"tools": [%s]}}' % nested_text(levels))
            assert ok.input_ids
        expected = hf_tokenizer.apply_chat_template(HI, tokenize=True, add_generation_prompt=True, return_dict=False)
        assert c.render_chat(HI).input_ids == list(expected)
    assert set(stubs_of(server_pid(s))) == before, "a stub died or restarted"


def test_crashed_stub_leaves_nothing_behind(default_server, hf_tokenizer):
    """Crash one chat_render stub (SIGSEGV); after the watchdog's reload, no process of the old instances
    remains, none of their /dev/shm regions either, and the model serves correct ids again."""
    s = default_server
    pid = server_pid(s)
    old = {p: stub for p, stub in stubs_of(pid).items() if stub.model == "chat_render"}
    assert len(old) == INSTANCES
    old_regions = {f"/dev/shm/{stub.region}" for stub in old.values() if stub.region}
    assert len(old_regions) == INSTANCES and all(os.path.exists(r) for r in old_regions)
    others = {p for p, stub in stubs_of(pid).items() if stub.model != "chat_render"}

    wait_for_watchdog(s)
    victim = min(old)
    log_before = Path(s.log_file).stat().st_size
    # SIGSEGV, as a native crash dies: the stub writes its threads' Python stacks first.
    os.kill(victim, signal.SIGSEGV)
    killed_at = time.monotonic()
    deadline = killed_at + 120
    new: set[int] = set()
    # Settled: the new stubs serve, and the watchdog has ended the old ones and unlinked their
    # regions (it does so right after the reload; the stubs may be gone a moment before).
    while time.monotonic() < deadline:
        new = stub_pids(s, "chat_render") - set(old)
        if len(new) == INSTANCES and not any(alive(p) for p in old) and not any(os.path.exists(r) for r in old_regions):
            break
        time.sleep(0.5)
    settled = time.monotonic() - killed_at
    survivors = [p for p in old if alive(p)]
    left_regions = sorted(r for r in old_regions if os.path.exists(r))
    print(f"\nreloaded and cleaned up {settled:.1f} s after the kill; new stubs {sorted(new)}")
    assert len(new) == INSTANCES, f"expected {INSTANCES} new chat_render stubs, got {sorted(new)}"
    assert not survivors, f"stubs of the old instances still running: {survivors}"
    assert not left_regions, f"regions of the old instances left: {left_regions}"
    assert stub_pids(s, "chat_render") == new
    assert others <= set(stubs_of(pid)), "a stub of another model was touched"
    crash_log = Path(s.log_file).read_bytes()[log_before:].decode(errors="replace")
    assert "Fatal Python error: Segmentation fault" in crash_log, "the crashed stub left no Python stack"
    assert "most recent call first" in crash_log

    expected = list(hf_tokenizer.apply_chat_template(HI, tokenize=True, add_generation_prompt=True, return_dict=False))
    with RendererClient(f"{s.host}:{s.http_port}") as c:
        for _ in range(2 * INSTANCES):  # reaches every new instance in turn, likely
            assert c.render_chat(HI).input_ids == expected
        assert c.is_ready()
    time.sleep(2.0)  # the watchdog must not take the ended stubs for new deaths and reload again
    assert stub_pids(s, "chat_render") == new


def watchdog_token(s) -> str:
    """The token this server's watchdog was started with (from its environment: the test runs as
    the same user; nothing else exposes it)."""
    marker = f"--server-pid\0{server_pid(s)}\0".encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"launcher.watchdog" in cmdline.read_bytes() and marker in cmdline.read_bytes():
                environ = (cmdline.parent / "environ").read_bytes().split(b"\0")
                return next(v.split(b"=", 1)[1].decode() for v in environ if v.startswith(b"WATCHDOG_TOKEN="))
        except OSError:
            continue
    raise AssertionError("no watchdog runs for this server")


def test_watchdog_expects_the_stubs_the_server_runs(default_server):
    """The instance counts the watchdog reads from the live configs (its check for a stub lost
    before its first look) equal the stubs running, model by model, so a healthy start reloads
    nothing."""
    s = default_server
    counts: dict[str, int] = {}
    for stub in stubs_of(server_pid(s)).values():
        counts[stub.model] = counts.get(stub.model, 0) + 1
    expected = expected_stubs(s.http_url, watchdog_token(s))
    assert expected["chat_render"] == INSTANCES
    assert expected == counts
    assert "fewer stubs" not in s.watchdog_log_file.read_text()


@pytest.fixture()
def chat_server(server_settings):
    """A generation server (the ``chat`` ensemble: detokenize drives the engine), one per test."""
    from launcher import cli as launch

    s = replace(
        server_settings,
        openai_port=0,
        build_dir=str(ROOT / "build" / "b-stream-crash"),
        models="chat",
        http_port=ports.port("stub_crash") + 10,
        grpc_port=ports.port("stub_crash") + 11,
        metrics_port=ports.port("stub_crash") + 12,
        tokenize_instances=1,
    )
    launch.stop(s)
    assert launch.start(s) == 0, f"tritonserver did not start; see {s.log_file}"
    yield s
    launch.stop(s)


STREAM_TIMEOUT_S = 10.0
# What Triton 2.51 prints when its Python backend's server side fails to take an IPC mutex that the
# killed stub held (an uncaught boost exception: std::terminate). docs/RELIABILITY.md, "The server
# abort": not ours to fix; the supervisor restarts the server.
TRITON_ABORT = "terminate called after throwing an instance of 'boost::interprocess::lock_exception'"


def log_size(s) -> int:
    return s.log_file.stat().st_size


def triton_aborted(s, since: int) -> bool:
    """Whether Triton aborted as ``TRITON_ABORT`` says after ``since`` bytes of its log (the log of
    a build folder is appended to by every server started in it)."""
    with open(s.log_file, "rb") as f:
        f.seek(since)
        return TRITON_ABORT.encode() in f.read()


def reloaded_or_restarted(s, victim: int, pid_before: int, since: int, timeout_s: float = 90.0) -> str:
    """How the server recovered from the killed stub: "reloaded" (the watchdog reloaded the model
    in the same tritonserver), or "restarted" (Triton aborted as ``TRITON_ABORT`` says, and the
    supervisor's new server is ready). Fails on anything else: no recovery, or a server that ended
    for another reason."""
    from launcher import cli as launch

    def pid() -> int | None:
        try:
            return int(Path(s.pid_file).read_text())
        except FileNotFoundError:
            return None  # the supervisor unlinks it while no server runs

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if triton_aborted(s, since):
            while not (pid() not in (None, pid_before) and launch.is_ready(s)):
                assert time.monotonic() < deadline, "the supervisor did not restart tritonserver after its abort"
                time.sleep(0.5)
            return "restarted"
        now = pid()
        if now == pid_before and {p for p, st in stubs_of(now).items() if st.model == "detokenize"} - {victim}:
            return "reloaded"
        time.sleep(0.2)
    pytest.fail(f"neither the watchdog's reload nor a restart within {timeout_s:.0f} s; see {s.log_file}")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_stream_in_flight_when_its_stub_dies_ends_with_an_error(chat_server, protocol):
    """A stream generating when the detokenize stub dies: Triton 2.51 never completes a dead stub's
    decoupled requests, so the client's timeout is what ends it; it ends as an error of kind
    "unavailable" within that timeout (never a hang, a raw socket error or a client error), over
    HTTP and gRPC (whose client used to wait for the dead stream forever when it stopped it).
    Once the watchdog has reloaded ``detokenize``, generation works again with the same ids: the
    engine's sends to the dead stub block only that request's outbox (triton_io/outbox.py),
    where they used to block the engine for good. Now and then Triton 2.51 itself aborts on the
    dead stub's mutex (``TRITON_ABORT``), before the stream's end or after it; the stream then
    ends with the connection, and the supervisor's restart must serve the same ids."""
    s = chat_server
    wait_for_watchdog(s)  # the kill below is then seen as a stub that died
    [victim] = stub_pids(s, "detokenize")
    server_pid_before = server_pid(s)
    with RendererClient(f"{s.host}:{s.grpc_port}", "grpc", timeout_s=60) as c:
        [before] = list(c.generate("chat", messages=HI, max_tokens=8))
    got: list[int] = []
    outcome: list[object] = []
    started = threading.Event()

    def stream() -> None:
        port = s.http_port if protocol == "http" else s.grpc_port
        try:
            with RendererClient(f"{s.host}:{port}", protocol, timeout_s=STREAM_TIMEOUT_S) as c:
                # Long enough that the kill, sent at the first token, finds it generating; every
                # token past that costs the test run about 40 ms of the stand-in's CPU.
                for piece in c.generate(
                    "chat", messages=HI, max_tokens=200, stream=True, sampling_params={"ignore_eos": True}
                ):
                    got.append(len(piece.output_ids))
                    started.set()
            outcome.append("finished")
        except RequestError as e:
            outcome.append(e)
        except Exception as e:  # noqa: BLE001 - anything else is the failure this test looks for
            outcome.append(f"raw {type(e).__name__}: {e}")
        finally:
            started.set()

    thread = threading.Thread(target=stream)
    thread.start()
    assert started.wait(60), "no token within 60 s"
    assert got and not outcome, f"the stream ended before the kill: {outcome}"
    log_at_kill = log_size(s)
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    thread.join(STREAM_TIMEOUT_S + 60)
    assert not thread.is_alive(), "the stream outlived its client's timeout"
    [result] = outcome
    assert isinstance(result, RequestError), result
    # A Triton that aborted while the stream ran ended the stream with its connection, at once:
    # gRPC then reports the stream removed (INTERNAL, "RST_STREAM"), not the client's timeout.
    kinds = ("unavailable", "internal") if triton_aborted(s, log_at_kill) else ("unavailable",)
    assert result.kind in kinds, f"{result.status} {result.message}"
    assert time.monotonic() - killed_at < STREAM_TIMEOUT_S + 30

    path = reloaded_or_restarted(s, victim, server_pid_before, log_at_kill)
    # The engine drops the dead caller's request once one send has waited DEFAULT_STALL_S.
    recover_s = DEFAULT_STALL_S + 30
    with RendererClient(f"{s.host}:{s.grpc_port}", "grpc", timeout_s=recover_s) as c:
        start = time.monotonic()
        after = None
        while after is None:
            try:
                [after] = list(c.generate("chat", messages=HI, max_tokens=8))
            except RequestError as e:  # the reload's window: the model is briefly not there
                assert e.kind != "client" and time.monotonic() - start < recover_s, repr(e)
                time.sleep(0.5)
    assert after.output_ids == before.output_ids and after.text == before.text
    if triton_aborted(s, log_at_kill):  # the abort may also come after the reload (it did, 3 s after)
        path = "restarted"
    print(f"\ngeneration served again {time.monotonic() - killed_at:.1f} s after the kill ({path})")
