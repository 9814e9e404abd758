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
    """α for a block of query rows of one layer, for the heads a sink asked for.

    The engine hands one to :meth:`Sink.update` per block of at most
    :data:`~probe.engine.session.MAX_BLOCK_ROWS` query rows; the rows of a forward pass arrive in order, layer by
    layer (the layer order is the model's). ``alpha`` is a view into a buffer the engine reuses: copy what you keep.

    Attributes
    ----------
    step : int
        Forward pass within the capture, from 0 (``generate()``: one per new token).
    layer : int
        Layer index, 0-based.
    heads : tuple of int
        Query-head index of each entry on the head axis of `alpha`, in the order the sink's
        :meth:`Sink.heads_for` returned them.
    query_start : int
        Row of this block's first query among this forward pass's queries.
    n_query : int
        Query rows in this forward pass (all blocks together).
    query_offset : int
        Absolute position of this forward pass's first query (the past length with a KV cache, else 0).
    n_key : int
        Keys in this forward pass (cached keys included).
    alpha : torch.Tensor, shape=(batch, head, query, key), float32
        On the model's device; ``query`` = this block's rows, ``key`` = all `n_key` keys — except for sinks that set
        ``accepts_causal_crop = True``: under a causal mask they get only keys ``[0, alpha.shape[-1])`` and every α
        beyond is exactly zero (the engine never computes the masked triangle).
    """

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
    """What the engine streams dense α blocks into (a structural protocol: no base class to inherit).

    A sink may also set the attribute ``accepts_causal_crop = True`` to receive causal blocks without their
    all-zero key tail (see :class:`AttentionBlock`), and may implement :class:`GatherSink` as well.
    """

    def heads_for(self, layer: int, n_heads: int) -> Sequence[int]:
        """Query heads of `layer` this sink wants.

        Called once per layer and forward pass, before any block of that layer.

        Parameters
        ----------
        layer : int
            Layer index, 0-based.
        n_heads : int
            Query heads of the layer (with grouped-query attention: query heads, not key/value heads).

        Returns
        -------
        sequence of int
            Head indices in ``range(n_heads)``; empty: no block of this layer is sent to the sink (and none is
            computed unless another sink wants it).
        """
        ...

    def update(self, block: AttentionBlock) -> None:
        """Receive α for one block of query rows.

        Parameters
        ----------
        block : AttentionBlock
            ``block.alpha`` has shape (batch, head, query, key), float32, heads as :meth:`heads_for` returned
            them. The tensor is only valid during the call: reduce it or copy it.
        """
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
        """The heads of `layer` this sink wants and, per query row, the keys it wants α at.

        Parameters
        ----------
        layer : int
            Layer index, 0-based.
        n_heads : int
            Query heads of the layer.

        Returns
        -------
        tuple of (sequence of int, torch.Tensor), or None
            ``(heads, slots)``: query-head indices in ``range(n_heads)``, and ``slots``, shape (batch, query, slot),
            long: the key index of each slot of each query row of this forward pass, −1 = no key (rows with fewer
            keys pad with −1; :func:`probe.heads.registry.target_slots` builds them from a bool pattern). None:
            nothing from this layer.
        """
        ...

    def update_gathered(self, layer: int, heads: tuple[int, ...], alpha: torch.Tensor) -> None:
        """Receive α at the slots of one layer (all query rows of the forward pass at once).

        Parameters
        ----------
        layer : int
            Layer index, 0-based.
        heads : tuple of int
            The heads :meth:`gather_for` returned, in that order.
        alpha : torch.Tensor, shape=(batch, head, query, slot), float32
            α(i, slots[b, i, s]) on the model's device; exactly 0 where the slot is −1 or the key is masked.
        """
        ...
