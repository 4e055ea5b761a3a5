"""Objects of a finished BLS call, kept alive a while and then dropped on a Python thread.

Why: in Triton 2.51's Python backend stub every tensor of a BLS response holds a NumPy array (a
Python object), and the C++ ``ResponseIterator`` keeps every response it yielded. The stub drops
its own reference to a finished iterator on its stub-to-parent thread, without the GIL
(``SendCleanupId`` erasing ``response_iterator_map_``). When that reference is the last one, the
iterator, its responses and their arrays are freed there, racing the interpreter: the heap
corruption (``double free or corruption``, ``malloc(): unaligned fastbin chunk``, SIGSEGV) that
killed ``detokenize`` stubs under load (docs/RELIABILITY.md).

The rule is that the stub's reference goes first. ``detokenize`` makes sure of it when it can: it
waits for the stub-to-parent thread to get past the call's cleanup (``stub_let_go`` in
``model_repository/detokenize/1/model.py``) and then drops the objects itself. When it cannot (a cancelled
request, an internal error mid-call), it hands them here: held for ``hold_s``, long enough for
that thread on a loaded host, then dropped by a Python thread that holds the GIL.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

DEFAULT_HOLD_S = 30.0
"""How long a finished call's objects are kept. The stub's cleanup runs within milliseconds of the
final response; a time of 10 s was once outrun under starvation (docs/RELIABILITY.md)."""


class DeferredRelease:
    """Keeps what ``keep`` is given for ``hold_s`` seconds, then lets it go on its own thread."""

    def __init__(self, name: str, hold_s: float = DEFAULT_HOLD_S) -> None:
        self._hold_s = hold_s
        self._held: deque[tuple[float, tuple[Any, ...]]] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def keep(self, *objects: Any) -> None:
        with self._lock:
            self._held.append((time.monotonic() + self._hold_s, objects))

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self._hold_s / 4)):
            now = time.monotonic()
            expired = []
            with self._lock:
                while self._held and self._held[0][0] <= now:
                    expired.append(self._held.popleft())
            del expired  # the last references, dropped here with the GIL

    def close(self) -> None:
        """Stop the thread and let go of everything (at ``finalize``, when no call is running)."""
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            self._held.clear()
