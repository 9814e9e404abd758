"""The capture sink of the head grid: every head's α max-pooled into a small grid as the blocks stream by."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from probe.engine.sinks import SinkNeeds
from probe.errors import ProbeError


class PoolSink:
    """A capture sink that max-pools every head's α into a small grid as the blocks stream by.

    `pooled` is [layer head query_bin key_bin] float32 over `layers` (the layers with α, ascending: a hybrid's
    softmax-attention layers under the model's own numbers): each cell keeps the strongest weight of its
    factor × factor block of (query, key) pairs, factor = ceil(n / bins). Causal blocks arrive without their
    all-zero key tail (`SinkNeeds.causal_crop`), so the engine never computes the masked triangle for the
    grid.
    """

    def __init__(self, layers: Sequence[int], n_tokens: int, bins: int) -> None:
        self.factor = max(1, math.ceil(n_tokens / bins))
        self.n_bins = math.ceil(n_tokens / self.factor)
        self.layers = tuple(layers)
        self._pooled: dict = {}

    def needs(self, layer: int, n_heads: int, n_query: int) -> SinkNeeds:
        return SinkNeeds(heads=tuple(range(n_heads)), causal_crop=True)

    def update(self, block) -> None:
        # [head query key] this block's rows; keys beyond alpha.shape[-1] are exactly 0
        alpha = block.alpha[0]
        heads, rows, keys = alpha.shape
        key_bins = math.ceil(keys / self.factor)
        pad = key_bins * self.factor - keys
        if pad:
            alpha = torch.nn.functional.pad(alpha, (0, pad))  # α ≥ 0, so zero padding never wins a max
        by_key = alpha.reshape(heads, rows, key_bins, self.factor).amax(-1).float()  # [head query key_bin]
        grid = self._pooled.get(block.layer)
        if grid is None:
            grid = self._pooled[block.layer] = torch.zeros(heads, self.n_bins, self.n_bins)
        start = block.query_start
        for row_bin in range(start // self.factor, (start + rows - 1) // self.factor + 1):
            low, high = (max(row_bin * self.factor, start) - start,
                         min((row_bin + 1) * self.factor, start + rows) - start)
            cell = grid[:, row_bin, :key_bins]  # [head key_bin]
            torch.maximum(cell, by_key[:, low:high].amax(1), out=cell)

    @property
    def pooled(self):
        if tuple(sorted(self._pooled)) != self.layers:
            raise ProbeError("the model's attention was not captured for every layer")
        return torch.stack([self._pooled[layer] for layer in self.layers])  # [layer head query_bin key_bin]
