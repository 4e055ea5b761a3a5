"""The watchdog's bookkeeping without a server: how many stubs a model's config runs, and which
models have fewer (a stub lost before the watchdog's first look). The live side is in
tests/live/test_stub_crash_cleanup_live.py."""

from __future__ import annotations

from launcher.watchdog import Stub, short_of_stubs, stub_count


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
