"""Processor cache: processed image tensors by item hash, LRU-bounded in bytes, thread-safe.

Design: the cache only saves work; it never holds the only copy of data a request depends on.
vLLM splits its multimodal cache into a sender (front end) and a receiver (engine) that must
see items in the same order; a request then carries only a hash, and concurrency, eviction or a
rejected request can leave the two out of step (vLLM PRs 38418, 46747, 34749, 51897), and its
LRU was not thread-safe (issue 47958). Here the processed tensors always travel with the request
(``mm_process`` emits ``pixel_values`` with the ids), so a downstream consumer can never be
handed a hash it cannot resolve, whatever was evicted meanwhile and however many threads or
instances run. Values are immutable (read-only numpy arrays), so one cached array can be shared
by any number of concurrent requests without copying.

``get_or_process(key, fn)`` returns ``(value, hit)``: a hit moves the key to the most-recently-
used end; a miss runs ``fn()`` outside the lock, and concurrent callers asking for the same key
while it is being computed wait for that one computation (no duplicated work, one result for
all; if it raises, every waiter gets the exception and nothing is stored). A value larger than
the whole cache is returned but not stored. The one thing a hash alone can ask for is an item
sent earlier with a ``uuid`` and now referenced without data: ``get`` answers from the cache or
the caller reports a clear miss (``MultiModalCacheMissError``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


@dataclass(frozen=True)
class CacheStats:
    """A snapshot of the cache counters."""

    hits: int
    """Lookups answered without processing (including waits on an in-flight computation)."""

    misses: int
    """Lookups that ran the processing function."""

    evictions: int
    """Entries dropped to stay within ``max_bytes``."""

    entries: int
    """Entries held now."""

    current_bytes: int
    """Bytes held now (sum of the entries' sizes)."""

    max_bytes: int
    """The byte bound."""


class ProcessorCache(Generic[V]):
    """LRU map bounded by the total byte size of its values."""

    def __init__(self, max_bytes: int, size_of: Callable[[V], int]) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.max_bytes = int(max_bytes)
        self._size_of = size_of
        self._lock = threading.Lock()
        self._data: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._inflight: dict[Hashable, Future[V]] = {}
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._data

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, self._evictions, len(self._data), self._bytes, self.max_bytes)

    def get(self, key: Hashable) -> V | None:
        """The cached value (counted as a hit, refreshed in LRU order), or None."""
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                return None
            self._data.move_to_end(key)
            self._hits += 1
            return entry[0]

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._put_locked(key, value)

    def get_or_process(self, key: Hashable, fn: Callable[[], V]) -> tuple[V, bool]:
        """``(value, hit)``; ``fn`` runs at most once per key at a time, outside the lock."""
        with self._lock:
            entry = self._data.get(key)
            if entry is not None:
                self._data.move_to_end(key)
                self._hits += 1
                return entry[0], True
            fut = self._inflight.get(key)
            owner = fut is None
            if owner:
                fut = Future()
                self._inflight[key] = fut
        assert fut is not None
        if not owner:
            value = fut.result()  # re-raises the owner's exception
            with self._lock:
                self._hits += 1
            return value, True
        try:
            value = fn()
        except BaseException as e:
            with self._lock:
                self._inflight.pop(key, None)
            fut.set_exception(e)
            raise
        with self._lock:
            self._misses += 1
            self._put_locked(key, value)
            self._inflight.pop(key, None)
        fut.set_result(value)
        return value, False

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._bytes = 0

    def _put_locked(self, key: Hashable, value: V) -> None:
        size = int(self._size_of(value))
        old = self._data.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        if size > self.max_bytes:
            return  # larger than the whole cache: returned to the caller, never stored
        self._data[key] = (value, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (_, evicted) = self._data.popitem(last=False)
            self._bytes -= evicted
            self._evictions += 1
