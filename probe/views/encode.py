"""α for the browser: compact typed arrays in base64, never JSON lists of floats.

Each head's map is quantised to uint8 on its own scale, q = round(255 · α / top) with top = the head's largest
α (a float32 per head): one byte per cell, absolute error ≤ top / 510. A map has side = ceil(N / factor)
cells, max- pooled from N tokens when the budget asks for it (`map_side`). The budget in bytes per head is
side² + 4.
"""

from __future__ import annotations

import base64
import math

import numpy as np

DEFAULT_BUDGET = 4 * 2**20  # bytes of α maps in one inline view (all heads together; base64 adds a third)
MAX_SIDE = 1024  # the app's limit: inputs up to 1,024 tokens
THUMB_BINS = 24  # thumbnail side in the grid of every head


def b64(array: np.ndarray) -> str:
    """Little-endian bytes of `array`, base64."""
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")


def quantise(maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[... side side] α -> (uint8 of the same shape, float32 [...] tops): q = round(255 · α / top) per
    map."""
    values = np.nan_to_num(np.asarray(maps, dtype=np.float32), nan=0.0).clip(0.0, None)
    tops = values.reshape(*values.shape[:-2], -1).max(-1) if values.size else np.zeros(values.shape[:-2])
    tops = np.maximum(tops, 1e-12).astype("<f4")  # [...]
    quantised = np.rint(values / tops[..., None, None] * 255).clip(0, 255).astype(np.uint8)
    return quantised, tops


def dequantise(quantised: np.ndarray, tops: np.ndarray) -> np.ndarray:
    """The inverse of quantise, as the browser computes it: float32 α."""
    return quantised.astype(np.float32) * (tops.astype(np.float32)[..., None, None] / 255)


def pooling_factor(n_tokens: int, n_maps: int, budget: int, max_side: int | None = None) -> int:
    """Tokens per map cell so that n_maps maps of side ceil(N / factor) fit `budget` bytes (and
    `max_side`)."""
    limit = max(1, int(math.isqrt(max(1, budget // max(1, n_maps)))))
    limit = min(limit, max_side or MAX_SIDE)
    return max(1, math.ceil(n_tokens / limit))


def bytes_per_head(side: int) -> int:
    """Bytes one head's map costs in a view: side² (uint8) + 4 (its float32 scale); base64 adds a third."""
    return side * side + 4


__all__ = ["DEFAULT_BUDGET", "MAX_SIDE", "THUMB_BINS", "b64", "bytes_per_head", "dequantise",
           "pooling_factor", "quantise"]
