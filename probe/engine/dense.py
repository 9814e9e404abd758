"""DenseSink: keeps α of selected layers and heads (for viewing and tests)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from probe.engine.sinks import AttentionBlock
from probe.errors import ProbeError


class DenseSink:
    """Keeps α of the selected layers and heads on the CPU, one tensor per (step, layer).

    `attention(step)` returns `[batch layer head query key]`. With `dtype=torch.float16` it halves memory.
    """

    def __init__(
        self,
        layers: Sequence[int] | None = None,  # None: every layer
        heads: Sequence[int] | None = None,  # None: every head
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.layers = None if layers is None else tuple(layers)
        self.heads = None if heads is None else tuple(heads)
        self.dtype = dtype
        self.accepts_causal_crop = True
        self._store: dict[tuple[int, int], torch.Tensor] = {}

    def heads_for(self, layer: int, n_heads: int) -> Sequence[int]:
        if self.layers is not None and layer not in self.layers:
            return ()
        return self.heads if self.heads is not None else range(n_heads)

    def update(self, block: AttentionBlock) -> None:
        buffer = self._store.get((block.step, block.layer))
        if buffer is None:
            batch, heads = block.alpha.shape[:2]
            buffer = torch.zeros(batch, heads, block.n_query, block.n_key, dtype=self.dtype)  # [batch head query key]
            self._store[(block.step, block.layer)] = buffer
        rows = slice(block.query_start, block.query_start + block.alpha.shape[2])
        buffer[:, :, rows, : block.alpha.shape[-1]] = block.alpha.to("cpu", self.dtype)

    @property
    def steps(self) -> int:
        return 1 + max((step for step, _ in self._store), default=-1)

    @property
    def captured_layers(self) -> list[int]:
        return sorted({layer for _, layer in self._store})

    def attention(self, step: int = 0) -> torch.Tensor:
        """α of one forward pass: `[batch layer head query key]`, layers in ascending order."""
        layers = [layer for s, layer in sorted(self._store) if s == step]
        if not layers:
            raise ProbeError(f"nothing was captured for step {step}: run the model inside `with capture(...)`")
        return torch.stack([self._store[(step, layer)] for layer in layers], dim=1)  # [batch layer head query key]
