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

    Examples
    --------
    >>> first = torch.zeros(1, 7, 1); first[0, 0, 0] = 1  # [batch key feature]: the first key's indicator
    >>> reduction = KeyReduction(heads=(0, 2), weights=first, entropy=True)
    >>> reduction.checked_weights("MySink", layer=0, n_batch=1, n_key=7).shape
    torch.Size([1, 7, 1])
    >>> reduction.checked_weights("MySink", layer=0, n_batch=1, n_key=9)
    Traceback (most recent call last):
    probe.errors.ProbeError: MySink's KeyReduction.weights is shaped (1, 7, 1);
    layer 0 needs [1 or batch=1, key=9, feature]
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

    Examples
    --------
    >>> from probe.engine import capture
    >>> class Shapes:  # what a ReduceSink receives (zoo:induction, 7 tokens)
    ...     def needs(self, layer, n_heads, n_query):
    ...         return SinkNeeds(reduce=KeyReduction((0, 1), torch.ones(1, 7, 1), max_alpha=True))
    ...     def update_reduced(self, block):
    ...         self.seen = (block.layer, block.heads, block.n_query, tuple(block.weighted.shape),
    ...                      tuple(block.max_alpha.shape), block.entropy,
    ...                      round(float(block.weighted.min()), 4))
    >>> sink = Shapes()
    >>> with capture(loaded.model, sink), torch.inference_mode():
    ...     _ = loaded.model(**inputs)
    >>> sink.seen  # layer 1's block; Σ_j α_ij · 1 = 1 in every row; no entropy was asked for
    (1, (0, 1), 7, (1, 2, 7, 1), (1, 2, 7), None, 1.0)
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

    Examples
    --------
    >>> from probe.engine import capture
    >>> class Seen:  # a Sink that records what each block carries (zoo:induction, 7 tokens)
    ...     def __init__(self):
    ...         self.blocks = []
    ...     def needs(self, layer, n_heads, n_query):
    ...         return SinkNeeds(heads=(1, 3), entropy=True)
    ...     def update(self, block):
    ...         shapes = tuple(block.alpha.shape), tuple(block.entropy.shape)
    ...         self.blocks.append((block.layer, block.heads, *shapes))
    >>> sink = Seen()
    >>> with capture(loaded.model, sink), torch.inference_mode():
    ...     _ = loaded.model(**inputs)
    >>> sink.blocks  # per layer: (layer, heads, α [batch head query key], entropy [batch head query])
    [(0, (1, 3), (1, 2, 7, 7), (1, 2, 7)), (1, (1, 3), (1, 2, 7, 7), (1, 2, 7))]
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

    Examples
    --------
    >>> from probe.engine import capture
    >>> class PreviousToken:  # α(i, i − 1) of every head, from its dense blocks
    ...     def __init__(self):
    ...         self.alpha = {}
    ...     def needs(self, layer, n_heads, n_query):
    ...         return SinkNeeds(heads=tuple(range(n_heads)))
    ...     def update(self, block):  # this block's rows: query_start, query_start + 1, ...
    ...         rows = torch.arange(max(block.query_start, 1), block.query_start + block.alpha.shape[2])
    ...         kept = block.alpha[0, :, rows - block.query_start, rows - 1]  # [head row]
    ...         self.alpha[block.layer] = kept.mean(-1)  # (7 rows: one block)
    >>> sink = PreviousToken()
    >>> with capture(loaded.model, sink), torch.inference_mode():
    ...     _ = loaded.model(**inputs)
    >>> sink.alpha[0].round(decimals=2)  # L0H1 is zoo:induction's previous-token head
    tensor([0.1700, 0.9800, 0.1900, 0.3000])
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
    """What the engine streams dense α blocks into (a structural protocol: no base class to inherit).

    Examples
    --------
    >>> from probe.engine import capture
    >>> class FirstTokenMass:  # the mean α of every head on the first key, per layer
    ...     def __init__(self):
    ...         self.mass = {}
    ...     def needs(self, layer, n_heads, n_query):
    ...         return SinkNeeds(heads=tuple(range(n_heads)))
    ...     def update(self, block):  # [batch head query key]; one block of 7 rows here
    ...         self.mass[block.layer] = block.alpha[0, :, :, 0].mean(-1)  # [head]
    >>> sink = FirstTokenMass()
    >>> isinstance(sink, Sink)
    True
    >>> with capture(loaded.model, sink), torch.inference_mode():
    ...     _ = loaded.model(**inputs)
    >>> sink.mass[0].round(decimals=2)  # zoo:induction's first-token heads: L0H0, L0H2
    tensor([0.9900, 0.2800, 0.7300, 0.4900])
    """

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

    Examples
    --------
    >>> from probe.engine import capture
    >>> class PreviousTokenAlpha:  # α(i, i − 1) of every head, gathered: no dense block is built
    ...     def __init__(self, n):
    ...         self.slots = (torch.arange(n) - 1)[None, :, None]  # [batch query slot]; −1: no key (row 0)
    ...         self.alpha = {}
    ...     def needs(self, layer, n_heads, n_query):
    ...         return SinkNeeds(gather=(range(n_heads), self.slots))
    ...     def update_gathered(self, layer, heads, alpha):  # [batch head query slot]
    ...         self.alpha[layer] = alpha[0, :, 1:, 0].mean(-1)  # [head]: the mean over rows 1..n−1
    >>> sink = PreviousTokenAlpha(n=inputs["input_ids"].shape[1])
    >>> isinstance(sink, GatherSink), isinstance(sink, Sink)
    (True, False)
    >>> with capture(loaded.model, sink), torch.inference_mode():
    ...     _ = loaded.model(**inputs)
    >>> sink.alpha[0].round(decimals=2)  # as AttentionBlock's example computes from dense blocks
    tensor([0.1700, 0.9800, 0.1900, 0.3000])
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
    protocols.

    Examples
    --------
    >>> from probe.engine import capture
    >>> class LookBack:  # each head's mean distance back, i − Σ_j α_ij j, with no α block handed out
    ...     def __init__(self, n):
    ...         positions = torch.arange(n, dtype=torch.float32)[None, :, None]  # [batch key feature]
    ...         self.reduction = KeyReduction(heads=(0, 1, 2, 3), weights=positions)
    ...         self.distance = {}
    ...     def needs(self, layer, n_heads, n_query):
    ...         return SinkNeeds(reduce=self.reduction)
    ...     def update_reduced(self, block):  # weighted: [batch head row feature]; one block of 7 rows here
    ...         rows = torch.arange(block.query_start, block.query_start + block.weighted.shape[2])
    ...         self.distance[block.layer] = (rows - block.weighted[0, :, :, 0])[:, 1:].mean(-1)  # [head]
    >>> sink = LookBack(n=inputs["input_ids"].shape[1])
    >>> isinstance(sink, ReduceSink)
    True
    >>> with capture(loaded.model, sink), torch.inference_mode():
    ...     _ = loaded.model(**inputs)
    >>> sink.distance[0].round(decimals=2)  # L0H1 looks one token back
    tensor([3.4700, 0.9900, 2.4000, 2.0100])
    """

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
    before that layer's α (dense blocks or gathered slots).

    Examples
    --------
    >>> from probe.engine import capture
    >>> from probe.engine.output_norms import OutputProjections
    >>> class ValueNorms:  # ‖f_h(x_j)‖ of every key, per head (Kobayashi et al. 2020)
    ...     def __init__(self, model):
    ...         self.projections, self.norms = OutputProjections(model), {}
    ...     def needs(self, layer, n_heads, n_query):
    ...         return SinkNeeds(output_projections=self.projections)
    ...     def update_output_norms(self, layer, norms):  # OutputNorms: valid during this forward only
    ...         self.norms[layer] = norms.norms[0].clone()  # [head key]
    >>> sink = ValueNorms(loaded.model)
    >>> isinstance(sink, OutputNormSink)
    True
    >>> with capture(loaded.model, sink), torch.inference_mode():
    ...     _ = loaded.model(**inputs)
    >>> sink.norms[0].shape  # zoo:induction: 4 heads × 7 keys
    torch.Size([4, 7])
    """

    def needs(self, layer: int, n_heads: int, n_query: int) -> SinkNeeds:
        """What this sink wants of `layer` (see :meth:`Sink.needs`)."""
        ...

    def update_output_norms(self, layer: int, norms: OutputNorms | None) -> None:
        """Norms of `layer` (valid during this forward), or None when the layer's output projection is
        unknown."""
        ...
