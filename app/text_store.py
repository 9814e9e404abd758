"""Long explorer inputs kept under a short key, so a link can carry them: bounded by bytes, oldest evicted,
kept for the server's lifetime."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

from probe.errors import ProbeError

# long inputs kept for links: at most this many bytes (UTF-8) in all, oldest evicted
TEXT_STORE_BYTES = 32 * 2**20


def _size(text: str) -> int:
    return len(text.encode("utf-8", "replace"))


class TextStore:
    """Texts by key (the first 16 hex digits of their sha256), bounded by `capacity` bytes in all; one text
    may hold at most `entry_bytes`."""

    def __init__(self, entry_bytes: int, capacity: int = TEXT_STORE_BYTES) -> None:
        self.entry_bytes, self.capacity = entry_bytes, capacity
        self._texts: OrderedDict[str, str] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def save(self, text: str) -> str:
        """A short key for a long input (a ProbeError, shown in the page, for an input over `entry_bytes`: no
        explorer input is that long)."""
        if not isinstance(text, str):
            raise ProbeError("the input is not text; press Run again")
        size = _size(text)
        if size > self.entry_bytes:
            raise ProbeError(f"the input is {size:,} bytes; a link keeps inputs up to {self.entry_bytes:,} "
                             "bytes (the explorer reads no longer text): shorten it")
        key = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
        with self._lock:
            old = self._texts.pop(key, None)
            if old is not None:
                self._bytes -= _size(old)
            self._texts[key] = text
            self._bytes += size
            while self._bytes > self.capacity and len(self._texts) > 1:
                _, dropped = self._texts.popitem(last=False)
                self._bytes -= _size(dropped)
        return key

    def get(self, key: str) -> str | None:
        with self._lock:
            return self._texts.get(str(key))

    @property
    def nbytes(self) -> int:
        """Bytes (UTF-8) of the texts kept now."""
        with self._lock:
            return self._bytes
