"""A thread-safe LRU cache bounded by entries and bytes (captures, thumbnails, protein results)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np


class LRUCache:
    """A thread-safe least-recently-used cache of numpy arrays, bounded by entries and by bytes."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
            self.misses += 1
            return None

    def peek(self, key):
        """Like get, but uncounted and without refreshing the entry (for a second look under a lock)."""
        with self._lock:
            return self._items.get(key)

    def get_or_compute(self, key, compute: Callable[[], object],
                       guard: Callable[[], AbstractContextManager]):
        """The cached value of `key`, or `compute()` run inside `guard()` (the inference gate) and kept.

        The one way the dashboard caches a computation: a look without the guard (a hit costs no wait), then a
        second look inside it — another thread may have computed the value while this one waited — and only
        then the computation."""
        value = self.get(key)
        if value is not None:
            return value
        with guard():
            value = self.peek(key)
            if value is None:
                value = compute()
                self.put(key, value)
        return value

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > 1 and (len(self._items) > self.max_entries
                                            or self.nbytes > self.max_bytes):
                self._items.popitem(last=False)

    @property
    def nbytes(self) -> int:
        return sum(_nbytes(value) for value in self._items.values())

    def __len__(self) -> int:
        return len(self._items)


def _nbytes(value) -> int:
    """Bytes an entry holds: an array's buffer, an object's own `nbytes` (a protein result), else 1 KiB."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    size = getattr(value, "nbytes", None)
    return int(size) if isinstance(size, (int, np.integer)) else 1024
