"""KeyMassSink: every head's attention mass on named key sets, from row reductions (no α block kept or
handed out).

The question behind it is the commonest one asked of long inputs: how much of each head's attention goes to
the first tokens (the attention sink), to the document against the question, to special tokens, to one
segment of a protein complex? Each set is a weight per key, w_j (an indicator, or any weights); a row's mass
is Σ_j α_ij w_j, and the sink keeps, per (input, layer, head), its mean over the query rows (weighted by
`query_weight`, e.g. the attention mask). It is a :class:`~probe.engine.sinks.ReduceSink`: the engine sums
α·w in the product that gives the attention output, so on a CPU at long N the fused tile kernel never writes
α out of its tiles (docs/engine.md, "Row reductions").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from probe.engine.sinks import NOTHING, KeyReduction, ReducedBlock, SinkNeeds
from probe.errors import ProbeError


class KeyMassSink:
    """Mean attention mass of every head on named key sets, optionally with the rows' mean entropy and largest
    weight (a :class:`~probe.engine.sinks.ReduceSink`).

    Parameters
    ----------
    key_sets : mapping of str to torch.Tensor, each shape=(batch or 1, key), bool or float
        The key sets (True / a weight per key); every key of the forward (one forward per capture: the key
        axis must be the input's).
    layers : sequence of int, optional
        Layers to reduce (0-based); None: every layer with α.
    heads : sequence of int, optional
        Query heads to reduce in each of those layers; None: every head.
    query_weight : torch.Tensor, shape=(batch, query), optional
        Weight of each query row in the mean (the attention mask leaves padding rows out); None: every row 1.
    entropy : bool, default False
        Also the rows' mean entropy −Σ_j α log α (nats), as ``"entropy"``.
    max_alpha : bool, default False
        Also the rows' mean largest α, as ``"max_alpha"``.

    Examples
    --------
    >>> from probe.engine import capture
    >>> n = inputs["input_ids"].shape[1]  # zoo:induction, a 7-token prompt
    >>> first = torch.zeros(1, n, dtype=torch.bool); first[0, 0] = True
    >>> sink = KeyMassSink({"first token": first}, entropy=True)
    >>> with capture(loaded.model, sink), torch.inference_mode():
    ...     _ = loaded.model(**inputs)
    >>> sink.result()["first token"].shape  # [batch layer head], layers as captured
    torch.Size([1, 2, 4])
    """

    def __init__(
        self,
        key_sets: Mapping[str, torch.Tensor],  # name -> [batch|1 key]
        layers: Sequence[int] | None = None,
        heads: Sequence[int] | None = None,
        query_weight: torch.Tensor | None = None,  # [batch query]
        entropy: bool = False,
        max_alpha: bool = False,
    ) -> None:
        if not key_sets:
            raise ProbeError("KeyMassSink needs at least one key set")
        shapes = sorted({tuple(weights.shape) for weights in key_sets.values()})
        batches = {shape[0] for shape in shapes if len(shape) == 2}
        if (any(len(shape) != 2 for shape in shapes) or len({shape[1] for shape in shapes}) != 1
                or len(batches - {1}) > 1):
            raise ProbeError(f"KeyMassSink's key sets must all be [batch or 1, key] with one key count; got "
                             f"{shapes}")
        self.names = tuple(key_sets)
        batch = max(batches)
        # [batch|1 key set]
        self.weights = torch.stack([weights.float().expand(batch, -1) for weights in key_sets.values()],
                                   dim=-1)
        self.layers = None if layers is None else tuple(layers)
        self.heads = None if heads is None else tuple(heads)
        self.query_weight = None if query_weight is None else query_weight.float()  # [batch query]
        self.entropy, self.max_alpha = entropy, max_alpha
        self._sums: dict[int, torch.Tensor] = {}  # layer -> [batch head statistic]
        self._rows: dict[int, torch.Tensor] = {}  # layer -> [batch]: Σ of the rows' weights
        self._order: dict[int, tuple[int, ...]] = {}

    def needs(self, layer: int, n_heads: int, n_query: int) -> SinkNeeds:
        if self.layers is not None and layer not in self.layers:
            return NOTHING
        heads = self.heads if self.heads is not None else tuple(range(n_heads))
        return SinkNeeds(reduce=KeyReduction(heads, self.weights, self.entropy, self.max_alpha))

    def update_reduced(self, block: ReducedBlock) -> None:
        if block.step != 0:
            raise ProbeError("KeyMassSink reduces one forward pass per capture (its key sets are the input's "
                             "keys); open a new capture per input")
        n_batch, _, size, _ = block.weighted.shape
        parts = [block.weighted]  # [batch head block set]
        if self.entropy:
            parts.append(block.entropy[..., None])
        if self.max_alpha:
            parts.append(block.max_alpha[..., None])
        values = torch.cat(parts, dim=-1).double().cpu()  # [batch head block statistic]
        rows = slice(block.query_start, block.query_start + size)
        if self.query_weight is None:
            weight = torch.ones(n_batch, size, dtype=torch.float64)
        else:
            if self.query_weight.shape != (n_batch, block.n_query):
                raise ProbeError(f"query_weight is shaped {tuple(self.query_weight.shape)}; the forward has "
                                 f"[batch={n_batch}, query={block.n_query}]")
            weight = self.query_weight[:, rows].double().cpu()  # [batch block]
        total = torch.einsum("bhqs,bq->bhs", values, weight)  # [batch head statistic]
        if block.layer not in self._sums:
            self._sums[block.layer] = torch.zeros_like(total)
            self._rows[block.layer] = torch.zeros(n_batch, dtype=torch.float64)
            self._order[block.layer] = tuple(block.heads)
        self._sums[block.layer] += total
        self._rows[block.layer] += weight.sum(-1)

    @property
    def captured_layers(self) -> list[int]:
        """Layers reduced, ascending."""
        return sorted(self._sums)

    def result(self) -> dict[str, torch.Tensor]:
        """{set name (and "entropy", "max_alpha" when asked): `[batch layer head]` float64}: the mean over the
        query rows, layers in :attr:`captured_layers` order, heads in the order given; NaN for an input with
        no weighted row."""
        if not self._sums:
            raise ProbeError("nothing was reduced: run the model inside `with capture(model, sink)`")
        layers = self.captured_layers
        sums = torch.stack([self._sums[layer] for layer in layers], dim=1)  # [batch layer head statistic]
        rows = torch.stack([self._rows[layer] for layer in layers], dim=1)  # [batch layer]
        mean = torch.where(rows[..., None, None] > 0, sums / rows.clamp(min=1e-300)[..., None, None],
                           torch.nan)  # [batch layer head statistic]
        names = (*self.names, *(("entropy",) if self.entropy else ()),
                 *(("max_alpha",) if self.max_alpha else ()))
        return {name: mean[..., index] for index, name in enumerate(names)}
