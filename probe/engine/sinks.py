"""What the engine streams into: the :class:`AttentionBlock` it hands out and the two sink protocols.

A :class:`Sink` receives dense α blocks (one block of query rows, the heads it asked for); a :class:`GatherSink`
receives α only at a few key slots per query row. A sink may implement both. Concrete sinks live one per module:
:mod:`probe.engine.dense` here, the head-score sink in :mod:`probe.heads.scores`, the contact sink in
:mod:`probe.proteins.contacts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class AttentionBlock:
    """α for a block of query rows of one layer, for the heads a sink asked for."""

    step: int  # forward pass within the capture (generate(): one per new token)
    layer: int
    heads: tuple[int, ...]  # query-head index of each entry on the head axis of `alpha`
    query_start: int  # row of this block's first query among this forward's queries
    n_query: int  # query rows in this forward (all blocks together)
    query_offset: int  # absolute position of this forward's first query (past length with a KV cache)
    n_key: int  # keys in this forward
    # [batch head query key] float32; query = this block's rows. key = all n_key keys, except for sinks that set
    # `accepts_causal_crop = True`: under a causal mask they get only keys [0, alpha.shape[-1]) and every α beyond
    # is exactly zero (the engine never computes the masked triangle).
    alpha: torch.Tensor
    # Rows of a sink that sampled its query rows (`rows_for`): this block's row indices among the forward's queries,
    # `[block]` long, ascending (query_start is then rows[0]). None: the rows query_start, query_start + 1, ...
    rows: torch.Tensor | None = None
    # −Σ_j α log α of each row `[batch head block]` float32, when some sink sets `wants_entropy = True` (the engine
    # gets it without a logarithm: lse − scale·q·(αK) − Σ α·mask, one more α·K product); else None.
    entropy: torch.Tensor | None = None


class Sink(Protocol):
    """What the engine streams α into."""

    def heads_for(self, layer: int, n_heads: int) -> Sequence[int]:
        """Query heads of `layer` this sink wants (empty: none)."""
        ...

    def update(self, block: AttentionBlock) -> None:
        """Receive α for one query block; the block's tensor is only valid during the call."""
        ...


# A sink may also set `accepts_causal_crop = True` to receive causal blocks without their all-zero key tail, and
# implement `rows_for(layer, n_query) -> LongTensor [rows] | None` to receive α on those query rows only (ascending,
# in blocks that carry `rows`; None or every row: the ordinary blocks). The engine then keeps the fused kernel and
# rebuilds α of the chosen rows alone — a per-row statistic averaged over a row sample costs a fraction of a forward.


class GatherSink(Protocol):
    """A sink that needs α only at a few keys per query row (head scores: the target keys).

    The engine then computes α(i, j) = exp(scale·q_i·k_j + mask_ij − lse_i) at those keys alone — O(query · slot)
    per head instead of O(query · key) — and never builds a dense block for it. A sink may implement both protocols.
    """

    def gather_for(self, layer: int, n_heads: int) -> tuple[Sequence[int], torch.Tensor] | None:
        """(heads, key slots `[batch query slot]` long, −1 = no key) for `layer`, or None."""
        ...

    def update_gathered(self, layer: int, heads: tuple[int, ...], alpha: torch.Tensor) -> None:
        """α at the slots, `[batch head query slot]` float32, exactly 0 where the slot is −1."""
        ...
