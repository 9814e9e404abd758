"""Every head's α max-pooled as it streams by: one forward pass, no [layer head N N] tensor kept.

A cell of a pooled map keeps the strongest weight of its factor × factor block of (query, key) pairs, so sharp
patterns (a previous-token diagonal, an induction stripe) stay visible at any size.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from probe.engine import SinkNeeds, capture
from probe.errors import ProbeError
from probe.models import model_inputs


class PoolSink:
    """A capture sink keeping α of the chosen heads max-pooled by `factor` (a :class:`probe.engine.Sink`).

    Parameters
    ----------
    n_tokens : int
        Tokens of the input (query and key axes).
    factor : int
        Tokens per cell; the maps have side ceil(n_tokens / factor).
    heads : iterable of (layer, head), optional
        The heads to keep; None: every head of every layer.

    Examples
    --------
    >>> from probe.engine import capture
    >>> sink = PoolSink(n_tokens=7, factor=2, heads=[(0, 1), (1, 0)])  # zoo:induction, a 7-token prompt
    >>> with capture(loaded.model, sink), torch.inference_mode():
    ...     _ = loaded.model(**inputs)
    >>> maps = sink.maps()  # (layer, head) -> [side side], side = ceil(7 / 2)
    >>> maps[(0, 1)].round(2)  # the previous-token head, max-pooled 2 × 2
    array([[1.  , 0.  , 0.  , 0.  ],
           [0.99, 1.  , 0.  , 0.  ],
           [0.  , 0.99, 0.99, 0.  ],
           [0.  , 0.  , 0.99, 0.  ]], dtype=float32)
    """

    def __init__(self, n_tokens: int, factor: int, heads: Iterable[tuple[int, int]] | None = None) -> None:
        self.factor = max(1, int(factor))
        self.side = math.ceil(n_tokens / self.factor)
        self.heads = None if heads is None else sorted({(int(layer), int(head)) for layer, head in heads})
        self._maps: dict[int, torch.Tensor] = {}  # layer -> [head side side]
        self._order: dict[int, tuple[int, ...]] = {}

    def needs(self, layer: int, n_heads: int, n_query: int) -> SinkNeeds:
        """Dense blocks of the chosen heads; causal blocks come without their all-zero key tail."""
        return SinkNeeds(heads=tuple(self.heads_for(layer, n_heads)), causal_crop=True)

    def heads_for(self, layer: int, n_heads: int) -> Sequence[int]:
        if self.heads is None:
            return range(n_heads)
        return tuple(head for at, head in self.heads if at == layer and head < n_heads)

    def update(self, block) -> None:
        alpha = block.alpha[0]  # [head query key] this block's rows
        heads, rows, keys = alpha.shape
        key_bins = math.ceil(keys / self.factor)
        pad = key_bins * self.factor - keys
        if pad:
            alpha = torch.nn.functional.pad(alpha, (0, pad))  # α ≥ 0: zero padding never wins a max
        # [head query key_bin]
        by_key = alpha.reshape(heads, rows, key_bins, self.factor).amax(-1).float().cpu()
        grid = self._maps.get(block.layer)
        if grid is None:
            grid = self._maps[block.layer] = torch.zeros(heads, self.side, self.side)  # [head side side]
            self._order[block.layer] = tuple(block.heads)
        start = block.query_start
        for row_bin in range(start // self.factor, (start + rows - 1) // self.factor + 1):
            low = max(row_bin * self.factor, start) - start
            high = min((row_bin + 1) * self.factor, start + rows) - start
            cell = grid[:, row_bin, :key_bins]  # [head key_bin]
            torch.maximum(cell, by_key[:, low:high].amax(1), out=cell)

    def maps(self) -> dict[tuple[int, int], np.ndarray]:
        """(layer, head) -> [side side] float32 pooled α."""
        out = {}
        for layer, grid in self._maps.items():
            for index, head in enumerate(self._order[layer]):
                out[(layer, head)] = grid[index].numpy()
        return out


def pooled_attention(loaded, input_ids: torch.Tensor, map_factor: int, map_heads, thumb_bins: int):
    """One forward pass: (maps {(layer, head): [side side]}, thumbnails [layer head t t]) float32.

    A hybrid's layers without α (linear attention, state-space) keep their place under the model's own
    numbers, as all-zero thumbnails.

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        The model.
    input_ids : torch.Tensor
        `[1 token]` long.
    map_factor : int
        The pooling factor of the kept maps.
    map_heads : collection of (layer, head) or None
        The heads whose maps are kept (None: all).
    thumb_bins : int
        Every head's thumbnail is pooled to at most this many bins a side.

    Returns
    -------
    tuple
        (maps: dict of (layer, head) to ndarray `[side side]`, thumbnails: ndarray `[layer head t t]`),
        float32.
    """
    n = int(input_ids.shape[1])
    maps = PoolSink(n, map_factor, map_heads)
    thumbs = PoolSink(n, math.ceil(n / thumb_bins))
    input_ids = input_ids.to(loaded.device)
    inputs = model_inputs(loaded, input_ids, torch.ones_like(input_ids))  # encoder–decoders: decoder ids too
    with capture(loaded.model, [maps, thumbs]), torch.inference_mode():
        loaded.model(**inputs)
    grid = thumbs.maps()
    if set(grid) != set(loaded.heads):  # every head with α (a hybrid's other layers have none: blank tiles)
        raise ProbeError(f"{loaded.name}: the attention of only {len(grid)} of {len(loaded.heads)} "
                         "heads was captured; the view needs every layer")
    side = thumbs.side
    stacked = np.zeros((loaded.n_layers, loaded.n_heads, side, side), dtype=np.float32)  # [layer head t t]
    for (layer, head), tile in grid.items():
        stacked[layer, head] = tile
    return maps.maps(), stacked


__all__ = ["PoolSink", "pooled_attention"]
