"""The supervisor's load watch, with no server: which model counts as dead while loading
(launcher/load_watch.py). Stubs and the log are stand-ins; the live test kills a real stub."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from launcher import load_watch

from launcher.load_watch import LoadWatch
from launcher.watchdog import Stub

LOG = [
    'I1201 "loading: chat_render:1"',
    'I1201 "loading: tokenize:1"',
    'I1201 "loading: chat:1"',  # an ensemble: no stub, not watched
]


@pytest.fixture()
def world(tmp_path, monkeypatch):
    """(log file, set of live stub models) the watch reads."""
    log = tmp_path / "tritonserver.log"
    log.write_text("\n".join(LOG) + "\n")
    alive: list[str] = []
    monkeypatch.setattr(
        load_watch, "stubs_of", lambda pid: {i: Stub(i, m, None) for i, m in enumerate(alive, start=100)}
    )
    return log, alive


def watch(log: Path) -> LoadWatch:
    return LoadWatch(1, frozenset({"chat_render", "tokenize"}), log, 0, grace_s=10)


def append(log: Path, *lines: str) -> None:
    with log.open("a") as f:
        f.write("\n".join(lines) + "\n")


def test_a_loading_model_without_a_stub_past_the_grace_is_dead(world):
    log, alive = world
    w = watch(log)
    alive[:] = ["chat_render", "tokenize"]  # the backend's first stubs
    assert w.dead_model(now=0) is None
    alive[:] = ["tokenize"]  # chat_render's died
    assert w.dead_model(now=1) is None  # within the grace (the instance stubs may be starting)
    assert w.dead_model(now=10.9) is None
    assert w.dead_model(now=11) == "chat_render"


def test_each_started_instance_needs_its_stub(world):
    log, alive = world
    w = watch(log)
    append(log, *(f'I "TRITONBACKEND_ModelInstanceInitialize: chat_render_0_{i} (CPU device 0)"' for i in range(3)))
    alive[:] = ["chat_render", "chat_render", "chat_render", "tokenize"]
    assert w.dead_model(now=0) is None
    alive.remove("chat_render")  # one of three instance stubs died: the load hangs all the same
    assert w.dead_model(now=5) is None
    assert w.dead_model(now=15) == "chat_render"


def test_loaded_models_and_stubs_back_in_time_are_not_dead(world):
    log, alive = world
    w = watch(log)
    alive[:] = []
    assert w.dead_model(now=0) is None
    alive[:] = ["chat_render", "tokenize"]  # both came up within the grace
    assert w.dead_model(now=9) is None
    assert w.dead_model(now=30) is None
    append(log, "I model_lifecycle.cc:839] \"successfully loaded 'tokenize'\"")
    alive[:] = ["chat_render"]  # a loaded model's stubs are the watchdog's concern, not this
    assert w.dead_model(now=31) is None
    assert w.dead_model(now=60) is None


def test_without_a_log_only_models_seen_are_watched(world):
    _, alive = world
    w = LoadWatch(1, frozenset({"chat_render", "tokenize"}), None, 0, grace_s=10)
    assert w.dead_model(now=0) is None
    assert w.dead_model(now=100) is None  # nothing seen, nothing known to load
    alive[:] = ["tokenize"]
    w.dead_model(now=101)
    alive[:] = []
    assert w.dead_model(now=102) is None
    assert w.dead_model(now=112) == "tokenize"


@pytest.fixture()
def awaited(monkeypatch) -> set[int]:
    """The pids a tritonserver thread waits on to exit, as the watch reads them."""
    pids: set[int] = set()
    monkeypatch.setattr(load_watch, "awaited_by", lambda server_pid: set(pids))
    return pids


@pytest.fixture()
def cpu(monkeypatch, awaited) -> dict[int, int]:
    """The server group's CPU ticks by pid, as the watch reads them."""
    ticks: dict[int, int] = {}
    monkeypatch.setattr(load_watch, "group_cpu_ticks", lambda pgid: dict(ticks))
    return ticks


def idle_ticks() -> int:
    """Just under what the watch takes for work."""
    return int(load_watch.IDLE_CPU_S * load_watch.TICKS_PER_S) - 1


def test_a_start_idle_while_a_model_loads_has_hung(world, cpu):
    log, alive = world
    w = LoadWatch(1, frozenset({"chat_render", "tokenize"}), log, 0, stall_s=60)
    alive[:] = ["chat_render", "tokenize"]
    cpu.update({1: 500, 100: 300, 101: 200})
    assert w.hung_models(now=0) == []
    append(log, "I model_lifecycle.cc:839] \"successfully loaded 'tokenize'\"")
    cpu[100] += idle_ticks()  # the health threads' wake-ups, not work
    assert w.hung_models(now=59) == []
    assert w.hung_models(now=60) == ["chat_render"]
    assert w.hang == "the server used almost no CPU for 60 s"


def test_a_start_that_works_now_and_then_has_not_hung(world, cpu):
    log, alive = world
    w = LoadWatch(1, frozenset({"chat_render", "tokenize"}), log, 0, stall_s=60)
    alive[:] = ["chat_render", "tokenize"]
    cpu.update({1: 500, 100: 300})
    assert w.hung_models(now=0) == []
    cpu[100] += 50  # half a second of work
    assert w.hung_models(now=50) == []
    assert w.hung_models(now=100) == []  # the idle time counts from the last work
    assert w.hung_models(now=110) == ["chat_render", "tokenize"]


def test_work_in_a_new_process_counts(world, cpu):
    """vLLM's engine processes, started by the llm stub, are new members of the group."""
    log, alive = world
    w = LoadWatch(1, frozenset({"chat_render", "tokenize"}), log, 0, stall_s=60)
    alive[:] = ["chat_render"]
    cpu.update({1: 500, 100: 300})
    assert w.hung_models(now=0) == []
    cpu[200] = 400  # started after the last look
    del cpu[100]  # and a process that ended takes nothing back
    assert w.hung_models(now=30) == []
    assert w.hung_models(now=89) == []
    assert w.hung_models(now=90) == ["chat_render", "tokenize"]


def test_an_idle_group_with_nothing_loading_has_not_hung(world, cpu):
    log, alive = world
    w = LoadWatch(1, frozenset({"chat_render", "tokenize"}), log, 0, stall_s=60)
    append(
        log,
        "I model_lifecycle.cc:839] \"successfully loaded 'tokenize'\"",
        "I model_lifecycle.cc:839] \"successfully loaded 'chat_render'\"",
    )
    alive[:] = ["chat_render", "tokenize"]
    cpu.update({1: 500})
    assert w.hung_models(now=0) == []
    assert w.hung_models(now=1000) == []


def test_a_live_stub_that_triton_waits_on_to_exit_has_hung_its_model(world, cpu, awaited):
    """Triton 2.51's stub launcher, after a missed health check, waits for the stub to exit while
    nothing tells it to: caught by the wait, busy as the rest of the server may be."""
    log, alive = world
    w = LoadWatch(1, frozenset({"chat_render", "tokenize"}), log, 0, grace_s=10, stall_s=60)
    alive[:] = ["chat_render", "tokenize"]  # pids 100 and 101
    cpu.update({1: 500})
    assert w.hung_models(now=0) == []
    awaited.add(101)
    for now in (1, 5, 10.9):
        cpu[1] += 100  # tritonserver busy with the other loads
        assert w.hung_models(now=now) == []
    assert w.hung_models(now=11) == ["tokenize"]
    assert "waited 10 s for their live stub to exit" in w.hang
    awaited.clear()  # an unload's or a kill's short wait ends: no hang
    assert w.hung_models(now=12) == []


def test_a_wait_on_a_loaded_models_stub_is_no_hang(world, cpu, awaited):
    log, alive = world
    w = LoadWatch(1, frozenset({"chat_render", "tokenize"}), log, 0, grace_s=10, stall_s=60)
    alive[:] = ["chat_render", "tokenize"]
    append(log, "I model_lifecycle.cc:839] \"successfully loaded 'tokenize'\"")
    cpu.update({1: 500})
    awaited.add(101)
    assert w.hung_models(now=0) == []
    cpu[1] += 100
    assert w.hung_models(now=30) == []


def test_awaited_by_reads_a_thread_blocked_in_wait4():
    """A real wait: this process's thread blocked on a child that sleeps."""
    import subprocess
    import threading

    child = subprocess.Popen(["sleep", "30"])
    waiter = threading.Thread(target=child.wait)
    waiter.start()
    try:
        deadline = time.monotonic() + 10
        while child.pid not in load_watch.awaited_by(os.getpid()):
            assert time.monotonic() < deadline, "the waiting thread was not seen"
            time.sleep(0.05)
    finally:
        child.kill()
        waiter.join()
    assert child.pid not in load_watch.awaited_by(os.getpid())


def test_a_stub_triton_found_dead_is_named_from_its_log():
    """Where Triton notices the dead stub itself (and fails the load), its log names the instance;
    the model is read from it, the instance's group and index cut off."""
    from launcher.load_watch import stub_died

    line = (
        "error: creating server: Invalid argument - load failed for model 'render_chat': ensemble 'render_chat' "
        "depends on 'chat_render' which has no loaded version. Model 'chat_render' loading failed with error: "
        "version 1 is at UNAVAILABLE state: Internal: Stub process 'chat_render_0_0' is not healthy.;"
    )
    assert stub_died("I1207 started\n" + line + "\n") == "chat_render"
    assert stub_died(line.replace("chat_render_0_0", "tokenize_enc_dec_1_12")) == "tokenize_enc_dec"
    assert stub_died("I1207 successfully loaded 'chat_render'\n") is None
