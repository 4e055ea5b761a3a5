"""An engine request's responses, sent in order from a thread of their own.

Why: Triton 2.51's Python backend hands a BLS caller its decoupled responses by waiting, with no
timeout, until the caller's stub has taken each one (``SendBLSDecoupledResponse`` in the
backend's ``python_be.cc``). When that stub has died (a crash the watchdog then reloads), an
engine's ``send`` for its request never returns. Sent from the engine's own thread, that one
send would hold every later request for good (what docs/RELIABILITY.md measured after a
``detokenize`` crash); sent from the request's outbox, it holds only the outbox's thread, and the
engine, seeing the request stalled, drops it and goes on. TensorRT-LLM's and vLLM's Triton
backends send from a response thread too, for the same reason: generation never waits for a send.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

DEFAULT_STALL_S = 10.0
"""How long one send may wait before the request's caller counts as gone. A healthy send returns
once the caller's stub has taken the response; only a dead caller leaves it waiting this long."""


class ResponseOutbox:
    """Responses of one decoupled request, sent by a daemon thread in the order given; the thread
    ends after the response flagged ``final_flag`` (``pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL``).
    ``sender`` is the request's response sender (or anything with its ``send(response=None, flags=0)``)."""

    def __init__(self, sender: Any, name: str, final_flag: int, stall_s: float | None = None) -> None:
        self._sender = sender
        self._final_flag = final_flag
        self._stall_s = DEFAULT_STALL_S if stall_s is None else stall_s
        self._queue: queue.SimpleQueue[tuple[Any, int]] = queue.SimpleQueue()
        self._sending_since: float | None = None  # set while a send is in progress
        self._failed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def send(self, response: Any = None, flags: int = 0) -> None:
        """Queue one response (None: flags only, as ``send(flags=FINAL)``); never blocks."""
        self._queue.put((response, flags))

    def stalled(self) -> bool:
        """Whether the caller stopped taking responses: one send has waited past ``stall_s``, or a
        send failed. The request is then beyond help; its engine should stop generating it."""
        since = self._sending_since
        return self._failed or (since is not None and time.monotonic() - since > self._stall_s)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the final response has been sent; whether it was."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            response, flags = self._queue.get()
            self._sending_since = time.monotonic()
            try:
                if response is None:
                    self._sender.send(flags=flags)
                else:
                    self._sender.send(response, flags=flags)
            except Exception:  # noqa: BLE001 - a request already ended or gone: nothing to tell it
                self._failed = True
            finally:
                self._sending_since = None
            if flags & self._final_flag:
                return
