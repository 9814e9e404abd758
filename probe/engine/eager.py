"""The eager fallback: α of models outside ``AttentionInterface`` (Bloom, DeBERTa-v2), streamed by forward
hooks.

Such a model computes α itself, as a dense ``[batch head query key]`` tensor per layer, and returns it through
``output_attentions``. The fallback hooks, through the intervention layer's one hook primitive
(:func:`probe.engine.interventions.hooked`), every attention module of the
:class:`~probe.layers.AttentionPlan` (no change to the model's code):

* a pre-hook that asks the module for its weights (``output_attentions=True`` in its own call, whatever the
  model was called with) and numbers the layer;
* a hook that hands the layer's α to the same sinks the fused engine feeds (dense blocks of query rows,
  sampled rows, gathered slots, row entropy) and then drops it from the module's output, so the model never
  accumulates the weights of all layers: one layer's α is alive at a time;
* with ``ablate``, a pre-hook on the layer's output projection that zeroes the ablated heads' slice of its
  input (:meth:`probe.engine.edits.Edit.zero` on it viewed ``[batch query head dim]``; the layer is the
  session's, as such models' projections are found by :class:`~probe.engine.output_norms.OutputProjections`,
  not among the named sites).

A learned attention sink (gpt-oss's ``s_aux``) is inside the module's softmax, out of the hooks' sight: its
weight in each row is read as ``1 − Σ_j α_ij`` (``AttentionBlock.learned_sink_mass``; 0 up to rounding without
sinks). Output norms (``output_share``) need the value states, which the module keeps to itself: sinks that
ask for them receive ``None`` (their shares are NaN). The cost is the model's own eager attention: a ``[batch
head query key]`` tensor per layer, O(N²) memory, where the fused engine keeps one block. ``--engine eager``
forces this path on a model that does route through the interface (its modules then run transformers' eager
attention).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from probe.engine.edits import Edit
from probe.engine.interventions import hooked
from probe.engine.output_norms import OutputProjections
from probe.engine.session import ACTIVE_SESSION, MAX_BLOCK_ROWS, CaptureSession
from probe.engine.sinks import AttentionBlock, ReducedBlock, SinkNeeds
from probe.errors import ProbeError


def _row_entropy(alpha: torch.Tensor) -> torch.Tensor:
    """−Σ_j α log α per row (0 log 0 = 0): [batch head query key] -> [batch head query]."""
    return -(alpha * torch.log(alpha.clamp_min(1e-45))).masked_fill(alpha <= 0, 0.0).sum(-1)


def _rows_of(rows, n_query: int, device: torch.device) -> torch.Tensor | None:
    """A sink's sampled rows (:attr:`SinkNeeds.rows`) sorted and distinct, or None for every row."""
    if rows is None:
        return None
    rows = torch.unique(torch.as_tensor(rows, dtype=torch.long)).to(device)  # sorted, distinct
    if len(rows) and (rows[0] < 0 or rows[-1] >= n_query):
        raise ProbeError(f"SinkNeeds.rows holds a row outside 0..{n_query - 1}")
    return None if len(rows) == n_query else rows


def _check_heads(heads: Sequence[int], layer: int, n_heads: int) -> None:
    bad = [head for head in heads if not 0 <= head < n_heads]
    if bad:
        raise ProbeError(f"head index {bad[0]} is out of range: layer {layer} has heads 0..{n_heads - 1}")


def _dense(session: CaptureSession, sink, need: SinkNeeds, layer: int, alpha: torch.Tensor) -> None:
    """Dense blocks of `need.heads` (every row, or the sampled rows) from the layer's α [batch head query
    key]."""
    n_heads, n_query, n_key = alpha.shape[1:]
    heads = tuple(need.heads)
    _check_heads(heads, layer, n_heads)
    chosen = alpha[:, list(heads)]  # [batch head_sel query key]
    entropy = _row_entropy(chosen) if need.entropy else None  # [batch head_sel query]
    # The module's own softmax may include learned sinks (gpt-oss s_aux) that the hooks cannot see: their
    # weight is what the row's α lacks of 1 (0 up to rounding without sinks), as the fused engine reports it.
    sink_mass = (1.0 - chosen.sum(-1)).clamp_min(0.0)  # [batch head_sel query]
    rows = _rows_of(need.rows, n_query, alpha.device)
    query_offset = n_key - n_query
    if rows is None:
        for start in range(0, n_query, MAX_BLOCK_ROWS):
            stop = min(start + MAX_BLOCK_ROWS, n_query)
            sink.update(AttentionBlock(session.step, layer, heads, start, n_query, query_offset, n_key,
                                       chosen[:, :, start:stop],
                                       entropy=None if entropy is None else entropy[:, :, start:stop],
                                       learned_sink_mass=sink_mass[:, :, start:stop]))
        return
    for start in range(0, len(rows), MAX_BLOCK_ROWS):
        block = rows[start:start + MAX_BLOCK_ROWS]
        sink.update(AttentionBlock(session.step, layer, heads, int(block[0]), n_query, query_offset, n_key,
                                   chosen[:, :, block], rows=block,
                                   entropy=None if entropy is None else entropy[:, :, block],
                                   learned_sink_mass=sink_mass[:, :, block]))


def _reduced(session: CaptureSession, sink, need: SinkNeeds, layer: int, alpha: torch.Tensor) -> None:
    """Row reductions Σ_j α_ij w_j of `need.reduce` from the layer's α [batch head query key], in blocks of
    query rows."""
    n_batch, n_heads, n_query, n_key = alpha.shape
    reduction = need.reduce
    heads = tuple(reduction.heads)
    _check_heads(heads, layer, n_heads)
    weights = reduction.checked_weights(type(sink).__name__, layer, n_batch, n_key).to(alpha.device)
    chosen = alpha[:, list(heads)]  # [batch head_sel query key]
    weighted = chosen @ weights[:, None]  # [batch head_sel query feature]
    entropy = _row_entropy(chosen) if reduction.entropy else None  # [batch head_sel query]
    largest = chosen.amax(-1) if reduction.max_alpha else None  # [batch head_sel query]
    sink_mass = (1.0 - chosen.sum(-1)).clamp_min(0.0)  # [batch head_sel query]: see _dense
    for start in range(0, n_query, MAX_BLOCK_ROWS):
        rows = slice(start, min(start + MAX_BLOCK_ROWS, n_query))
        sink.update_reduced(ReducedBlock(
            session.step, layer, heads, start, n_query, n_key - n_query, n_key, weighted[:, :, rows],
            entropy=None if entropy is None else entropy[:, :, rows],
            max_alpha=None if largest is None else largest[:, :, rows],
            learned_sink_mass=sink_mass[:, :, rows]))


def _gathered(sink, need: SinkNeeds, layer: int, alpha: torch.Tensor) -> None:
    """α at `need.gather`'s slots from the layer's α [batch head query key]."""
    n_batch, n_heads, n_query = alpha.shape[:3]
    heads, slots = tuple(need.gather[0]), need.gather[1].to(alpha.device)  # slots: [batch query slot]
    _check_heads(heads, layer, n_heads)
    if slots.shape[:2] != (n_batch, n_query):
        raise ProbeError(f"gather slots are shaped {tuple(slots.shape)}; expected [batch={n_batch}, "
                         f"query={n_query}, slot]")
    index = slots.clamp(min=0)[:, None].expand(-1, len(heads), -1, -1)  # [batch head query slot]
    gathered = alpha[:, list(heads)].gather(-1, index) * (slots >= 0)[:, None]  # [batch head query slot]
    sink.update_gathered(layer, heads, gathered)


def stream_layer(session: CaptureSession, layer: int, alpha: torch.Tensor) -> None:
    """Hand one layer's dense α (``[batch head query key]``) to the session's sinks, as the fused engine
    would: each sink's :class:`~probe.engine.sinks.SinkNeeds` for the layer is read once."""
    n_heads, n_query = alpha.shape[1], alpha.shape[2]
    alpha = alpha.float()
    for sink in session.sinks:
        need = sink.needs(layer, n_heads, n_query)
        if not isinstance(need, SinkNeeds):
            raise ProbeError(f"{type(sink).__name__}.needs returned {type(need).__name__}, not a SinkNeeds")
        if need.output_projections is not None:
            sink.update_output_norms(layer, None)  # value states stay inside the module: shares are NaN
        if need.heads:
            _dense(session, sink, need, layer, alpha)
        if need.gather is not None:
            _gathered(sink, need, layer, alpha)
        if need.reduce is not None:
            _reduced(session, sink, need, layer, alpha)


class _EagerHooks:
    """The hooks of one eager capture; they act only inside that capture's own context (thread)."""

    def __init__(self, session: CaptureSession, projections: OutputProjections | None) -> None:
        self.session = session
        self.projections = projections
        self.current: int | None = None  # layer of the attention module that ran last (for the ablation hook)

    def mine(self) -> bool:
        return ACTIVE_SESSION.get() is self.session

    def before(self, module: nn.Module, args: tuple, kwargs: dict):
        if not self.mine():
            return None
        self.current = self.session.next_layer(module)
        signature = _signature(module)
        if signature is None or "output_attentions" not in signature.parameters:
            return None  # interface modules on eager attention return their weights anyway
        bound = signature.bind(module, *args, **kwargs)
        bound.arguments["output_attentions"] = True
        return bound.args[1:], bound.kwargs

    def after(self, module: nn.Module, args: tuple, kwargs: dict, output):
        if not self.mine() or self.current is None:
            return None
        # the weights are the last 4-D tensor of the output: (output, weights), or T5's (output, bias,
        # weights)
        found = [index for index,
                 item in enumerate(output) if isinstance(item, torch.Tensor) and item.dim() == 4] \
            if isinstance(output, tuple) else []
        if not found or found[-1] == 0:
            raise ProbeError(f"{type(module).__name__} returned no [batch head query key] attention weights; "
                             "the eager fallback cannot capture this model")
        stream_layer(self.session, self.current, output[found[-1]].detach())
        kept = list(output)
        kept[found[-1]] = None  # the weights are dropped: the model keeps none of them
        return tuple(kept)

    def ablate(self, projection: nn.Module, args: tuple):
        if not self.mine() or self.session.ablate is None or self.current is None:
            return None
        (hidden, *rest) = args  # [batch query heads·dim]
        ablate = self.session.ablate  # [batch|1 layer head]
        if self.current >= ablate.shape[1]:
            raise ProbeError(f"ablate is shaped {tuple(ablate.shape)}; there is a layer {self.current}")
        n_heads = ablate.shape[2]
        if ablate.shape[0] not in (1, hidden.shape[0]):
            raise ProbeError(f"ablate has {ablate.shape[0]} batch rows; the input has {hidden.shape[0]}")
        # [batch query head dim]
        shaped = hidden.view(*hidden.shape[:-1], n_heads, hidden.shape[-1] // n_heads)
        zero = Edit.zero(where=ablate[:, self.current][:, None, :])  # [batch|1 1 head]
        return (zero.edited(shaped, per_head=True).view(hidden.shape), *rest)


_SIGNATURES: dict[type, inspect.Signature | None] = {}


def _signature(module: nn.Module) -> inspect.Signature | None:
    cls = type(module)
    if cls not in _SIGNATURES:
        try:
            _SIGNATURES[cls] = inspect.signature(cls.forward)
        except (TypeError, ValueError):
            _SIGNATURES[cls] = None
    return _SIGNATURES[cls]


@contextlib.contextmanager
def eager_capture(model: nn.Module, modules: Sequence[nn.Module], session: CaptureSession) -> Iterator[None]:
    """Hooks on `modules` (the plan's attention modules) that stream their α into `session`'s sinks.

    The session must be the active one (``ACTIVE_SESSION``) while the model runs; the caller opens and closes
    it."""
    projections = OutputProjections(model) if session.ablate is not None else None
    hooks = _EagerHooks(session, projections)
    registered = []
    for module in modules:
        registered += [(module, "before_kwargs", hooks.before), (module, "after_kwargs", hooks.after)]
        if projections is not None:
            projection = projections.find(module)
            if projection is None:
                raise ProbeError(f"cannot ablate heads of {type(module).__name__}: its output projection "
                                 "is not found")
            registered.append((projection, "before", hooks.ablate))
    with hooked(registered):
        yield


__all__ = ["eager_capture", "stream_layer"]
