"""An engine's responses leave through a per-request outbox (triton_io/outbox.py), so a
caller that stops taking them (its stub died: Triton 2.51 then blocks the engine's ``send`` for
good) holds up that request only. Unit tests, no server: the outbox alone, then the stand-in
engine's adapter in process (tests/support/fake_triton.py) with one such caller before a normal one. The
live twin, a real ``detokenize`` stub killed mid-stream, is in tests/live/test_stub_crash_cleanup_live.py.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import fake_triton
import numpy as np
import pytest

from triton_io import outbox
from triton_io.outbox import ResponseOutbox

FINAL = 1
STALL_S = 0.3


class Recording:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, int]] = []

    def send(self, response: Any = None, flags: int = 0) -> None:
        self.sent.append((response, flags))


class NeverReturns:
    """A sender whose first send never returns: what a dead BLS caller does to its engine."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def send(self, response: Any = None, flags: int = 0) -> None:
        self.calls += 1
        self.release.wait()


class Raises:
    def send(self, response: Any = None, flags: int = 0) -> None:
        raise RuntimeError("the request is already complete")


def test_responses_go_out_in_order_and_the_final_one_ends_the_thread():
    sender = Recording()
    box = ResponseOutbox(sender, "t", FINAL, stall_s=STALL_S)
    for i in range(50):
        box.send(f"r{i}")
    box.send(flags=FINAL)
    assert box.join(timeout=5)
    assert sender.sent == [(f"r{i}", 0) for i in range(50)] + [(None, FINAL)]
    assert not box.stalled()


def test_a_send_that_never_returns_is_seen_as_stalled_and_never_blocks_the_engine():
    sender = NeverReturns()
    box = ResponseOutbox(sender, "t", FINAL, stall_s=STALL_S)
    start = time.monotonic()
    for i in range(100):
        box.send(f"r{i}")  # queued: none of these waits for the blocked one
    box.send(flags=FINAL)
    assert time.monotonic() - start < 0.1
    assert not box.stalled(), "stalled before stall_s passed"
    deadline = time.monotonic() + 5
    while not box.stalled() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert box.stalled() and sender.calls == 1
    sender.release.set()
    assert box.join(timeout=5)  # once the caller takes them, the rest go out


def test_a_send_that_fails_counts_as_stalled():
    box = ResponseOutbox(Raises(), "t", FINAL, stall_s=60)
    box.send("r")
    box.send(flags=FINAL)
    assert box.join(timeout=5)
    assert box.stalled()


def test_the_default_stall_is_read_when_the_outbox_is_made(monkeypatch):
    monkeypatch.setattr(outbox, "DEFAULT_STALL_S", 0.05)
    sender = NeverReturns()
    box = ResponseOutbox(sender, "t", FINAL)
    box.send("r")
    time.sleep(0.3)
    assert box.stalled()
    sender.release.set()
    box.send(flags=FINAL)
    assert box.join(timeout=5)


# --- the stand-in engine's adapter, in process ----------------------------------------------------


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    """The rendered repository's ``llm`` model, loaded as the stub would, on the fake backend."""
    with fake_triton.rendered_repository(tmp_path_factory.mktemp("outbox")) as repo:
        yield repo.model("llm")


def engine_request(ids: list[int], max_tokens: int) -> fake_triton.Request:
    t = fake_triton.Tensor
    return fake_triton.Request(
        [
            t("input_ids", np.array([ids], np.int32)),
            t("input_lengths", np.array([[len(ids)]], np.int32)),
            t("request_output_len", np.array([[max_tokens]], np.int32)),
            t("streaming", np.array([[True]])),
        ]
    )


def test_a_caller_that_stopped_taking_responses_holds_up_only_its_own_request(llm, monkeypatch):
    monkeypatch.setattr(outbox, "DEFAULT_STALL_S", STALL_S)
    dead = engine_request([1, 2, 3], max_tokens=200)
    blocked = NeverReturns()
    dead.sender = blocked  # type: ignore[assignment]
    normal = engine_request([1, 2, 3], max_tokens=4)
    try:
        llm.execute([dead])
        llm.execute([normal])  # queued behind the dead caller's request on the one worker
        ids: list[int] = []
        while True:
            try:  # 4 tokens take well under a second here; before the outbox this waited for good
                response, flags = normal.sender.responses.get(timeout=60)
            except queue.Empty:
                pytest.fail("the normal request got no response: the engine is held by the dead caller")
            if response is not None:
                ids += fake_triton.get_output_tensor_by_name(response, "output_ids").as_numpy()[0].tolist()
            if flags & FINAL:
                break
        assert len(ids) == 4
        assert blocked.calls == 1, "the dead caller's responses were sent past its blocked send"
    finally:
        blocked.release.set()
