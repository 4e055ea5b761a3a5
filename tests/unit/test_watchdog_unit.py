"""The watchdog's bookkeeping without a server: how many stubs a model's config runs, and which
models have fewer (a stub lost before the watchdog's first look). The live side is in
tests/live/test_stub_crash_cleanup_live.py."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from launcher import watchdog
from launcher.watchdog import Stub, retire_old_stubs, short_of_stubs, stub_count


def test_stub_count_by_backend_and_instance_group():
    cpu = {"backend": "python", "instance_group": [{"kind": "KIND_CPU", "count": 3, "gpus": []}]}
    assert stub_count(cpu) == 3
    two_groups = {"backend": "python", "instance_group": [{"kind": "KIND_CPU", "count": 2}, {"count": 1}]}
    assert stub_count(two_groups) == 3
    gpu = {"backend": "python", "instance_group": [{"kind": "KIND_GPU", "count": 1, "gpus": [0, 1]}]}
    assert stub_count(gpu) == 2
    assert stub_count({"backend": "python", "instance_group": [{"kind": "KIND_GPU", "count": 1}]}) is None
    assert stub_count({"platform": "ensemble"}) == 0
    assert stub_count({"backend": "onnxruntime", "instance_group": [{"count": 4}]}) == 0
    assert stub_count({"backend": "python"}) == 1  # no instance_group: one instance


def test_short_of_stubs_names_models_missing_a_stub():
    stubs = {
        1: Stub(1, "chat_render", None),
        2: Stub(2, "chat_render", None),
        3: Stub(3, "tokenize", None),
    }
    assert short_of_stubs(stubs, {"chat_render": 2, "tokenize": 1}) == []
    assert short_of_stubs(stubs, {"chat_render": 3, "tokenize": 1, "detokenize": 1}) == ["chat_render", "detokenize"]
    assert short_of_stubs(stubs, {}) == []


def test_retire_unlinks_regions_of_old_stubs_that_exited_by_themselves(monkeypatch):
    """After a reload, the old instances' stubs may have exited on their own (tritonserver's unload)
    and a crashed one left its region: every old region goes once the new stubs are all there, and a
    reload still short of new stubs touches nothing."""
    names = [f"test_watchdog_{uuid.uuid4().hex}_{i}" for i in range(3)]
    for n in names:
        Path("/dev/shm", n).write_bytes(b"x")
    old = {90001: Stub(90001, "m", names[0]), 90002: Stub(90002, "m", names[1]), 90003: Stub(90003, "other", names[2])}
    try:
        current = {90011: Stub(90011, "m", None)}
        monkeypatch.setattr(watchdog, "stubs_of", lambda server_pid: current)
        assert retire_old_stubs(1, "m", old) == []
        assert all(Path("/dev/shm", n).exists() for n in names), "a reload short of new stubs unlinked a region"
        current[90012] = Stub(90012, "m", None)
        assert retire_old_stubs(1, "m", old) == []  # none survived: nothing to end
        assert not Path("/dev/shm", names[0]).exists() and not Path("/dev/shm", names[1]).exists()
        assert Path("/dev/shm", names[2]).exists(), "another model's region was unlinked"
    finally:
        for n in names:
            if os.path.exists(f"/dev/shm/{n}"):
                os.unlink(f"/dev/shm/{n}")
