"""The supervisor's load watch, with no server: which model counts as dead while loading
(launcher/load_watch.py). Stubs and the log are stand-ins; the live test kills a real stub."""

from __future__ import annotations

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
def cpu(monkeypatch) -> dict[int, int]:
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
