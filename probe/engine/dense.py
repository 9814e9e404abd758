"""DenseSink: keeps α of selected layers and heads (for viewing and tests)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from probe.engine.sinks import NOTHING, AttentionBlock, SinkNeeds
from probe.errors import ProbeError


class DenseSink:
    """Keeps α of the selected layers and heads on the CPU, one tensor per (step, layer).

    A :class:`~probe.engine.sinks.Sink` (it declares ``causal_crop``: the causal triangle above the diagonal
    is never computed, the buffer is zero there). With attention sinks (gpt-oss) a kept row sums to less than
    1: the rest went to the learned sink. Memory: batch × heads × query × key values per layer and forward
    pass, so keep it to the heads you look at; :func:`~probe.engine.capture.capture_attention` is the one-call
    form.

    Parameters
    ----------
    layers : sequence of int, optional
        Layers to keep (0-based); None: every layer.
    heads : sequence of int, optional
        Query heads to keep in each of those layers, in this order; None: every head.
    dtype : torch.dtype, default torch.float32
        Storage dtype; ``torch.float16`` halves the memory.

    Examples
    --------
    >>> from probe.engine import capture
    >>> sink = DenseSink(layers=[0, 1], dtype=torch.float16)  # zoo:induction, a 7-token prompt
    >>> with capture(loaded.model, sink), torch.inference_mode():
    ...     _ = loaded.model.generate(**inputs, max_new_tokens=5, do_sample=False)
    >>> sink.steps, sink.captured_layers
    (5, [0, 1])
    >>> sink.attention(step=3).shape  # [batch layer head query key]
    torch.Size([1, 2, 4, 1, 10])
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
        self._store: dict[tuple[int, int], torch.Tensor] = {}

    def needs(self, layer: int, n_heads: int, n_query: int) -> SinkNeeds:
        if self.layers is not None and layer not in self.layers:
            return NOTHING
        return SinkNeeds(heads=self.heads if self.heads is not None else tuple(range(n_heads)),
                         causal_crop=True)

    def update(self, block: AttentionBlock) -> None:
        buffer = self._store.get((block.step, block.layer))
        if buffer is None:
            batch, heads = block.alpha.shape[:2]
            # [batch head query key]
            buffer = torch.zeros(batch, heads, block.n_query, block.n_key, dtype=self.dtype)
            self._store[(block.step, block.layer)] = buffer
        rows = slice(block.query_start, block.query_start + block.alpha.shape[2])
        buffer[:, :, rows, : block.alpha.shape[-1]] = block.alpha.to("cpu", self.dtype)

    @property
    def steps(self) -> int:
        """Forward passes captured (1 + the last step)."""
        return 1 + max((step for step, _ in self._store), default=-1)

    @property
    def captured_layers(self) -> list[int]:
        """Layers with α in the sink, ascending."""
        return sorted({layer for _, layer in self._store})

    def attention(self, step: int = 0) -> torch.Tensor:
        """α of one forward pass.

        Parameters
        ----------
        step : int, default 0
            Forward pass within the capture, from 0 (``generate()``: one per new token).

        Returns
        -------
        torch.Tensor, shape=(batch, layer, head, query, key), the sink's dtype
            On the CPU; the captured layers in ascending order, heads in the order given.

        Raises
        ------
        ProbeError
            Nothing was captured for `step`.
        """
        layers = [layer for s, layer in sorted(self._store) if s == step]
        if not layers:
            raise ProbeError(
                f"nothing was captured for step {step}: run the model inside `with capture(...)`")
        # [batch layer head query key]
        return torch.stack([self._store[(step, layer)] for layer in layers], dim=1)
