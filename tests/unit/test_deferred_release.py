"""A BLS call's Python objects outlive the stub's own references to them and are dropped on a
Python thread (triton_io/deferred_release.py): Triton 2.51's stub otherwise frees a finished
response iterator, with the NumPy arrays of its responses, on a thread without the GIL, the heap
corruption that killed ``detokenize`` stubs after a stop string ended a generation early. Unit
tests, no server: the helper alone, then the ``detokenize`` adapter in process (tests/support/fake_triton.py)
on that stop-string path.
"""

from __future__ import annotations

import threading
import time

import fake_triton
import numpy as np
import pytest

from triton_io.deferred_release import DeferredRelease

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


class Recorder:
    """What detokenize does on a stop-string request, in order: each BLS iterator run to its end,
    each ``is_cancelled`` question, each final response."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cancelled: bool) -> None:
        self.events: list[tuple[str, object]] = []
        self.calls: list[object] = []  # the BLS requests and their iterators
        self.engine_requests: list[object] = []  # the requests the engine got
        lock = threading.Lock()
        recorder = self

        class Drained:
            def __init__(self, it):  # noqa: ANN001
                self.it = iter(it)

            def __iter__(self):  # noqa: ANN204
                return self

            def __next__(self):  # noqa: ANN204
                try:
                    return next(self.it)
                except StopIteration:
                    with lock:
                        recorder.events.append(("drained", self))
                    raise

        exec_, asked, send = (
            fake_triton.InferenceRequest.exec,
            fake_triton.Request.is_cancelled,
            fake_triton.ResponseSender.send,
        )

        def recording_exec(self, decoupled: bool = False):  # noqa: ANN001, ANN202
            out = Drained(exec_(self, decoupled))
            recorder.calls.extend([self, out])
            recorder.engine_requests.append(self.request)
            return out

        def recording_is_cancelled(self):  # noqa: ANN001, ANN202
            with lock:
                recorder.events.append(("asked", self))
            engine_side = any(self is r for r in recorder.engine_requests)
            return asked(self) if engine_side else cancelled

        def recording_send(self, response=None, flags=0):  # noqa: ANN001, ANN202
            if flags & fake_triton.FINAL:
                with lock:
                    recorder.events.append(("final", self))
            return send(self, response, flags)

        monkeypatch.setattr(fake_triton.InferenceRequest, "exec", recording_exec)
        monkeypatch.setattr(fake_triton.Request, "is_cancelled", recording_is_cancelled)
        monkeypatch.setattr(fake_triton.ResponseSender, "send", recording_send)

    def client_request(self) -> object:
        """The request detokenize served: the one asked that is not the engine's."""
        asked = [
            obj for kind, obj in self.events if kind == "asked" and not any(obj is r for r in self.engine_requests)
        ]
        assert asked, "detokenize never asked its request is_cancelled"
        return asked[-1]

    def index(self, kind: str, obj: object) -> int:
        return max(i for i, (k, o) in enumerate(self.events) if k == kind and o is obj)


def stop_string_request(repo, streaming: bool) -> dict:  # noqa: ANN001
    whole = repo.infer(
        "completion",
        {"prompt": np.array([b"The capital of France is"], object), "max_tokens": np.array([12], np.int32)},
    )
    words = whole["text_output"][0].decode().split()
    assert len(words) > 2, "the stand-in produced too little text to stop in"
    return {
        "prompt": np.array([b"The capital of France is"], object),
        "max_tokens": np.array([12], np.int32),
        "stream": np.array([streaming]),
        "sampling_params": np.array([('{"stop": ["%s"]}' % words[1]).encode()], object),
    }


@pytest.mark.parametrize("streaming", [False, True])
def test_detokenize_waits_for_the_stub_to_let_go_before_its_final_response(repo, monkeypatch, streaming):
    """A stop string ends the text early: detokenize sends TensorRT-LLM's stop request and drains
    the engine (the path the crashes came from). Both calls run to their end, then detokenize asks
    ``is_cancelled`` (its question queues behind the calls' cleanups in the stub), then it sends the
    final response and drops the calls' objects itself, holding none."""
    inputs = stop_string_request(repo, streaming)
    detokenize = repo.model("detokenize")
    held_before = len(detokenize._finished)
    rec = Recorder(monkeypatch, cancelled=False)
    repo.infer("completion", inputs)
    assert len(rec.calls) == 4, "expected the generation and the stop request as BLS calls"
    client = rec.client_request()
    barrier, final = rec.index("asked", client), rec.index("final", client.sender)
    for iterator in rec.calls[1::2]:
        assert rec.index("drained", iterator) < barrier < final
    assert len(detokenize._finished) == held_before, "objects held although the stub had let go"


def test_a_cancelled_request_holds_its_bls_calls(repo, monkeypatch):
    """``is_cancelled`` answering True may come from the stub's cache, with no round trip behind
    the cleanups: then the calls' objects are held (triton_io/deferred_release.py)."""
    inputs = stop_string_request(repo, False)
    detokenize = repo.model("detokenize")
    held_before = len(detokenize._finished)
    rec = Recorder(monkeypatch, cancelled=True)
    repo.infer("completion", inputs)
    assert rec.calls, "no BLS call made"
    deadline = time.monotonic() + 5
    while len(detokenize._finished) < held_before + 1 and time.monotonic() < deadline:
        time.sleep(0.02)  # the request thread hands them over as it ends
    held = [obj for _, group in list(detokenize._finished._held) for obj in group]
    for obj in rec.calls:
        assert any(obj is h for h in held), f"{type(obj).__name__} of a BLS call was not held"
