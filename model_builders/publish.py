"""One builder at a time per model folder.

The builders publish atomically (a temporary folder renamed into place), but two processes building
the same folder at once (the test session's workers, two sessions side by side) would each remove
the other's work before renaming. ``exclusive`` makes them take turns on a lock file beside the
folder, so the second finds the folder built and keeps it.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir``'s build lock (``<out_dir>.lock``) until the block ends."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(out_dir.with_name(out_dir.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield
