"""A BLS call's Python objects outlive the stub's own references to them and are dropped on a
Python thread (serving/deferred_release.py): Triton 2.51's stub otherwise frees a finished
response iterator, with the NumPy arrays of its responses, on a thread without the GIL, the heap
corruption that killed ``detokenize`` stubs after a stop string ended a generation early. Unit
tests, no server: the helper alone, then the ``detokenize`` adapter in process (tests/fake_triton.py)
on that stop-string path.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import fake_triton
from serving.deferred_release import DeferredRelease

HOLD_S = 0.4


class Tracked:
    """Records the thread that frees it."""

    freed_on: list[str] = []

    def __del__(self) -> None:
        Tracked.freed_on.append(threading.current_thread().name)


def test_objects_are_held_for_the_hold_time_then_freed_on_the_release_thread():
    Tracked.freed_on.clear()
    release = DeferredRelease("test-release", hold_s=HOLD_S)
    try:
        release.keep(Tracked(), Tracked())
        time.sleep(HOLD_S / 2)
        assert Tracked.freed_on == [] and len(release) == 1
        deadline = time.monotonic() + 5
        while len(release) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        assert Tracked.freed_on == ["test-release", "test-release"]
    finally:
        release.close()


def test_close_lets_go_of_everything():
    release = DeferredRelease("test-release", hold_s=60)
    release.keep(object())
    release.close()
    assert len(release) == 0


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    with fake_triton.rendered_repository(tmp_path_factory.mktemp("release")) as repository:
        yield repository


@pytest.mark.parametrize("streaming", [False, True])
def test_detokenize_holds_its_bls_calls_past_a_stop_string(repo, monkeypatch, streaming):
    """A stop string ends the text early: detokenize sends TensorRT-LLM's stop request and drains
    the engine, two BLS calls whose iterators it must keep (the path the crashes came from)."""
    made: list[object] = []
    exec_ = fake_triton.InferenceRequest.exec

    def recording_exec(self, decoupled: bool = False):  # noqa: ANN202
        out = exec_(self, decoupled)
        made.extend([self, out])
        return out

    monkeypatch.setattr(fake_triton.InferenceRequest, "exec", recording_exec)
    detokenize = repo.model("detokenize")
    held_before = len(detokenize._finished)
    whole = repo.infer(
        "completion",
        {"prompt": np.array([b"The capital of France is"], object), "max_tokens": np.array([12], np.int32)},
    )
    words = whole["text_output"][0].decode().split()
    assert len(words) > 2, "the stand-in produced too little text to stop in"
    made.clear()
    inputs = {
        "prompt": np.array([b"The capital of France is"], object),
        "max_tokens": np.array([12], np.int32),
        "stream": np.array([streaming]),
        "sampling_params": np.array([('{"stop": ["%s"]}' % words[1]).encode()], object),
    }
    repo.infer("completion", inputs)
    assert len(made) == 4, "expected the generation and the stop request as BLS calls"
    deadline = time.monotonic() + 5
    while len(detokenize._finished) < held_before + 2 and time.monotonic() < deadline:
        time.sleep(0.02)  # the request thread hands them over as it ends
    held = [obj for _, group in list(detokenize._finished._held) for obj in group]
    for obj in made:
        assert any(obj is h for h in held), f"{type(obj).__name__} of a BLS call was not held"
