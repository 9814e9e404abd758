"""What the engine streams into: the :class:`SinkNeeds` a sink declares, the :class:`AttentionBlock` it
receives, and the sink protocols.

Every sink says what it needs of a layer in one place, :meth:`Sink.needs`, which returns a frozen
:class:`SinkNeeds`; the engine reads it once per layer and forward pass and never looks for optional
attributes (a misspelt method name is an error, not a capability silently never used). A :class:`Sink`
receives dense α blocks (the heads it asked for), a :class:`GatherSink` α only at a few key slots per query
row, a :class:`ReduceSink` only row reductions Σ_j α_ij w_j over the keys (no α block leaves the attention
pass), an :class:`OutputNormSink` the output norms of a layer; a sink may be several at once. Concrete sinks
live one per module: :mod:`probe.engine.dense` here, the head-score sink in :mod:`probe.heads.scores`, the
contact sink in :mod:`probe.proteins.contacts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from probe.errors import ProbeError

# only for the annotation: output_norms imports nothing from here, but keeps the import graph flat
if TYPE_CHECKING:
    from probe.engine.output_norms import OutputNorms, OutputProjections


@dataclass(frozen=True)
class KeyReduction:
    """Row reductions of α over the keys that a :class:`ReduceSink` takes instead of dense blocks.

    For every query row i of `heads` the sink receives ``weighted[..., f] = Σ_j α_ij w_jf`` (the attention
    mass on a key set when column f is its indicator, the mean key position when it is j). The engine sums
    them in the same product that gives the attention output (α·[V | W]), so on the fused CPU kernel at long N
    α never leaves the cache; elsewhere they are reduced from the α block it computes anyway. Results equal
    the sums over a dense block within float32 rounding.

    Attributes
    ----------
    heads : tuple of int
        Query heads to reduce.
    weights : torch.Tensor, shape=(batch or 1, key, feature), float
        w_jf for every key of the forward (cached keys included); a batch axis of 1 serves every row.
    entropy : bool
        Also each row's −Σ_j α_ij log α_ij.
    max_alpha : bool
        Also each row's largest α.
    """

    heads: tuple[int, ...]
    weights: torch.Tensor  # [batch|1 key feature]
    entropy: bool = False
    max_alpha: bool = False

    def checked_weights(self, owner: str, layer: int, n_batch: int, n_key: int) -> torch.Tensor:
        """`weights` as float32 `[batch|1 key feature]`, or a :class:`~probe.errors.ProbeError` naming the
        shape a layer of `n_batch` rows and `n_key` keys needs (`owner`: the sink's name)."""
        weights = self.weights
        if weights.dim() != 3 or weights.shape[1] != n_key or weights.shape[0] not in (1, n_batch):
            raise ProbeError(f"{owner}'s KeyReduction.weights is shaped {tuple(weights.shape)}; layer "
                             f"{layer} needs [1 or batch={n_batch}, key={n_key}, feature]")
        return weights.float()


@dataclass(frozen=True)
class ReducedBlock:
    """Row reductions of α for a block of query rows of one layer (what :meth:`ReduceSink.update_reduced`
    receives). Fields as :class:`AttentionBlock`; rows arrive in order, layer by layer.

    Attributes
    ----------
    step, layer, heads, query_start, n_query, query_offset, n_key
        As in :class:`AttentionBlock`.
    weighted : torch.Tensor, shape=(batch, head, block, feature), float32
        Σ_j α_ij w_jf of each row (0 for a fully masked row).
    entropy : torch.Tensor or None, shape=(batch, head, block), float32
        −Σ_j α_ij log α_ij, when the reduction asked for it.
    max_alpha : torch.Tensor or None, shape=(batch, head, block), float32
        max_j α_ij, when the reduction asked for it.
    learned_sink_mass : torch.Tensor or None, shape=(batch, head, block), float32
        The weight on the layer's learned attention sink (gpt-oss), as in :class:`AttentionBlock`.
    """

    step: int
    layer: int
    heads: tuple[int, ...]
    query_start: int
    n_query: int
    query_offset: int
    n_key: int
    weighted: torch.Tensor  # [batch head block feature] float32
    entropy: torch.Tensor | None = None  # [batch head block] float32
    max_alpha: torch.Tensor | None = None  # [batch head block] float32
    learned_sink_mass: torch.Tensor | None = None  # [batch head block] float32


@dataclass(frozen=True)
class SinkNeeds:
    """What a sink wants from one layer of one forward pass (what :meth:`Sink.needs` returns).

    Attributes
    ----------
    heads : tuple of int
        Query heads whose dense α blocks the sink receives through :meth:`Sink.update`; empty: none (and no
        block is computed for it).
    rows : torch.Tensor or None, shape=(row,), long
        Sample the query rows: α of `heads` arrives for these rows only (any order, repeats dropped), in
        blocks that carry ``block.rows``; the engine then keeps the fused kernel and rebuilds those rows
        alone. None, or every row: the ordinary blocks.
    gather : tuple of (sequence of int, torch.Tensor), or None
        ``(heads, slots)``: α at a few keys per query row, delivered to :meth:`GatherSink.update_gathered`;
        ``slots`` has shape (batch, query, slot), long, −1 = no key (:func:`probe.heads.registry.target_slots`
        builds them from a bool pattern). None: nothing gathered.
    entropy : bool
        Also hand each dense block its rows' entropy −Σ_j α log α (``block.entropy``), computed without a
        logarithm where the scores allow it.
    reduce : KeyReduction or None
        Row reductions Σ_j α_ij w_j of some heads, delivered to :meth:`ReduceSink.update_reduced`; no dense
        block is handed to the sink for them. None: none.
    output_projections : OutputProjections or None
        Output norms (Kobayashi et al.): where the layer's output projection is; the sink then receives
        :meth:`OutputNormSink.update_output_norms` before the layer's α. None: no norms.
    causal_crop : bool
        Under a causal mask, receive blocks without their all-zero key tail (``alpha.shape[-1] ≤ n_key``;
        every α beyond is exactly zero and never computed). False: blocks are zero-padded to all keys.
    """

    heads: tuple[int, ...] = ()
    rows: torch.Tensor | None = None  # [row] long
    gather: tuple[Sequence[int], torch.Tensor] | None = None  # (heads, slots [batch query slot] long)
    entropy: bool = False
    reduce: KeyReduction | None = None
    output_projections: OutputProjections | None = None
    causal_crop: bool = False


NOTHING = SinkNeeds()  # what a sink needs of a layer it does not look at


@dataclass(frozen=True)
class AttentionBlock:
    """α for a block of query rows of one layer, for the heads a sink asked for.

    The engine hands one to :meth:`Sink.update` per block of at most
    :data:`~probe.engine.session.MAX_BLOCK_ROWS` query rows; the rows of a forward pass arrive in order, layer
    by layer (the layer order is the model's). ``alpha`` is a view into a buffer the engine reuses: copy what
    you keep.

    With attention sinks (gpt-oss's ``s_aux``: one learned logit per head in every row's softmax) a row's α
    sums to 1 − ``learned_sink_mass`` over the keys: the rest of the row's weight went to the sink, which has
    no value.

    Attributes
    ----------
    step : int
        Forward pass within the capture, from 0 (``generate()``: one per new token).
    layer : int
        Layer index, 0-based.
    heads : tuple of int
        Query-head index of each entry on the head axis of `alpha`, in the order the sink's
        :class:`SinkNeeds` gave them.
    query_start : int
        Row of this block's first query among this forward pass's queries.
    n_query : int
        Query rows in this forward pass (all blocks together).
    query_offset : int
        Position of this forward pass's first query among the keys (the past length with a KV cache, else 0).
    n_key : int
        Keys in this forward pass (cached keys included). A sliding-window cache (Mistral, Gemma 2, gpt-oss)
        keeps only the last keys of a sliding layer: its keys are then the last `n_key` positions, and
        `query_offset` counts within them.
    alpha : torch.Tensor, shape=(batch, head, query, key), float32
        On the model's device; ``query`` = this block's rows, ``key`` = all `n_key` keys — except for sinks
        that declare ``causal_crop``: under a causal mask they get only keys ``[0, alpha.shape[-1])`` and
        every α beyond is exactly zero (the engine never computes the masked triangle).
    rows : torch.Tensor or None, shape=(block,), long
        For a sink that sampled its rows: this block's row indices among the forward's queries, ascending
        (`query_start` is then ``rows[0]``). None: the rows ``query_start, query_start + 1, …``.
    entropy : torch.Tensor or None, shape=(batch, head, block), float32
        −Σ_j α_ij log α_ij of each row over the keys, when the sink declared ``entropy``; else None.
    learned_sink_mass : torch.Tensor or None, shape=(batch, head, block), float32
        The weight each row gives the layer's learned attention sink, exp(sink_h − lse'_i); None when the
        layer has none (its rows sum to 1).
    """

    step: int  # forward pass within the capture (generate(): one per new token)
    layer: int
    heads: tuple[int, ...]  # query-head index of each entry on the head axis of `alpha`
    query_start: int  # row of this block's first query among this forward's queries
    n_query: int  # query rows in this forward (all blocks together)
    query_offset: int  # absolute position of this forward's first query (past length with a KV cache)
    n_key: int  # keys in this forward
    # [batch head query key] float32; query = this block's rows. key = all n_key keys, except for sinks that
    # declare `causal_crop`: under a causal mask they get only keys [0, alpha.shape[-1]) and every α beyond is
    # exactly zero.
    alpha: torch.Tensor
    # [block] long, ascending: a sampling sink's rows; None: consecutive rows
    rows: torch.Tensor | None = None
    # [batch head block] float32: −Σ_j α log α, when the sink declared entropy
    entropy: torch.Tensor | None = None
    # [batch head block] float32: weight on the s_aux sink, or None
    learned_sink_mass: torch.Tensor | None = None


@runtime_checkable
class Sink(Protocol):
    """What the engine streams dense α blocks into (a structural protocol: no base class to inherit)."""

    def needs(self, layer: int, n_heads: int, n_query: int) -> SinkNeeds:
        """What this sink wants of `layer` in this forward pass.

        Called once per layer and forward pass, before anything of that layer is computed.

        Parameters
        ----------
        layer : int
            Layer index, 0-based.
        n_heads : int
            Query heads of the layer (with grouped-query attention: query heads, not key/value heads).
        n_query : int
            Query rows of this forward pass (1 per decoding step with a KV cache).

        Returns
        -------
        SinkNeeds
            Head indices in ``range(n_heads)`` and the optional capabilities; :data:`NOTHING` for none.
        """
        ...

    def update(self, block: AttentionBlock) -> None:
        """Receive α for one block of query rows.

        Parameters
        ----------
        block : AttentionBlock
            ``block.alpha`` has shape (batch, head, query, key), float32, heads as :class:`SinkNeeds` gave
            them. The tensor is only valid during the call: reduce it or copy it.
        """
        ...


@runtime_checkable
class GatherSink(Protocol):
    """A sink that needs α only at a few keys per query row (head scores: the target keys).

    Its :class:`SinkNeeds` has ``gather = (heads, slots)``; the engine then computes
    α(i, j) = exp(s_ij − lse'_i) at those keys alone — O(query · slot) per head instead of O(query · key) —
    and never builds a dense block for it. A sink may implement both protocols.
    """

    def needs(self, layer: int, n_heads: int, n_query: int) -> SinkNeeds:
        """What this sink wants of `layer` (see :meth:`Sink.needs`)."""
        ...

    def update_gathered(self, layer: int, heads: tuple[int, ...], alpha: torch.Tensor) -> None:
        """Receive α at the slots of one layer (all query rows of the forward pass at once).

        Parameters
        ----------
        layer : int
            Layer index, 0-based.
        heads : tuple of int
            The heads of ``SinkNeeds.gather``, in that order.
        alpha : torch.Tensor, shape=(batch, head, query, slot), float32
            α(i, slots[b, i, s]) on the model's device; exactly 0 where the slot is −1 or the key is masked.
        """
        ...


@runtime_checkable
class ReduceSink(Protocol):
    """A sink that needs only row reductions of α over the keys (masses on key sets, mean key positions,
    entropy, the largest weight): its :class:`SinkNeeds` has ``reduce``. A sink may implement several
    protocols."""

    def needs(self, layer: int, n_heads: int, n_query: int) -> SinkNeeds:
        """What this sink wants of `layer` (see :meth:`Sink.needs`)."""
        ...

    def update_reduced(self, block: ReducedBlock) -> None:
        """Receive the reductions of one block of query rows.

        Parameters
        ----------
        block : ReducedBlock
            ``block.weighted`` has shape (batch, head, block, feature), heads as ``KeyReduction.heads``. Valid
            only during the call.
        """
        ...


@runtime_checkable
class OutputNormSink(Protocol):
    """A sink whose :class:`SinkNeeds` names ``output_projections``: it receives the norms of each layer
    before that layer's α (dense blocks or gathered slots)."""

    def needs(self, layer: int, n_heads: int, n_query: int) -> SinkNeeds:
        """What this sink wants of `layer` (see :meth:`Sink.needs`)."""
        ...

    def update_output_norms(self, layer: int, norms: OutputNorms | None) -> None:
        """Norms of `layer` (valid during this forward), or None when the layer's output projection is
        unknown."""
        ...
