"""The attention function registered with transformers: the model's attention, and α handed to the sinks.

The model keeps running on a fused attention kernel that also returns the log-sum-exp (LSE) of every query
row. For the heads some sink asks for, α is rebuilt one query block at a time:

    α(i, j) = exp(s_ij − lse'_i),  s_ij = cap(scale · q_i · k_j) + mask_ij,  lse'_i = logaddexp(lse_i, sink_h)

(no cap without soft-capping, lse' = lse without attention sinks), so no `[layer, head, query, key]` tensor is
ever built for all heads, and the model's outputs are the kernel's own. Where the sinks want every head
densely, the output is computed from the very α blocks the sinks receive (the single pass); so it is where
they want only gathered slots and output norms on a short CPU float32 input (:data:`SLOT_PASS_MAX_KEYS`), with
the slots read from its blocks and the norms as one more value column. Every keyword the
model passes is read against :data:`probe.engine.keywords.KEYWORDS`; one the engine does not implement is
refused in one line. Outside any capture the function behaves like transformers' sdpa attention (with sinks
and soft-capping computed, which sdpa lacks).

Longer than 450 lines because it holds the registered function and its four streaming paths (single pass,
kernel + rebuild, sampled rows, gathered slots; row reductions ride on the first two) side by side: each path
must apply the same score rule, sinks and soft-capping to the same plan, and reading them together is how a
reviewer checks that they agree. The kernels and the score rule itself live in :mod:`probe.engine.kernels`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from probe.engine import tiles
from probe.engine.kernels import (
    Scores,
    additive_mask,
    blockwise_attention,
    causal_bias,
    expand_kv,
    fused_attention,
    layer_output,
    mask_bias,
    sink_mass,
    softmax_in_place,
)
from probe.engine.keywords import FALLBACK, read_keywords
from probe.engine.output_norms import (
    REDUCED_PRECISION,
    OutputNorms,
    deliver_norms,
    layer_norms,
    with_output_norms,
)
from probe.engine.session import ACTIVE_SESSION, MAX_BLOCK_ROWS, CaptureSession
from probe.engine.sinks import AttentionBlock, ReducedBlock, SinkNeeds
from probe.errors import ProbeError

# Keys up to which a layer whose sinks want gathered slots or output norms but no head densely (the label run)
# takes the single pass — α at the slots read from its own blocks, Σ_j α_ij ‖f_h(x_j)‖ as one more value
# column — instead of the fused kernel on padded q, k, v plus a rebuild at the slots: on the CPU the single
# pass's blocks cost no more than the kernel there (docs/benchmarks.md, "Labelling": the third round).
SLOT_PASS_MAX_KEYS = 2048
# More slots per row than this (and than keys / 8): off the single pass, a gather sink's α is rebuilt in dense
# blocks for its heads and read at its slots there, where one product per (row, key) pair would cost more.
GATHER_MAX_SLOTS = 16

# The names tests and older callers use for the kernels (they moved to probe.engine.kernels).
_fused_attention = fused_attention
_softmax_in_place = softmax_in_place


def _blockwise_attention(query, key, value, mask, is_causal, scale, block_rows: int = 256):
    """The blockwise softmax with a plain score rule (kept for callers of the old signature)."""
    return blockwise_attention(query, key, value, Scores(scale, mask, is_causal), block_rows)


def _apply_ablation(
    output: torch.Tensor,  # [batch head query dim]
    ablate: torch.Tensor,  # [batch|1 layer head] bool
    layer: int,
) -> torch.Tensor:
    """Zero the output of the ablated heads of `layer` (a new tensor; per batch row when ablate has a batch
    axis)."""
    if layer >= ablate.shape[1] or ablate.shape[2] != output.shape[1]:
        raise ProbeError(f"ablate is shaped {tuple(ablate.shape)}; layer {layer} has {output.shape[1]} heads")
    if ablate.shape[0] not in (1, output.shape[0]):
        raise ProbeError(f"ablate has {ablate.shape[0]} batch rows; the input has {output.shape[0]}")
    keep = ~ablate[:, layer].to(output.device)  # [batch|1 head]
    return output * keep[:, :, None, None].to(output.dtype)  # [batch head query dim]


@dataclass
class _Plan:
    """What the sinks need of one layer, read once from their :class:`SinkNeeds`."""

    needs: dict  # sink -> SinkNeeds
    dense: dict = field(default_factory=dict)  # sink -> heads (every row)
    sampled: dict = field(default_factory=dict)  # sink -> (heads, rows [row] long ascending)
    gather: dict = field(default_factory=dict)  # sink -> (heads, slots [batch query slot])
    reduced: dict = field(default_factory=dict)  # sink -> KeyReduction (every row)
    norm_sinks: list = field(default_factory=list)  # [(sink, OutputProjections)]
    heads: list = field(default_factory=list)  # union of the dense and the reduced heads, ascending

    @property
    def entropy(self) -> bool:
        return (any(self.needs[sink].entropy for sink in self.dense)
                or any(reduction.entropy for reduction in self.reduced.values()))


def _plan(session: CaptureSession, layer: int, n_heads: int, n_query: int, device: torch.device) -> _Plan:
    needs = {}
    for sink in session.sinks:
        need = sink.needs(layer, n_heads, n_query)
        if not isinstance(need, SinkNeeds):
            raise ProbeError(f"{type(sink).__name__}.needs returned {type(need).__name__}, not a SinkNeeds")
        needs[sink] = need
    plan = _Plan(needs)
    for sink, need in needs.items():
        heads = tuple(need.heads)
        rows = _rows_of(need.rows, n_query, device)
        if heads and rows is not None:
            _check_heads(heads, layer, n_heads)
            plan.sampled[sink] = (heads, rows)
        elif heads:
            plan.dense[sink] = heads
        if need.gather is not None:
            plan.gather[sink] = need.gather
        if need.reduce is not None:
            if rows is not None:
                raise ProbeError(f"{type(sink).__name__} asked for sampled rows and a KeyReduction at once; "
                                 "a reduction takes every row (sampled rows come as dense blocks)")
            _check_heads(need.reduce.heads, layer, n_heads)
            plan.reduced[sink] = need.reduce
        if need.output_projections is not None:
            plan.norm_sinks.append((sink, need.output_projections))
    plan.heads = sorted({head for heads in plan.dense.values() for head in heads}
                        | {head for reduction in plan.reduced.values() for head in reduction.heads})
    _check_heads(plan.heads, layer, n_heads)
    return plan


# Captures may overlap on one model (threads of a web app): the first one in switches the model to the engine,
# the last one out restores its previous implementation. Each thread's session lives in a ContextVar, so a
# forward pass sees only its own sinks, and a forward outside any capture behaves like sdpa.


def capture_attention_forward(
    module: nn.Module,
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch kv_head key dim]
    value: torch.Tensor,  # [batch kv_head key dim_v]  (MLA: dim_v may differ from dim)
    # [batch 1 query key] bool (True = attend) or additive float, or None
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Registered as "probe_capture": the attention output, and α of the wanted heads handed to the sinks.

    Where the sinks want every head of the layer densely, the output is computed from the same α blocks the
    sinks receive (one QKᵀ, softmax and α·V per block: capture costs one attention, not a kernel plus a
    rebuild); otherwise the fused kernel runs (the blockwise softmax for soft-capped scores) and α of the
    wanted heads is rebuilt from its log-sum-exp.

    Raises
    ------
    ProbeError
        A keyword the engine does not implement (see :data:`probe.engine.keywords.KEYWORDS`), dropout with
        soft-capping, a sliding window without a mask, query heads that do not share kv heads evenly.
    """
    features = read_keywords(kwargs)
    window = features.sliding_window
    if window is not None and attention_mask is None and key.shape[2] > window:
        raise ProbeError(f"a sliding window of {window} arrived without a mask for {key.shape[2]} keys; run "
                         f"the model with {FALLBACK}")
    session = ACTIVE_SESSION.get()
    if session is None and features.plain:  # left on the engine outside `capture`: exactly sdpa
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)

    n_query, n_heads = query.shape[2], query.shape[1]
    if n_heads % key.shape[1]:
        raise ProbeError(f"{n_heads} query heads cannot share {key.shape[1]} key/value heads evenly")
    if dropout and features.softcap is not None:
        raise ProbeError("attention dropout with soft-capping is not implemented by the capture engine; put "
                         f"the model in eval mode or run it with {FALLBACK}")
    sinks = features.sinks
    if sinks is not None and sinks.shape != (n_heads,):
        raise ProbeError(f"s_aux has {sinks.numel()} sink logits; the layer has {n_heads} query heads")
    # The same causal rule as transformers' sdpa path: is_causal only when no mask was built and more than one
    # query.
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = bool(n_query > 1 and attention_mask is None and is_causal)
    # prefill into an empty static cache: keys past the queries are unused
    if is_causal and key.shape[2] > n_query:
        key, value = key[:, :, :n_query], value[:, :, :n_query]
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    mask = additive_mask(attention_mask, features.position_bias, is_causal, n_query, key.shape[2], query)
    if mask is not None and features.position_bias is not None:
        is_causal = False  # the causal pattern is now inside the additive mask
    scores = Scores(scale, mask, is_causal, features.softcap,
                    None if sinks is None else sinks.to(query.device))
    if session is None:
        output, _ = layer_output(query, key, value, scores, dropout)
        return output.transpose(1, 2).contiguous(), None  # [batch query head dim_v]

    layer = session.next_layer(module)
    plan = _plan(session, layer, n_heads, n_query, query.device)
    weights, columns = _reduction_weights(plan, layer, query.shape[0], key.shape[2], query.device)
    # The output from the same α blocks the sinks receive (no fused kernel) — unless a sink wants output
    # norms: it needs Σ_j α_ij n_j (from the kernel call) before its blocks arrive, so then the kernel runs
    # and α is rebuilt. In float16 / bfloat16 the single pass's output (float32 math, one rounding) would
    # differ from the kernel's by an ulp here and there, and the logits with it (measured up to 0.1 on a tiny
    # bf16 Llama): the kernel runs.
    trains = bool(dropout and module.training)
    single_pass = (plan.heads == list(range(n_heads)) and not trains and not plan.norm_sinks
                   and query.dtype not in REDUCED_PRECISION)
    # No head wanted densely, only slots and output norms, on a short float32 input: the single pass too (its
    # α blocks never leave it), with the norm channel as one more value column (SLOT_PASS_MAX_KEYS).
    slot_pass = (not plan.heads and bool(plan.gather or plan.norm_sinks) and not trains
                 and query.device.type == "cpu" and query.dtype == torch.float32
                 and key.shape[2] <= SLOT_PASS_MAX_KEYS)
    served = single_pass or slot_pass
    gathered = {}  # sink -> (heads, α at its slots [batch head_sel query slot]) served by the single pass
    if served:
        norms = layer_norms(plan.norm_sinks, module, layer, n_heads, value) if plan.norm_sinks else None
        # [batch head query dim_v], lse' [batch head query] or None, Σ_j α_ij n_j [batch head query] or None
        output, normaliser, mixed, gathered = _stream_single_pass(
            session, layer, plan, query, key, value, scores, bool(plan.sampled), weights, columns, norms)
        if norms is not None:
            deliver_norms(plan.norm_sinks, OutputNorms(layer, norms, mixed))
    else:
        def kernel(q, k, v):
            return layer_output(q, k, v, scores, dropout)
        # [batch head query dim_v], [batch head query] (lse'); output norms (Kobayashi et al.) to the sinks
        # that ask for them, from one extra value channel of the same call
        output, normaliser = with_output_norms(plan.norm_sinks, module, layer, query, key, value, kernel)
        # every query head's key, for the rebuilds below
        keys = expand_kv(key, n_heads) if plan.heads or plan.gather else None  # [batch head key dim]
        if plan.heads:
            _stream_alpha(session, layer, plan, query, keys, scores, normaliser, weights, columns)
    for sink, (chosen, rows) in plan.sampled.items():
        _stream_rows(session, layer, sink, plan.needs[sink], chosen, rows, query, key, scores, normaliser)
    if plan.gather and not served:
        # many slots per row: α rebuilt in dense blocks of the sink's heads, read at the slots
        wide = {sink: request for sink, request in plan.gather.items()
                if request[1].shape[-1] > max(GATHER_MAX_SLOTS, key.shape[2] // 8)}
        if wide:
            gathered = _rebuild_slots(session, layer, wide, query, keys, scores, normaliser)
        narrow = {sink: request for sink, request in plan.gather.items() if sink not in wide}
        if narrow:
            _gather_alpha(session, layer, narrow, query, keys, scores, normaliser)
    for sink, (heads, alpha) in gathered.items():
        sink.update_gathered(layer, heads, alpha)
    if session.ablate is not None:
        output = _apply_ablation(output, session.ablate, layer)  # [batch head query dim_v]
    return output.transpose(1, 2).contiguous(), None  # [batch query head dim_v]


def _rows_of(rows, n_query: int, device: torch.device) -> torch.Tensor | None:
    """The ascending query rows a sampling sink wants, or None (every row: no sampling)."""
    if rows is None:
        return None
    rows = torch.unique(torch.as_tensor(rows, dtype=torch.long)).to(device)  # sorted, distinct
    if len(rows) and (rows[0] < 0 or rows[-1] >= n_query):
        raise ProbeError(f"SinkNeeds.rows has row {int(rows[-1] if rows[-1] >= n_query else rows[0])}; "
                         f"this forward has query rows 0..{n_query - 1}")
    return None if len(rows) == n_query else rows


def _check_heads(heads: Sequence[int], layer: int, n_heads: int) -> None:
    bad = [head for head in heads if not 0 <= head < n_heads]
    if bad:
        raise ProbeError(f"head index {bad[0]} is out of range: layer {layer} has heads 0..{n_heads - 1}")


def _select_heads(
    heads: Sequence[int],
    layer: int,
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch head key dim]
    normaliser: torch.Tensor,  # [batch head query]
    scores: Scores,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """query, key, lse', mask and sink logits of the chosen heads only (no copy when every head is chosen)."""
    n_heads = query.shape[1]
    _check_heads(heads, layer, n_heads)
    mask, sinks = scores.mask, scores.sinks
    if tuple(heads) == tuple(range(n_heads)):
        return query, key, normaliser, mask, sinks
    index = torch.tensor(list(heads), device=query.device)
    if mask is not None and mask.shape[1] > 1:
        mask = mask.index_select(1, index)  # [batch head_sel query key]
    sinks = None if sinks is None else sinks.index_select(0, index)  # [head_sel]
    # [batch head_sel query dim], [batch head_sel key dim], [batch head_sel query]
    return query.index_select(1, index), key.index_select(1, index), normaliser.index_select(1,
        index), mask, sinks


def _block_rows(session: CaptureSession, n_batch: int, n_heads: int, n_query: int, n_key: int) -> int:
    """Query rows per α block: the session's byte budget for all selected heads, at most MAX_BLOCK_ROWS."""
    row_bytes = n_batch * n_heads * n_key * 4
    return max(1, min(n_query, MAX_BLOCK_ROWS, session.block_bytes // max(row_bytes, 1)))


def _hand_out(
    session: CaptureSession,
    layer: int,
    plan: _Plan,
    heads: Sequence[int],
    start: int,
    n_query: int,
    query_offset: int,
    n_key: int,
    alpha: torch.Tensor,  # [batch head_sel block key_stop]
    entropy: torch.Tensor | None = None,  # [batch head_sel block]
    learned: torch.Tensor | None = None,  # [batch head_sel block]: weight on the learned sink
    weights: torch.Tensor | None = None,  # [batch|1 key feature]: every reduction's w, side by side
    columns: dict | None = None,  # sink -> slice of the feature axis
    weighted: torch.Tensor | None = None,  # [batch head_sel block feature]: α·w, when already summed
    max_alpha: torch.Tensor | None = None,  # [batch head_sel block]: the rows' largest α, when α is not kept
) -> None:
    """Give one α block to every sink that wants some of its heads (padded to all keys unless it accepts a
    crop), and its rows' reductions to every reducing sink (summed here from α unless `weighted` has them;
    `alpha` is None only when no dense sink listens and `weighted` and `max_alpha` are given)."""
    position = {head: index for index, head in enumerate(heads)}
    if plan.reduced and weighted is None:
        width = alpha.shape[-1]
        weighted = alpha @ weights[:, None, :width]  # [batch head_sel block feature]
    for sink, reduction in plan.reduced.items():
        chosen = tuple(reduction.heads)
        index = [position[h] for h in chosen]
        rows_max = None
        if reduction.max_alpha:
            rows_max = (max_alpha if max_alpha is not None else alpha.amax(-1))[:, index]
        mine = weighted[:, index][..., columns[sink]]  # [batch head block feature]
        sink.update_reduced(ReducedBlock(
            session.step, layer, chosen, start, n_query, query_offset, n_key, mine,
            entropy=None if entropy is None or not reduction.entropy else entropy[:, index],
            max_alpha=rows_max, learned_sink_mass=None if learned is None else learned[:, index]))
    for sink, chosen in plan.dense.items():
        need = plan.needs[sink]
        same = tuple(chosen) == tuple(heads)
        index = None if same else [position[h] for h in chosen]
        mine = alpha if same else alpha[:, index]
        if mine.shape[-1] < n_key and not need.causal_crop:
            mine = torch.nn.functional.pad(mine, (0, n_key - mine.shape[-1]))  # [batch head block key]
        rows_entropy = (None if entropy is None or not need.entropy
                        else (entropy if same else entropy[:, index]))
        rows_sink = None if learned is None else (learned if same else learned[:, index])
        sink.update(AttentionBlock(session.step, layer, chosen, start, n_query, query_offset, n_key, mine,
                                   entropy=rows_entropy, learned_sink_mass=rows_sink))


def _reduction_weights(
    plan: _Plan, layer: int, n_batch: int, n_key: int, device: torch.device,
) -> tuple[torch.Tensor | None, dict]:
    """Every reducing sink's w side by side, `[batch|1 key feature]` float32 on `device` (None when no sink
    reduces), and each sink's slice of the feature axis."""
    if not plan.reduced:
        return None, {}
    parts, columns, first = [], {}, 0
    batch = 1
    for sink, reduction in plan.reduced.items():
        weights = reduction.checked_weights(type(sink).__name__, layer, n_batch, n_key)
        batch = max(batch, weights.shape[0])
        parts.append(weights.to(device))
        columns[sink] = slice(first, first + weights.shape[-1])
        first += weights.shape[-1]
    # [batch|1 key feature]
    return torch.cat([part.expand(batch, n_key, -1) for part in parts], dim=-1), columns


def _row_entropy(
    normaliser: torch.Tensor,  # [batch head block] lse'
    products: torch.Tensor,  # [batch head block]: Σ_j α_ij · scale·q_i·k_j
    alpha: torch.Tensor,  # [batch head block key]
    bias: torch.Tensor | None,  # [batch 1|head block key]: the finite part of the mask
    learned: torch.Tensor | None,  # [batch head block]: weight on the learned sink
) -> torch.Tensor:
    """−Σ_j α log α = Σ_j α (lse' − s) = lse'·Σ_j α − Σ α·scale·q·k − Σ α·bias (Σ_j α = 1 − the sink's
    weight)."""
    entropy = normaliser - products if learned is None else normaliser * (1.0 - learned) - products
    if bias is not None:
        entropy -= (alpha * bias[..., : alpha.shape[-1]]).sum(-1)
    return entropy


def _direct_entropy(alpha: torch.Tensor) -> torch.Tensor:
    """−Σ_j α log α `[batch head block]` with the logarithm: for soft-capped scores, which are not linear in
    k."""
    return -torch.xlogy(alpha, alpha).sum(-1)


def _stream_single_pass(
    session: CaptureSession,
    layer: int,
    plan: _Plan,
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch kv_head key dim]
    value: torch.Tensor,  # [batch kv_head key dim_v]
    scores: Scores,
    want_lse: bool = True,
    weights: torch.Tensor | None = None,  # [batch|1 key feature]: the reductions' w
    columns: dict | None = None,  # reducing sink -> slice of the feature axis
    norms: torch.Tensor | None = None,  # [batch head key] ‖f_h(x_j)‖: Σ_j α_ij n_hj wanted
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, dict]:
    """Attention of every head computed block by block from the α the sinks receive: per block of query rows
    one QKᵀ, (the cap,) a softmax and α·V — α·[V | K | W | N], the reductions' sums and the output norms'
    Σ_j α_ij n_hj riding on the same product; the plan's gathered slots are read from each block.
    Returns (output [batch head query dim_v] in the query's dtype, lse' [batch head query] float32 or None
    when no consumer needs it, Σ_j α_ij n_hj [batch head query] float32 or None without `norms`, and
    {gather sink: (heads, α at its slots [batch head_sel query slot])} for the caller to hand out), equal to
    the fused kernel's and the rebuild's within float32 rounding. With attention sinks the softmax's α is
    scaled by exp(lse − lse') before α·V, which is the model's own output.

    Grouped-query heads are never repeated: the g query heads of one kv head are stacked on the row axis, so
    one matmul per kv head serves them all (`[batch·kv_head, g·block, key]` is `[batch, head, block, key]` in
    memory).
    """
    n_batch, n_heads, n_query, dim = query.shape
    n_kv, n_key, dim_v = key.shape[1], key.shape[2], value.shape[-1]
    group = n_heads // n_kv
    block_rows = _block_rows(session, n_batch, n_heads, n_query, n_key)
    query_offset = n_key - n_query  # with a KV cache the queries are the last n_query positions
    # the scale goes into the GEMM (baddbmm's alpha): no scaled copy of the queries
    queries = query.float().reshape(n_batch * n_kv, group, n_query, dim)  # [batch·kv group query dim]
    keys_t = key.float().reshape(n_batch * n_kv, n_key, dim).transpose(1, 2)  # [batch·kv dim key]
    entropy_wanted = plan.entropy
    linear_entropy = entropy_wanted and scores.softcap is None
    # one α·[V | K] product gives the output and αK, from which the row entropy follows
    bias = mask_bias(scores.mask) if linear_entropy else None
    mask = None if scores.mask is None else scores.mask.float()
    sinks = scores.sinks
    causal = causal_bias(block_rows, query.device) if scores.is_causal else None
    # the fused tile kernel at long N on a CPU (probe.engine.tiles): the same α, output and lse per block
    min_keys = tiles.MIN_KEYS if plan.dense else tiles.MIN_REDUCE_KEYS  # no dense sink: α stays in the tiles
    fused = (query.device.type == "cpu" and n_key >= min_keys and scores.softcap is None
             and sinks is None and tiles.available())
    weights_t = None
    if weights is not None and fused:  # the kernel sums α·w from each tile row in L1: [batch|1 feature key]
        weights_t = weights.transpose(1, 2).contiguous()
    # the value columns of α·[V | K | W | N]: K for the entropy, the reductions' w (torch path), the output
    # norms (one column per query head of the kv head's group: query head kv·g + i reads column i)
    reduced_from = dim_v + (dim if linear_entropy else 0)
    norms_from = reduced_from + (weights.shape[-1] if weights is not None and not fused else 0)
    width = norms_from + (group if norms is not None else 0)
    if width == dim_v:
        values = value.float().reshape(n_batch * n_kv, n_key, dim_v)  # [batch·kv key dim_v]
    else:  # every column written once into one tensor (no concatenation copies V again)
        values = torch.empty(n_batch, n_kv, n_key, width, device=query.device)  # [batch kv key dv']
        values[..., :dim_v] = value
        if linear_entropy:
            values[..., dim_v:reduced_from] = key
        if norms_from > reduced_from:  # [batch 1 key feature], the same for every kv head
            values[..., reduced_from:norms_from] = weights.expand(n_batch, n_key, -1)[:, None]
        if norms is not None:  # [batch kv key group]
            values[..., norms_from:] = norms.view(n_batch, n_kv, group, n_key).transpose(2, 3)
        values = values.view(n_batch * n_kv, n_key, width)  # [batch·kv key dv']
    mixed = None if norms is None else torch.empty(n_batch, n_heads, n_query, device=query.device)
    readers = {sink: _SlotReader(chosen, slots, layer, tuple(range(n_heads)), n_query, scores.is_causal,
                                 n_batch, query.device) for sink, (chosen, slots) in plan.gather.items()}
    # the kernel keeps α in its tiles when only reductions are wanted (a finite bias needs α for the entropy)
    keep_alpha = not fused or bool(plan.dense) or bias is not None or bool(readers)
    kernel_max = fused and not keep_alpha and any(r.max_alpha for r in plan.reduced.values())
    if fused:
        queries = queries.contiguous()
        keys_t = keys_t.contiguous()  # [batch·kv dim key]
        values = values.contiguous()
        if mask is not None:  # batch and query axes as the kernel indexes them (an expand copies nothing)
            mask = mask.expand(n_batch, mask.shape[1], n_query, mask.shape[-1])
            mask = mask if mask.stride(-1) == 1 else mask.contiguous()
        # [batch·kv group block dim_v'], [batch·kv group block]
        block_values = torch.empty(n_batch * n_kv, group, block_rows, values.shape[-1], device=query.device)
        block_lses = torch.empty(n_batch * n_kv, group, block_rows, device=query.device)
        # [batch·kv group block]
        block_maxima = (torch.empty(n_batch * n_kv, group, block_rows, device=query.device) if kernel_max
                        else None)
        # [batch·kv group block feature]
        block_reductions = None if weights_t is None else torch.empty(
            n_batch * n_kv, group, block_rows, weights_t.shape[1], device=query.device)
    # [batch query head dim_v]: the layout the caller hands back, so its transpose costs no copy
    output = torch.empty(n_batch, n_query, n_heads, dim_v, device=query.device)
    # [batch kv group query dim_v]
    output_blocks = output.view(n_batch, n_query, n_kv, group, dim_v).permute(0, 2, 3, 1, 4)
    # lse' only where a consumer needs it: sampled rows, gathered slots, the row entropy or the sinks' weights
    block_lse_wanted = want_lse or entropy_wanted or sinks is not None
    lse = torch.empty(n_batch, n_heads, n_query, device=query.device) if want_lse or entropy_wanted else None
    buffer = torch.empty(n_batch * n_heads * block_rows * n_key if keep_alpha else 0, device=query.device)
    heads = tuple(range(n_heads))
    for start in range(0, n_query, block_rows):
        stop = min(start + block_rows, n_query)
        rows = stop - start
        # causal: keys after the block's last query are never computed
        key_stop = stop if scores.is_causal else n_key
        block = None  # [batch·kv g·block key_stop], when α is kept
        if keep_alpha:
            block = buffer[: n_batch * n_heads * rows * key_stop].view(n_batch * n_kv, group * rows, key_stop)
        # [batch·kv g·block dim]: for the torch path's QKᵀ and the entropy's q·Σαk (the kernel reads queries)
        block_queries = (queries[:, :, start:stop].reshape(n_batch * n_kv, group * rows, dim)
                         if linear_entropy or not fused else None)
        block_max = weighted = None
        if fused:  # α (unless only reductions are wanted), the block's α·[V | K], α·W and lse' (the kernel)
            block_out, block_lse = block_values[:, :, :rows], block_lses[:, :, :rows]
            if kernel_max:
                block_max = block_maxima[:, :, :rows]
            if weights_t is not None:
                weighted = block_reductions[:, :, :rows]
            alpha = block.view(n_batch * n_kv, group, rows, key_stop) if keep_alpha else None
            tiles.tile_block(queries, keys_t, values, mask, alpha, block_out, block_lse, scores.scale, start,
                             stop, key_stop, scores.is_causal, block_max, weights_t, weighted)
            if weighted is not None:
                weighted = weighted.reshape(n_batch, n_heads, rows, -1)  # [batch head block feature]
            if keep_alpha:
                alpha = block.view(n_batch, n_heads, rows, key_stop)  # [batch head block key]
            if block_max is not None:
                block_max = block_max.reshape(n_batch, n_heads, rows)  # [batch head block]
            block_lse = block_lse.reshape(n_batch, n_heads, rows)  # [batch head block]
            block_out = block_out.reshape(n_batch * n_kv, group * rows, -1)  # [batch·kv g·block dv']
        else:
            torch.baddbmm(block, block_queries, keys_t[..., :key_stop], beta=0.0, alpha=scores.scale,
                          out=block)  # [batch·kv group·block key_stop]: scale·QKᵀ
            block = scores.cap_(block.view(n_batch, n_heads, rows, key_stop))  # [batch head block key_stop]
            if mask is not None:
                block += mask[:, :, start:stop, :key_stop]
            if causal is not None:
                block[..., start:stop] += causal[:rows, :rows]
            # [batch head block key]
            alpha, block_lse = softmax_in_place(block, block_lse_wanted, mask is not None)
        learned = None
        # the sink joins the softmax: α scaled by exp(lse − lse'), lse' = logaddexp(lse, sink)
        if sinks is not None:
            normaliser = torch.logaddexp(block_lse, sinks[None, :, None])  # [batch head block]
            alpha.mul_(torch.exp(block_lse - normaliser)[..., None])
            learned = sink_mass(sinks, normaliser)  # [batch head block]
            block_lse = normaliser
        if lse is not None:
            lse[:, :, start:stop] = block_lse  # [batch head block]
        if not fused:  # [batch·kv g·block dv']
            block_out = torch.bmm(alpha.view(n_batch * n_kv, group * rows, key_stop), values[:, :key_stop])
        output_blocks[:, :, :, start:stop] = block_out[..., :dim_v].view(n_batch, n_kv, group, rows, dim_v)
        entropy = None
        if linear_entropy:  # −Σ α log α = lse'·Σα − Σ α·(scale·q·k) − Σ α·bias
            products = (scores.scale * (block_out[..., dim_v:reduced_from] * block_queries).sum(-1)
                        .view(n_batch, n_heads, rows))
            entropy = _row_entropy(block_lse, products, alpha,
                                   None if bias is None else bias[:, :, start:stop], learned)
        elif entropy_wanted:
            entropy = _direct_entropy(alpha)
        if weights is not None and weighted is None:  # [batch head block feature]
            weighted = block_out[..., reduced_from:norms_from].reshape(n_batch, n_heads, rows, -1)
        if mixed is not None:  # query head (kv, i) reads column i of its kv head's norm columns
            columns_out = block_out[..., norms_from:].view(n_batch * n_kv, group, rows, group)
            # [batch·kv block group] -> [batch head block]
            own = columns_out.diagonal(dim1=1, dim2=3).view(n_batch, n_kv, rows, group)
            mixed[:, :, start:stop] = own.permute(0, 1, 3, 2).reshape(n_batch, n_heads, rows)
        for reader in readers.values():
            reader.read(alpha, start, stop)
        _hand_out(session, layer, plan, heads, start, n_query, query_offset, n_key, alpha, entropy, learned,
                  weights, columns, weighted, block_max)
    output = output.transpose(1, 2).to(query.dtype)  # [batch head query dim_v]
    return output, lse, mixed, {sink: (reader.heads, reader.alpha) for sink, reader in readers.items()}


class _SlotReader:
    """α at one gather sink's slots, read from each α block (the single pass's, or a dense rebuild's) as it
    goes by: (heads, slots `[batch query slot]`) as the sink asked, from blocks that carry `block_heads`;
    ``alpha`` `[batch head_sel query slot]` float32 is 0 where a slot names no key (< 0, or after the row
    under a causal mask), as on the pair-by-pair path."""

    def __init__(self, heads, slots: torch.Tensor, layer: int, block_heads: tuple[int, ...], n_query: int,
                 is_causal: bool, n_batch: int, device: torch.device) -> None:
        self.heads = tuple(heads)
        _check_heads(self.heads, layer, max(block_heads) + 1 if block_heads else 0)
        slots = _checked_slots(slots, n_batch, n_query, device)  # [batch query slot]
        self.present = _present(slots, is_causal)  # [batch query slot]
        self.slots = slots.clamp(min=0)  # [batch query slot]
        position = {head: index for index, head in enumerate(block_heads)}
        self.index = None if self.heads == tuple(block_heads) else [position[head] for head in self.heads]
        # [batch head_sel query slot]
        self.alpha = torch.zeros(n_batch, len(self.heads), n_query, slots.shape[-1], device=device)

    def read(self, alpha: torch.Tensor, start: int, stop: int) -> None:
        """Take the slots of rows start … stop − 1 from their α block `[batch block_head block key_stop]`
        (causal blocks end at their last row's key: a later slot is not present and reads any key in
        range)."""
        rows = slice(start, stop)
        index = self.slots[:, rows].clamp(max=alpha.shape[-1] - 1)  # [batch block slot]
        # [batch head block slot]
        picked = alpha.gather(-1, index[:, None].expand(-1, alpha.shape[1], -1, -1))
        if self.index is not None:
            picked = picked[:, self.index]  # [batch head_sel block slot]
        self.alpha[:, :, rows] = torch.where(self.present[:, None, rows], picked, 0.0)


def _checked_slots(slots: torch.Tensor, n_batch: int, n_query: int, device: torch.device) -> torch.Tensor:
    """A gather sink's slots `[batch query slot]` on `device`, refused in one line when misshaped."""
    slots = slots.to(device)
    if slots.shape[:2] != (n_batch, n_query):
        raise ProbeError(f"gather slots are shaped {tuple(slots.shape)}; expected [batch={n_batch}, "
                         f"query={n_query}, slot]")
    return slots


def _rebuild_operands(query_sel, key_sel, normaliser_sel, scores: Scores):
    """Queries and keys of the rebuild GEMM: without a cap, −lse' is folded in, [scale·q, −lse']·[k, 1] =
    scale·q·k − lse'; with one, plain scale·q and k (the cap must see the raw product)."""
    if scores.softcap is None:
        # [b h q d+1]
        queries = torch.cat([query_sel.float() * scores.scale, -normaliser_sel[..., None]], dim=-1)
        ones = torch.ones(*key_sel.shape[:-1], 1, device=key_sel.device)
        keys = torch.cat([key_sel.float(), ones], dim=-1)  # [batch head key dim+1]
        return queries, keys
    return query_sel.float() * scores.scale, key_sel.float()


def _stream_alpha(
    session: CaptureSession,
    layer: int,
    plan: _Plan,
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch head key dim]
    scores: Scores,
    normaliser: torch.Tensor,  # [batch head query] lse'
    weights: torch.Tensor | None = None,  # [batch|1 key feature]: the reductions' w
    columns: dict | None = None,  # reducing sink -> slice of the feature axis
    readers: Sequence[_SlotReader] = (),  # gather sinks' slots read from the blocks (of the plan's heads)
) -> None:
    """Rebuild α for the plan's heads from the kernel's lse', one query block at a time, and hand each block
    out (the reducing sinks' sums taken from it; the readers' slots read from it)."""
    heads = plan.heads
    n_batch, n_query, n_key = query.shape[0], query.shape[2], key.shape[2]
    query_sel, key_sel, norm_sel, mask_sel, sinks_sel = _select_heads(heads, layer, query, key,
                                                                      normaliser, scores)
    block_rows = _block_rows(session, n_batch, len(heads), n_query, n_key)
    query_offset = n_key - n_query  # with a KV cache the queries are the last n_query positions
    batch_heads = n_batch * len(heads)
    fold = scores.softcap is None
    query_op, key_op = _rebuild_operands(query_sel, key_sel, norm_sel, scores)
    query_op = query_op.reshape(batch_heads, n_query, -1)  # [batch·head_sel query dim(+1)]
    key_op = key_op.reshape(batch_heads, n_key, -1).transpose(1, 2)  # [batch·head_sel dim(+1) key]
    mask_full = None
    if mask_sel is not None:
        mask_full = mask_sel.float().expand(n_batch, len(heads), n_query, n_key)  # [batch head_sel query key]
    entropy_wanted = plan.entropy
    keys_plain = key_sel.float().reshape(batch_heads, n_key, -1) if entropy_wanted and fold else None
    bias = mask_bias(mask_sel) if keys_plain is not None else None
    causal = causal_bias(block_rows, query.device)
    # One buffer per call, reused by every block (a contiguous prefix of it), so blocks allocate nothing.
    buffer = torch.empty(batch_heads * block_rows * n_key, device=query.device)
    for start in range(0, n_query, block_rows):
        stop = min(start + block_rows, n_query)
        rows = stop - start
        # Causal: keys after this block's last query are masked for every row, so they are never computed.
        key_stop = stop if scores.is_causal else n_key
        block = buffer[: batch_heads * rows * key_stop].view(batch_heads, rows, key_stop)
        # [batch·head_sel block key_stop]
        torch.bmm(query_op[:, start:stop], key_op[..., :key_stop], out=block)
        block = block.view(n_batch, len(heads), rows, key_stop)  # [batch head_sel block key_stop]
        if not fold:
            scores.cap_(block).sub_(norm_sel[:, :, start:stop, None])
        if mask_full is not None:
            block += mask_full[:, :, start:stop, :key_stop]
        if scores.is_causal:
            block[..., start:stop] += causal[:rows, :rows]
        alpha = block.exp_()  # [batch head_sel block key_stop]
        learned = None if sinks_sel is None else sink_mass(sinks_sel, norm_sel[:, :, start:stop])
        entropy = None
        if keys_plain is not None:  # Σ_j α (scale·q·k) from one α·K product
            weighted = torch.bmm(alpha.view(batch_heads, rows, key_stop), keys_plain[:, :key_stop])
            products = scores.scale * (weighted.view(n_batch, len(heads), rows, -1)
                                       * query_sel[:, :, start:stop].float()).sum(-1)
            entropy = _row_entropy(norm_sel[:, :, start:stop], products, alpha,
                                   None if bias is None else bias[:, :, start:stop], learned)
        elif entropy_wanted:
            entropy = _direct_entropy(alpha)
        for reader in readers:
            reader.read(alpha, start, stop)
        _hand_out(session, layer, plan, heads, start, n_query, query_offset, n_key, alpha, entropy, learned,
                  weights, columns)


def _rebuild_slots(
    session: CaptureSession,
    layer: int,
    requests: dict,  # sink -> (heads, slots [batch query slot]), each with many slots per row
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch head key dim]
    scores: Scores,
    normaliser: torch.Tensor,  # [batch head query] lse'
) -> dict:
    """α at the slots of gather sinks with many slots per row, read from dense blocks of their heads rebuilt
    from the kernel's lse' (no block is handed to anyone): {sink: (heads, α [batch head_sel query slot])}."""
    n_batch, n_heads, n_query = query.shape[:3]
    heads = sorted({head for chosen, _ in requests.values() for head in chosen})
    _check_heads(heads, layer, n_heads)
    readers = {sink: _SlotReader(chosen, slots, layer, tuple(heads), n_query, scores.is_causal, n_batch,
                                 query.device) for sink, (chosen, slots) in requests.items()}
    _stream_alpha(session, layer, _Plan({}, heads=heads), query, key, scores, normaliser,
                  readers=tuple(readers.values()))
    return {sink: (reader.heads, reader.alpha) for sink, reader in readers.items()}


def _stream_rows(
    session: CaptureSession,
    layer: int,
    sink,
    need: SinkNeeds,
    heads: Sequence[int],
    rows: torch.Tensor,  # [row] long, ascending
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch kv_head key dim]
    scores: Scores,
    normaliser: torch.Tensor,  # [batch head query] lse'
) -> None:
    """α of a sampling sink's rows only, rebuilt from the kernel's lse' in blocks of those rows (causal blocks
    stop at their last row's key). Grouped kv heads are not repeated when every head is wanted."""
    n_batch, n_heads, n_query, dim = query.shape
    n_kv, n_key = key.shape[1], key.shape[2]
    if not len(rows):
        return
    query_offset = n_key - n_query
    all_heads = tuple(heads) == tuple(range(n_heads))
    if all_heads:  # grouped: the g query heads of a kv head are stacked on the row axis of one matmul
        group, kv_heads, keys = n_heads // n_kv, n_kv, key
    else:
        group, kv_heads = 1, len(heads)
        keys = expand_kv(key, n_heads).index_select(1, torch.tensor(list(heads), device=query.device))
    chosen = query if all_heads else query[:, list(heads)]  # [batch head_sel query dim]
    norm_rows = (normaliser if all_heads else normaliser[:, list(heads)])[:, :, rows]  # [batch head_sel row]
    sinks = scores.sinks if scores.sinks is None or all_heads else scores.sinks[list(heads)]  # [head_sel]
    fold = scores.softcap is None
    queries, keys_op = _rebuild_operands(chosen[:, :, rows], keys, norm_rows, scores)  # [b hs row d(+1)]
    width = queries.shape[-1]
    keys_t = keys_op.reshape(n_batch * kv_heads, n_key, width).transpose(1, 2)  # [batch·kv dim(+1) key]
    queries = queries.reshape(n_batch * kv_heads, group, len(rows), width)  # [batch·kv group row dim(+1)]
    block_rows = _block_rows(session, n_batch, len(heads), len(rows), n_key)
    linear_entropy = need.entropy and fold
    if linear_entropy:
        keys_plain = keys.float().reshape(n_batch * kv_heads, n_key, dim)  # [batch·kv key dim]
        bias = mask_bias(scores.mask)
    mask = scores.mask
    for start in range(0, len(rows), block_rows):
        block = rows[start:start + block_rows]  # [block]
        size = len(block)
        key_stop = int(block[-1]) + 1 if scores.is_causal else n_key
        block_queries = queries[:, :, start:start + size].reshape(n_batch * kv_heads, group * size, width)
        block_scores = torch.bmm(block_queries, keys_t[..., :key_stop])  # [batch·kv group·block key_stop]
        # [batch head_sel block key_stop]
        block_scores = block_scores.view(n_batch, len(heads), size, key_stop)
        block_norm = norm_rows[:, :, start:start + size]  # [batch head_sel block]
        if not fold:
            scores.cap_(block_scores).sub_(block_norm[..., None])
        if mask is not None:
            mask_rows = mask[:, :, block, :key_stop]  # [batch 1|head block key_stop]
            if mask_rows.shape[1] > 1 and not all_heads:
                mask_rows = mask_rows[:, list(heads)]
            block_scores += mask_rows.float()
        if scores.is_causal:  # only keys after the block's first row can lie above a row's diagonal
            low = int(block[0]) + 1
            above = torch.arange(low, key_stop, device=query.device)[None, :] > block[:, None]  # [block key]
            block_scores[..., low:].masked_fill_(above, -math.inf)
        alpha = block_scores.exp_()  # [batch head_sel block key_stop]
        learned = None if sinks is None else sink_mass(sinks, block_norm)
        entropy = None
        if linear_entropy:  # −Σ α log α = lse'·Σα − Σ α·(scale·q·k) − Σ α·bias, via one α·K product
            weighted = torch.bmm(alpha.view(n_batch * kv_heads, group * size, key_stop),
                                 keys_plain[:, :key_stop])
            products = (weighted * block_queries[..., :dim]).sum(-1).view(n_batch, len(heads), size)
            bias_rows = None
            if bias is not None:
                bias_rows = bias[:, :, block, :key_stop]
                bias_rows = (bias_rows[:, list(heads)] if bias_rows.shape[1] > 1 and not all_heads
                             else bias_rows)
            entropy = _row_entropy(block_norm, products, alpha, bias_rows, learned)
        elif need.entropy:
            entropy = _direct_entropy(alpha)
        if key_stop < n_key and not need.causal_crop:
            alpha = torch.nn.functional.pad(alpha, (0, n_key - key_stop))  # [batch head_sel block key]
        sink.update(AttentionBlock(session.step, layer, tuple(heads), int(block[0]), n_query, query_offset,
                                   n_key, alpha, rows=block, entropy=entropy, learned_sink_mass=learned))


def _gather_alpha(
    session: CaptureSession,
    layer: int,
    requests: dict,  # sink -> (heads, slots [batch query slot])
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch head key dim]
    scores: Scores,
    normaliser: torch.Tensor,  # [batch head query] lse'
) -> None:
    """α at the key slots gather-sinks ask for: where a block's rows share a few keys, one product against
    the block's distinct keys; else one dot product per (query, key) pair present (slot ≥ 0, not after the
    row under a causal mask). Never a dense [query key] block, and no work for the empty slots of rows with
    fewer keys than the widest row (token matches: most rows have none)."""
    n_batch, n_heads, n_query, dim = query.shape
    for sink, (heads, slots) in requests.items():
        heads, slots = tuple(heads), _checked_slots(slots, n_batch, n_query, query.device)  # [b query slot]
        query_sel, key_sel, norm_sel, mask_sel, _ = _select_heads(heads, layer, query, key,
                                                                  normaliser, scores)
        query_sel, key_sel = query_sel.float(), key_sel.float()
        n_slots = slots.shape[-1]
        # [batch head query slot]
        out = torch.zeros(n_batch, len(heads), n_query, n_slots, device=query.device)
        # Where the rows of a block share a few keys (key 0, a few fixed offsets) one matmul against the
        # block's distinct keys is cheapest; else (bands, token matches) each pair present is computed alone,
        # at about 8 products' cost of the shared matmul per pair (measured on the CPU).
        scattered = torch.zeros(n_batch, n_query, n_slots, dtype=torch.bool, device=query.device)
        # In a block that is not shared, a slot that names the key at one fixed offset from every row (j = i −
        # 1: previous-token targets) is a diagonal: one elementwise product of shifted q and k, no gather
        # (about half its pairs' cost).
        present_all = _present(slots, scores.is_causal)  # [batch query slot]
        bands = None  # slot -> offset c (key j = i + c), found at the first block that is not shared
        for start in range(0, n_query, MAX_BLOCK_ROWS):
            stop = min(start + MAX_BLOCK_ROWS, n_query)
            rows = slice(start, stop)
            safe = slots[:, rows].clamp(min=0)  # [batch block slot]
            present = present_all[:, rows]  # [batch block slot]
            distinct, inverse = torch.unique(safe, return_inverse=True)  # [distinct], [batch block slot]
            n_products = n_batch * (stop - start) * len(distinct)  # per head
            shared = (n_products <= 8 * int(present.sum())
                      and n_products * len(heads) * 4 <= session.block_bytes)
            if not shared:
                bands = _bands(slots, present_all) if bands is None else bands
                for slot, offset in bands.items():
                    _gather_band(slot, offset, start, stop, present_all, query_sel, key_sel, norm_sel,
                                 mask_sel, scores, out)
                scattered[:, rows] = present
                scattered[:, rows, list(bands)] = False  # computed as diagonals
                continue
            keys = key_sel[:, :, distinct]  # [batch head distinct dim]
            products = query_sel[:, :, rows] @ keys.transpose(-1, -2)  # [batch head block distinct]
            index = inverse[:, None].expand(-1, len(heads), -1, -1)  # [batch head block slot]
            block = products.gather(-1, index) * scores.scale  # [batch head block slot]
            scores.cap_(block)
            if mask_sel is not None:
                mask_rows = mask_sel[:, :, rows].float()  # [batch 1|head_sel block key]
                mask_index = safe[:, None].expand(-1, mask_rows.shape[1], -1, -1)  # [batch 1|head block slot]
                block = block + mask_rows.gather(-1, mask_index)
            alpha = torch.exp(block - norm_sel[:, :, rows, None].float())  # [batch head block slot]
            out[:, :, rows] = alpha * present[:, None]
        if bool(scattered.any()):
            _gather_pairs(session, scattered, slots, query_sel, key_sel, norm_sel, mask_sel, scores, out)
        sink.update_gathered(layer, heads, out)


def _bands(
    slots: torch.Tensor,  # [batch query slot] key index
    present: torch.Tensor,  # [batch query slot] bool
) -> dict[int, int]:
    """The slots whose present keys all sit at one offset c from their row (j = i + c): slot -> c."""
    offsets = slots - torch.arange(slots.shape[1], device=slots.device)[None, :, None]  # [batch query slot]
    found = {}
    for slot in range(slots.shape[-1]):
        named = offsets[..., slot][present[..., slot]]  # [present]
        if len(named) and bool(named.min() == named.max()):
            found[slot] = int(named[0])
    return found


def _gather_band(
    slot: int,
    offset: int,  # key j = i + offset
    start: int,  # the block's rows start … stop − 1
    stop: int,
    present: torch.Tensor,  # [batch query slot] bool
    query: torch.Tensor,  # [batch head query dim] float32
    key: torch.Tensor,  # [batch head key dim] float32
    normaliser: torch.Tensor,  # [batch head query] lse'
    mask: torch.Tensor | None,  # [batch 1|head query key] additive
    scores: Scores,
    out: torch.Tensor,  # [batch head query slot], written at slot `slot`
) -> None:
    """α at one diagonal slot for the rows of one block: q_i·k_{i+c} for every row at once from shifted views
    of q and k."""
    n_key = key.shape[2]
    first, stop = max(start, -offset), min(stop, n_key - offset)  # the block's rows whose key i + c exists
    if stop <= first:
        return
    rows = slice(first, stop)
    # [batch head row]
    block = (query[:, :, rows] * key[:, :, first + offset:stop + offset]).sum(-1) * scores.scale
    scores.cap_(block)
    if mask is not None:
        # [batch 1|head row]: the diagonal's element t is row max(0, −c) + t
        begin = first - max(0, -offset)
        block = block + mask.diagonal(offset, -2, -1)[..., begin:begin + stop - first].float()
    alpha = torch.exp(block - normaliser[:, :, rows].float())  # [batch head row]
    # rows without the slot (padding, a fully masked row: its lse' may be −inf) are 0, never 0·inf
    out[:, :, rows, slot] = torch.where(present[:, None, rows, slot], alpha, 0.0)


def _present(slots: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """`[batch query slot]` bool: the slots that name a key (≥ 0; not after the row when causal)."""
    present = slots >= 0
    if is_causal:
        position = torch.arange(slots.shape[1], device=slots.device)[:, None]  # [query 1]
        present = present & (slots <= position)
    return present


def _gather_pairs(
    session: CaptureSession,
    present: torch.Tensor,  # [batch query slot] bool: the slots computed here
    slots: torch.Tensor,  # [batch query slot] key index
    query: torch.Tensor,  # [batch head query dim] float32, the selected heads
    key: torch.Tensor,  # [batch head key dim] float32
    normaliser: torch.Tensor,  # [batch head query] lse'
    mask: torch.Tensor | None,  # [batch 1|head query key] additive
    scores: Scores,
    out: torch.Tensor,  # [batch head query slot], written at the present slots
) -> None:
    """α at each present (row, slot) pair: q_i·k_j for that pair alone, all heads at once (one row of every
    head's q and k read per pair), in chunks of pairs within the session's block budget."""
    n_batch, n_heads, n_query, dim = query.shape
    n_key = key.shape[2]
    flat_query = query.transpose(1, 2).reshape(n_batch * n_query, n_heads * dim)  # [batch·query head·dim]
    flat_key = key.transpose(1, 2).reshape(n_batch * n_key, n_heads * dim)  # [batch·key head·dim]
    batch_of, row_of, slot_of = present.nonzero(as_tuple=True)  # [pair] each
    key_of = slots[batch_of, row_of, slot_of]  # [pair]
    chunk = max(1, session.block_bytes // (2 * n_heads * dim * 4))
    for first in range(0, len(batch_of), chunk):
        b, i, j = (index[first:first + chunk] for index in (batch_of, row_of, key_of))  # [pair] each
        n_pairs = len(b)
        queries = flat_query.index_select(0, b * n_query + i).view(n_pairs * n_heads, 1, dim)
        keys = flat_key.index_select(0, b * n_key + j).view(n_pairs * n_heads, dim, 1)
        block = (queries @ keys).view(n_pairs, n_heads) * scores.scale  # [pair head]
        scores.cap_(block)
        if mask is not None:
            block = block + mask[b, :, i, j].float()  # [pair 1|head]
        alpha = torch.exp(block - normaliser[b, :, i].float())  # [pair head]
        out[b, :, i, slot_of[first:first + chunk]] = alpha
