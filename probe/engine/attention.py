"""The attention function registered with transformers: the fused kernel plus α rebuilt from its log-sum-exp.

The model keeps running on a fused attention kernel that also returns the log-sum-exp (LSE) of every query row.
For the heads some sink asks for, α is rebuilt one query block at a time:

    α(i, j) = exp(scale · q_i · k_j + mask_ij − lse_i)

so no `[layer, head, query, key]` tensor is ever built for all heads, and the model's outputs are the kernel's own.
Outside any capture the function behaves exactly like transformers' sdpa attention.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

import torch
from torch import nn
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

from probe.engine.output_norms import wants_output_norms, with_output_norms
from probe.engine.session import _ACTIVE, MAX_BLOCK_ROWS, _Session
from probe.engine.sinks import AttentionBlock
from probe.errors import ProbeError


def _apply_ablation(
    output: torch.Tensor,  # [batch head query dim]
    ablate: torch.Tensor,  # [batch|1 layer head] bool
    layer: int,
) -> torch.Tensor:
    """Zero the output of the ablated heads of `layer` (a new tensor; per batch row when ablate has a batch axis)."""
    if layer >= ablate.shape[1] or ablate.shape[2] != output.shape[1]:
        raise ProbeError(f"ablate is shaped {tuple(ablate.shape)}; layer {layer} has {output.shape[1]} heads")
    if ablate.shape[0] not in (1, output.shape[0]):
        raise ProbeError(f"ablate has {ablate.shape[0]} batch rows; the input has {output.shape[0]}")
    keep = ~ablate[:, layer].to(output.device)  # [batch|1 head]
    return output * keep[:, :, None, None].to(output.dtype)  # [batch head query dim]


# Captures may overlap on one model (threads of a web app): the first one in switches the model to the engine, the
# last one out restores its previous implementation. Each thread's session lives in a ContextVar, so a forward pass
# sees only its own sinks, and a forward outside any capture behaves exactly like sdpa.


def capture_attention_forward(
    module: nn.Module,
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch kv_head key dim]
    value: torch.Tensor,  # [batch kv_head key dim_v]  (MLA: dim_v may differ from dim)
    attention_mask: torch.Tensor | None,  # [batch 1 query key] bool (True = attend) or additive float, or None
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Registered as "probe_capture": the attention output, and α of the wanted heads handed to the sinks.

    Where the sinks want every head of the layer densely, the output is computed from the same α blocks the sinks
    receive (one QKᵀ, softmax and α·V per block: capture costs one attention, not a kernel plus a rebuild); otherwise
    the fused kernel runs and α of the wanted heads is rebuilt from its log-sum-exp.
    """
    session = _ACTIVE.get()
    if session is None:  # the model was left on the engine outside `capture`: behave exactly like sdpa
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    if kwargs.get("softcap") is not None:
        raise ProbeError("attention logit soft-capping is not supported by the capture engine")

    n_query, n_heads = query.shape[2], query.shape[1]
    if n_heads % key.shape[1]:
        raise ProbeError(f"{n_heads} query heads cannot share {key.shape[1]} key/value heads evenly")
    # The same causal rule as transformers' sdpa path: is_causal only when no mask was built and more than one query.
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = bool(n_query > 1 and attention_mask is None and is_causal)
    if is_causal and key.shape[2] > n_query:  # prefill into an empty static cache: keys past the queries are unused
        key, value = key[:, :, :n_query], value[:, :, :n_query]
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    additive = _additive_mask(attention_mask, kwargs.get("position_bias"), is_causal, n_query, key.shape[2], query)
    if additive is not None and kwargs.get("position_bias") is not None:
        is_causal = False  # the causal pattern is now inside the additive mask

    layer = session.next_layer(module)
    wanted = {sink: tuple(sink.heads_for(layer, n_heads)) for sink in session.sinks if hasattr(sink, "heads_for")}
    sampled = {sink: _rows_of(sink, layer, n_query, query.device) for sink in wanted}
    sampled = {sink: (wanted[sink], rows) for sink, rows in sampled.items() if rows is not None and wanted[sink]}
    wanted = {sink: chosen for sink, chosen in wanted.items() if sink not in sampled}
    heads = sorted({head for chosen in wanted.values() for head in chosen})
    _check_heads(heads, layer, n_heads)
    # The output from the same α blocks the sinks receive (no fused kernel) — unless a sink wants output norms: it
    # needs Σ_j α_ij n_j (from the kernel call) before its blocks arrive, so then the kernel runs and α is rebuilt.
    single_pass = (heads == list(range(n_heads)) and not (dropout and module.training)
                   and not wants_output_norms(session))
    gathering = any(hasattr(sink, "gather_for") for sink in session.sinks)
    if single_pass:
        want_lse = bool(sampled) or gathering

        def kernel(q, k, v):
            return _stream_single_pass(session, layer, wanted, q, k, v, additive, is_causal, scale, want_lse)
    else:
        def kernel(q, k, v):
            return _fused_attention(q, k, v, additive, is_causal, scale, dropout)
    # [batch head query dim_v], [batch head query]; output norms (Kobayashi et al.) to the sinks that ask for them,
    # from one extra value channel of the same call
    output, lse = with_output_norms(session, module, layer, query, key, value, kernel)
    if heads and not single_pass:
        _stream_alpha(session, layer, wanted, heads, query, _expand_kv(key, n_heads), additive, is_causal,
                      scale, lse)
    for sink, (chosen, rows) in sampled.items():
        _check_heads(chosen, layer, n_heads)
        _stream_rows(session, layer, sink, chosen, rows, query, key, additive, is_causal, scale, lse)
    if gathering:
        _gather_alpha(session, layer, query, _expand_kv(key, n_heads), additive, is_causal, scale, lse)
    if session.ablate is not None:
        output = _apply_ablation(output, session.ablate, layer)  # [batch head query dim_v]
    return output.transpose(1, 2).contiguous(), None  # [batch query head dim_v]


def _rows_of(sink, layer: int, n_query: int, device: torch.device) -> torch.Tensor | None:
    """The ascending query rows a sampling sink wants, or None (every row: no sampling)."""
    if not hasattr(sink, "rows_for"):
        return None
    rows = sink.rows_for(layer, n_query)
    if rows is None:
        return None
    rows = torch.unique(torch.as_tensor(rows, dtype=torch.long)).to(device)  # sorted, distinct
    if len(rows) and (rows[0] < 0 or rows[-1] >= n_query):
        raise ProbeError(f"rows_for gave row {int(rows[-1] if rows[-1] >= n_query else rows[0])}; "
                         f"this forward has query rows 0..{n_query - 1}")
    return None if len(rows) == n_query else rows


def _expand_kv(key: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Grouped-query attention: each kv head serves n_heads / kv_heads query heads ([batch head key dim])."""
    return key if key.shape[1] == n_heads else repeat_kv(key, n_heads // key.shape[1])


def _check_heads(heads: Sequence[int], layer: int, n_heads: int) -> None:
    bad = [head for head in heads if not 0 <= head < n_heads]
    if bad:
        raise ProbeError(f"head index {bad[0]} is out of range: layer {layer} has heads 0..{n_heads - 1}")


def _additive_mask(
    attention_mask: torch.Tensor | None,
    position_bias: torch.Tensor | None,
    is_causal: bool,
    n_query: int,
    n_key: int,
    query: torch.Tensor,
) -> torch.Tensor | None:
    """A float mask to add to the scores ([batch 1|head query key]), or None when there is nothing to add."""
    mask = attention_mask
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill(~mask, -math.inf)
    if position_bias is not None:
        if mask is None and is_causal:
            causal = torch.ones(n_query, n_key, dtype=torch.bool, device=query.device).tril()
            mask = torch.zeros(causal.shape, dtype=query.dtype, device=query.device).masked_fill(~causal, -math.inf)
        mask = position_bias if mask is None else position_bias + mask
    return None if mask is None else mask.to(query.dtype)


def _fused_attention(
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch kv_head key dim]
    value: torch.Tensor,  # [batch kv_head key dim_v]
    mask: torch.Tensor | None,
    is_causal: bool,
    scale: float,
    dropout: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output [batch head query dim_v], lse [batch head query] float32) from a fused kernel, else blockwise torch.

    Shapes a kernel refuses never raise: a value head size that differs from the query/key one (MLA) is zero-padded
    to it (exact: padded value columns give zero output columns, padded q/k columns add zero to the scores), and
    anything else the kernel rejects goes to the blockwise path, which also returns the log-sum-exp.
    """
    dim_v = value.shape[-1]
    if query.device.type == "cpu" and dim_v == query.shape[-1]:
        with contextlib.suppress(RuntimeError):  # the CPU flash kernel takes grouped kv heads as they are
            output, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                query, key, value, dropout, is_causal, attn_mask=mask, scale=scale
            )
            return output, lse.float()
    query, key, value = _same_head_size(query, _expand_kv(key, query.shape[1]), _expand_kv(value, query.shape[1]))
    with contextlib.suppress(RuntimeError):
        if query.device.type == "cpu":
            output, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                query, key, value, dropout, is_causal, attn_mask=mask, scale=scale
            )
            return output[..., :dim_v], lse.float()
        if query.device.type == "cuda":
            output, lse = _cuda_fused_attention(query, key, value, mask, is_causal, scale, dropout)
            return output[..., :dim_v], lse
    output, lse = _blockwise_attention(query, key, value, mask, is_causal, scale)
    return output[..., :dim_v], lse


def _same_head_size(query, key, value):
    """Zero-pad the value (or query and key) head size so all three match; exact for attention with a given scale."""
    dim, dim_v = query.shape[-1], value.shape[-1]
    if dim_v < dim:
        value = torch.nn.functional.pad(value, (0, dim - dim_v))  # [batch head key dim]
    elif dim_v > dim:
        query = torch.nn.functional.pad(query, (0, dim_v - dim))  # [batch head query dim_v]
        key = torch.nn.functional.pad(key, (0, dim_v - dim))  # [batch head key dim_v]
    return query, key, value


def _cuda_fused_attention(query, key, value, mask, is_causal, scale, dropout):
    """CUDA: the flash kernel when there is no mask (fp16/bf16), else the memory-efficient kernel; both give the LSE."""
    n_query = query.shape[2]
    if mask is None and query.dtype in (torch.float16, torch.bfloat16):
        output, lse, *_ = torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, dropout, is_causal, False, scale=scale
        )
        return output, lse[..., :n_query].float()
    bias = None if mask is None else mask.expand(query.shape[0], query.shape[1], n_query, key.shape[2])
    output, lse, *_ = torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, bias, True, dropout, is_causal, scale=scale
    )
    return output, lse[..., :n_query].float()  # the kernel pads the LSE's query axis


def _blockwise_attention(query, key, value, mask, is_causal, scale, block_rows: int = 256):
    """Reference path for shapes or devices without an LSE-returning kernel: softmax one query block at a time."""
    key, value = _expand_kv(key, query.shape[1]), _expand_kv(value, query.shape[1])
    outputs, lses = [], []
    for start in range(0, query.shape[2], block_rows):
        rows = slice(start, min(start + block_rows, query.shape[2]))
        scores = _block_scores(query, key, rows, mask, is_causal, scale)  # [batch head block key]
        lse = torch.logsumexp(scores, dim=-1)  # [batch head block]
        probs = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
        outputs.append((probs @ value.float()).to(query.dtype))  # [batch head block dim_v]
        lses.append(lse)
    return torch.cat(outputs, dim=2), torch.cat(lses, dim=2)


def _block_scores(
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch head key dim]
    rows: slice,
    mask: torch.Tensor | None,  # [batch 1|head query key]
    is_causal: bool,
    scale: float,
) -> torch.Tensor:
    """Masked, scaled scores of a block of query rows in float32: [batch head block key]."""
    scores = (query[:, :, rows].float() @ key.float().transpose(-1, -2)) * scale  # [batch head block key]
    if mask is not None:
        scores = scores + mask[:, :, rows].float()
    if is_causal:
        query_pos = torch.arange(rows.start, rows.stop, device=scores.device)[:, None]
        key_pos = torch.arange(key.shape[2], device=scores.device)[None, :]
        scores = scores.masked_fill(key_pos > query_pos, -math.inf)
    return scores


def _select_heads(
    heads: Sequence[int],
    layer: int,
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch head key dim]
    lse: torch.Tensor,  # [batch head query]
    mask: torch.Tensor | None,  # [batch 1|head query key]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """query, key, lse and mask of the chosen heads only (no copy when every head is chosen, in order)."""
    n_heads = query.shape[1]
    _check_heads(heads, layer, n_heads)
    if tuple(heads) == tuple(range(n_heads)):
        return query, key, lse, mask
    index = torch.tensor(list(heads), device=query.device)
    if mask is not None and mask.shape[1] > 1:
        mask = mask.index_select(1, index)  # [batch head_sel query key]
    # [batch head_sel query dim], [batch head_sel key dim], [batch head_sel query]
    return query.index_select(1, index), key.index_select(1, index), lse.index_select(1, index), mask


def _block_rows(session: _Session, n_batch: int, n_heads: int, n_query: int, n_key: int) -> int:
    """Query rows per α block: the session's byte budget for all selected heads, at most MAX_BLOCK_ROWS."""
    row_bytes = n_batch * n_heads * n_key * 4
    return max(1, min(n_query, MAX_BLOCK_ROWS, session.block_bytes // max(row_bytes, 1)))


def _causal_bias(block_rows: int, device: torch.device) -> torch.Tensor:
    """[query key] additive causal mask of the diagonal square of a block: −inf above the diagonal."""
    return torch.zeros(block_rows, block_rows, device=device).masked_fill_(
        torch.ones(block_rows, block_rows, dtype=torch.bool, device=device).triu(1), -math.inf
    )


def _hand_out(
    session: _Session,
    layer: int,
    wanted: dict,
    heads: Sequence[int],
    start: int,
    n_query: int,
    query_offset: int,
    n_key: int,
    alpha: torch.Tensor,  # [batch head_sel block key_stop]
    entropy: torch.Tensor | None = None,  # [batch head_sel block]
) -> None:
    """Give one α block to every sink that wants some of its heads (padded to all keys unless it accepts a crop)."""
    position = {head: index for index, head in enumerate(heads)}
    for sink, chosen in wanted.items():
        if not chosen:
            continue
        same = tuple(chosen) == tuple(heads)
        index = None if same else [position[h] for h in chosen]
        mine = alpha if same else alpha[:, index]
        if mine.shape[-1] < n_key and not getattr(sink, "accepts_causal_crop", False):
            mine = torch.nn.functional.pad(mine, (0, n_key - mine.shape[-1]))  # [batch head block key]
        rows_entropy = None if entropy is None else (entropy if same else entropy[:, index])
        sink.update(AttentionBlock(session.step, layer, chosen, start, n_query, query_offset, n_key, mine,
                                   entropy=rows_entropy))


def _wants_entropy(sinks) -> bool:
    return any(getattr(sink, "wants_entropy", False) for sink in sinks)


def _mask_bias(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The finite part of an additive mask when it has one (ALiBi, T5 position bias), else None (0/−inf masks).
    Row entropy then subtracts Σ α·bias."""
    if mask is None:
        return None
    bias = mask.float().masked_fill(torch.isinf(mask), 0.0)
    return bias if bool(bias.any()) else None


def _softmax_in_place(
    scores: torch.Tensor,  # [batch head block key] float32, masked with −inf
    want_lse: bool,
    masked: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Softmax over keys written over `scores`, and the rows' log-sum-exp if wanted: (α [batch head block key],
    lse [batch head block] or None).

    One fused softmax (its max, exp and sum in cache-friendly passes: on CPU about half the time of separate max,
    sub, exp, sum and mul over a block larger than the cache). The LSE, when a consumer needs it, costs two row
    maxima: it follows from the largest score m and the largest weight, which is 1/Σ exp(s − m), as
    lse = m − log max α. With a mask (`masked`), a fully masked row has α = 0 and, as the CPU kernel gives it,
    lse = 0.
    """
    row_max = scores.amax(dim=-1) if want_lse else None  # [batch head block]
    torch.ops.aten._softmax.out(scores, -1, False, out=scores)  # in place: each row is read before it is written
    alpha = scores  # [batch head block key]
    if masked:  # the softmax of an all −inf row is NaN in every entry, the first included
        empty = torch.isnan(alpha[..., 0])  # [batch head block]
        if bool(empty.any()):
            alpha.masked_fill_(empty[..., None], 0.0)
    if not want_lse:
        return alpha, None
    peak = alpha.amax(dim=-1)  # [batch head block]: 1 / Σ_j exp(s_j − m)
    lse = torch.where(peak > 0, row_max - peak.log(), torch.zeros_like(row_max))  # [batch head block]
    return alpha, lse


def _stream_single_pass(
    session: _Session,
    layer: int,
    wanted: dict,
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch kv_head key dim]
    value: torch.Tensor,  # [batch kv_head key dim_v]
    mask: torch.Tensor | None,  # [batch 1|head query key] additive
    is_causal: bool,
    scale: float,
    want_lse: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention of every head computed block by block from the α the sinks receive: per block of query rows one
    QKᵀ, a softmax and α·V. Returns (output [batch head query dim_v] in the query's dtype, lse [batch head query]
    float32, or None when `want_lse` is False and no sink wants the row entropy), equal to the fused kernel's
    within float32 rounding.

    Grouped-query heads are never repeated: the g query heads of one kv head are stacked on the row axis, so one
    matmul per kv head serves them all (`[batch·kv_head, g·block, key]` is `[batch, head, block, key]` in memory).
    """
    n_batch, n_heads, n_query, dim = query.shape
    n_kv, n_key, dim_v = key.shape[1], key.shape[2], value.shape[-1]
    group = n_heads // n_kv
    block_rows = _block_rows(session, n_batch, n_heads, n_query, n_key)
    query_offset = n_key - n_query  # with a KV cache the queries are the last n_query positions
    # the scale goes into the GEMM (baddbmm's alpha): no scaled copy of the queries
    queries = query.float().reshape(n_batch * n_kv, group, n_query, dim)  # [batch·kv group query dim]
    keys_t = key.float().reshape(n_batch * n_kv, n_key, dim).transpose(1, 2)  # [batch·kv dim key]
    values = value.float().reshape(n_batch * n_kv, n_key, dim_v)  # [batch·kv key dim_v]
    entropy_wanted = _wants_entropy(wanted)
    if entropy_wanted:  # one α·[V | K] product gives the output and αK, from which the row entropy follows
        values = torch.cat([values, key.float().reshape(n_batch * n_kv, n_key, dim)], dim=-1)  # [b·kv key dv+d]
        bias = _mask_bias(mask)
    mask = None if mask is None else mask.float()
    causal_bias = _causal_bias(block_rows, query.device) if is_causal else None
    output = torch.empty(n_batch * n_kv, group, n_query, dim_v, device=query.device)  # [batch·kv group query dim_v]
    # the LSE only where a consumer needs it: sampled rows, gathered slots or the row entropy
    lse = torch.empty(n_batch, n_heads, n_query, device=query.device) if want_lse or entropy_wanted else None
    buffer = torch.empty(n_batch * n_heads * block_rows * n_key, device=query.device)
    heads = tuple(range(n_heads))
    for start in range(0, n_query, block_rows):
        stop = min(start + block_rows, n_query)
        rows = stop - start
        key_stop = stop if is_causal else n_key  # causal: keys after the block's last query are never computed
        scores = buffer[: n_batch * n_heads * rows * key_stop].view(n_batch * n_kv, group * rows, key_stop)
        block_queries = queries[:, :, start:stop].reshape(n_batch * n_kv, group * rows, dim)  # [batch·kv g·block dim]
        torch.baddbmm(scores, block_queries, keys_t[..., :key_stop], beta=0.0, alpha=scale,
                      out=scores)  # [batch·kv group·block key_stop]: scale·QKᵀ
        scores = scores.view(n_batch, n_heads, rows, key_stop)  # [batch head block key_stop]
        if mask is not None:
            scores += mask[:, :, start:stop, :key_stop]
        if causal_bias is not None:
            scores[..., start:stop] += causal_bias[:rows, :rows]
        alpha, block_lse = _softmax_in_place(scores, lse is not None, mask is not None)  # [batch head block key_stop]
        if lse is not None:
            lse[:, :, start:stop] = block_lse  # [batch head block]
        block_out = torch.bmm(alpha.view(n_batch * n_kv, group * rows, key_stop), values[:, :key_stop])
        output[:, :, start:stop] = block_out[..., :dim_v].view(n_batch * n_kv, group, rows, dim_v)
        entropy = None
        if entropy_wanted:  # −Σ α log α = lse − Σ α·(scale·q·k) − Σ α·bias
            products = scale * (block_out[..., dim_v:] * block_queries).sum(-1).view(n_batch, n_heads, rows)
            entropy = lse[:, :, start:stop] - products
            if bias is not None:
                entropy -= (alpha * bias[:, :, start:stop, :key_stop]).sum(-1)
        _hand_out(session, layer, wanted, heads, start, n_query, query_offset, n_key, alpha, entropy)
    output = output.view(n_batch, n_heads, n_query, dim_v).to(query.dtype)  # [batch head query dim_v]
    return output, lse


def _stream_alpha(
    session: _Session,
    layer: int,
    wanted: dict,
    heads: Sequence[int],
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch head key dim]
    mask: torch.Tensor | None,
    is_causal: bool,
    scale: float,
    lse: torch.Tensor,  # [batch head query]
) -> None:
    """Rebuild α for `heads` from the kernel's LSE, one query block at a time, and hand each block to the sinks."""
    n_query, n_key = query.shape[2], key.shape[2]
    query_sel, key_sel, lse_sel, mask_sel = _select_heads(heads, layer, query, key, lse, mask)
    block_rows = _block_rows(session, query.shape[0], len(heads), n_query, n_key)
    query_offset = n_key - n_query  # with a KV cache the queries are the last n_query positions
    batch_heads = query.shape[0] * len(heads)
    # Fold scale and −lse into one matmul: [scale·q, −lse] · [k, 1] = scale·q·k − lse, so α = exp(that + mask).
    query_aug = torch.cat([query_sel.float() * scale, -lse_sel[..., None]], dim=-1)  # [batch head_sel query dim+1]
    query_aug = query_aug.reshape(batch_heads, n_query, -1)  # [batch·head_sel query dim+1]
    key_aug = torch.cat([key_sel.float(), key_sel.new_ones(*key_sel.shape[:-1], 1, dtype=torch.float32)], dim=-1)
    key_aug = key_aug.reshape(batch_heads, n_key, -1).transpose(1, 2)  # [batch·head_sel dim+1 key]
    mask_full = None
    if mask_sel is not None:
        mask_full = mask_sel.float().expand(query.shape[0], len(heads), n_query, n_key)  # [batch head_sel query key]
    causal_bias = _causal_bias(block_rows, query.device)
    # One buffer per call, reused by every block (a contiguous prefix of it), so blocks allocate nothing.
    buffer = torch.empty(batch_heads * block_rows * n_key, device=query.device)
    for start in range(0, n_query, block_rows):
        stop = min(start + block_rows, n_query)
        # Causal: keys after this block's last query are masked for every row, so they are never computed.
        key_stop = stop if is_causal else n_key
        scores = buffer[: batch_heads * (stop - start) * key_stop].view(batch_heads, stop - start, key_stop)
        torch.bmm(query_aug[:, start:stop], key_aug[..., :key_stop], out=scores)  # [batch·head_sel block key_stop]
        scores = scores.view(query.shape[0], len(heads), stop - start, key_stop)  # [batch head_sel block key_stop]
        if mask_full is not None:
            scores += mask_full[:, :, start:stop, :key_stop]
        if is_causal:
            scores[..., start:stop] += causal_bias[: stop - start, : stop - start]
        alpha = scores.exp_()  # [batch head_sel block key_stop]
        _hand_out(session, layer, wanted, heads, start, n_query, query_offset, n_key, alpha)


def _stream_rows(
    session: _Session,
    layer: int,
    sink,
    heads: Sequence[int],
    rows: torch.Tensor,  # [row] long, ascending
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch kv_head key dim]
    mask: torch.Tensor | None,  # [batch 1|head query key] additive
    is_causal: bool,
    scale: float,
    lse: torch.Tensor,  # [batch head query]
) -> None:
    """α of a sampling sink's rows only, rebuilt from the kernel's LSE in blocks of those rows (causal blocks stop
    at their last row's key). Grouped kv heads are not repeated when every head is wanted."""
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
        keys = _expand_kv(key, n_heads).index_select(1, torch.tensor(list(heads), device=query.device))
    # Fold −lse into the matmul: [scale·q, −lse] · [k, 1] = scale·q·k − lse, so α = exp(that + mask).
    ones = torch.ones(*keys.shape[:-1], 1, device=query.device)
    keys_t = torch.cat([keys.float(), ones], dim=-1).reshape(n_batch * kv_heads, n_key, dim + 1).transpose(1, 2)
    chosen = query if all_heads else query[:, list(heads)]  # [batch head_sel query dim]
    lse_rows = (lse if all_heads else lse[:, list(heads)])[:, :, rows]  # [batch head_sel row]
    queries = torch.cat([chosen[:, :, rows].float() * scale, -lse_rows[..., None]], dim=-1)  # [batch hs row dim+1]
    queries = queries.reshape(n_batch * kv_heads, group, len(rows), dim + 1)  # [batch·kv group row dim+1]
    block_rows = _block_rows(session, n_batch, len(heads), len(rows), n_key)
    entropy_wanted = getattr(sink, "wants_entropy", False)
    if entropy_wanted:
        keys_plain = keys.float().reshape(n_batch * kv_heads, n_key, dim)  # [batch·kv key dim]
        bias = _mask_bias(mask)
    for start in range(0, len(rows), block_rows):
        block = rows[start:start + block_rows]  # [block]
        size = len(block)
        key_stop = int(block[-1]) + 1 if is_causal else n_key
        block_queries = queries[:, :, start:start + size].reshape(n_batch * kv_heads, group * size, dim + 1)
        scores = torch.bmm(block_queries, keys_t[..., :key_stop])  # [batch·kv group·block key_stop]
        scores = scores.view(n_batch, len(heads), size, key_stop)  # [batch head_sel block key_stop]
        if mask is not None:
            mask_rows = mask[:, :, block, :key_stop]  # [batch 1|head block key_stop]
            if mask_rows.shape[1] > 1 and not all_heads:
                mask_rows = mask_rows[:, list(heads)]
            scores += mask_rows.float()
        if is_causal:  # only keys after the block's first row can lie above a row's diagonal
            low = int(block[0]) + 1
            above = torch.arange(low, key_stop, device=query.device)[None, :] > block[:, None]  # [block key]
            scores[..., low:].masked_fill_(above, -math.inf)
        alpha = scores.exp_()  # [batch head_sel block key_stop]
        entropy = None
        if entropy_wanted:  # −Σ α log α = lse − Σ α·(scale·q·k) − Σ α·bias, via one α·K product
            weighted = torch.bmm(alpha.view(n_batch * kv_heads, group * size, key_stop), keys_plain[:, :key_stop])
            products = (weighted * block_queries[..., :dim]).sum(-1).view(n_batch, len(heads), size)
            entropy = lse_rows[:, :, start:start + size] - products
            if bias is not None:
                bias_rows = bias[:, :, block, :key_stop]
                bias_rows = bias_rows[:, list(heads)] if bias_rows.shape[1] > 1 and not all_heads else bias_rows
                entropy -= (alpha * bias_rows).sum(-1)
        if key_stop < n_key and not getattr(sink, "accepts_causal_crop", False):
            alpha = torch.nn.functional.pad(alpha, (0, n_key - key_stop))  # [batch head_sel block key]
        sink.update(AttentionBlock(session.step, layer, tuple(heads), int(block[0]), n_query, query_offset, n_key,
                                   alpha, rows=block, entropy=entropy))


def _gather_alpha(
    session: _Session,
    layer: int,
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch head key dim]
    mask: torch.Tensor | None,  # [batch 1|head query key] additive
    is_causal: bool,
    scale: float,
    lse: torch.Tensor,  # [batch head query]
) -> None:
    """α at the key slots gather-sinks ask for: one dot product per (query, slot) — or, where a block's rows share
    their keys, one product against the block's distinct keys — never a dense [query key] block."""
    n_batch, n_heads, n_query, dim = query.shape
    for sink in session.sinks:
        request = sink.gather_for(layer, n_heads) if hasattr(sink, "gather_for") else None
        if request is None:
            continue
        heads, slots = tuple(request[0]), request[1].to(query.device)  # slots: [batch query slot]
        if slots.shape[:2] != (n_batch, n_query):
            raise ProbeError(f"gather slots are shaped {tuple(slots.shape)}; expected [batch={n_batch}, "
                             f"query={n_query}, slot]")
        query_sel, key_sel, lse_sel, mask_sel = _select_heads(heads, layer, query, key, lse, mask)
        query_sel, key_sel = query_sel.float(), key_sel.float()
        n_slots = slots.shape[-1]
        out = torch.zeros(n_batch, len(heads), n_query, n_slots, device=query.device)  # [batch head query slot]
        # Two ways to get q_i·k_j at the slots of a block of rows. Where the rows share keys (diagonal bands such as
        # previous-token or fixed offsets, key 0) one matmul against the block's distinct keys is cheapest; else
        # each row's slot keys are gathered ([batch head block slot dim], a quarter of the block budget).
        row_bytes = n_batch * len(heads) * n_slots * dim * 4
        gather_rows = max(1, min(n_query, session.block_bytes // 4 // max(1, row_bytes)))
        start = 0
        while start < n_query:
            stop = min(start + MAX_BLOCK_ROWS, n_query)
            safe = slots[:, start:stop].clamp(min=0)  # [batch block slot]
            distinct, inverse = torch.unique(safe, return_inverse=True)  # [distinct], [batch block slot]
            shared = (4 * len(distinct) < (stop - start) * n_slots
                      and n_batch * len(heads) * (stop - start) * len(distinct) * 4 <= session.block_bytes)
            if shared:
                keys = key_sel[:, :, distinct]  # [batch head distinct dim]
                products = query_sel[:, :, start:stop] @ keys.transpose(-1, -2)  # [batch head block distinct]
                index = inverse[:, None].expand(-1, len(heads), -1, -1)  # [batch head block slot]
                scores = products.gather(-1, index) * scale  # [batch head block slot]
            else:
                stop = min(start + gather_rows, n_query)
                safe = slots[:, start:stop].clamp(min=0)  # [batch block slot]
                block = stop - start
                flat = safe.reshape(n_batch, 1, block * n_slots, 1).expand(-1, len(heads), -1, dim)
                keys = key_sel.gather(2, flat).view(n_batch, len(heads), block, n_slots, dim)  # [batch head block slot dim]
                queries = query_sel[:, :, start:stop, None, :]  # [batch head block 1 dim]
                scores = (queries @ keys.transpose(-1, -2))[..., 0, :] * scale  # [batch head block slot]
            rows = slice(start, stop)
            present = slots[:, rows] >= 0  # [batch block slot]
            if mask_sel is not None:
                mask_rows = mask_sel[:, :, rows].float()  # [batch 1|head_sel block key]
                mask_index = safe[:, None].expand(-1, mask_rows.shape[1], -1, -1)  # [batch 1|head block slot]
                scores = scores + mask_rows.gather(-1, mask_index)
            if is_causal:
                position = torch.arange(start, stop, device=query.device)[:, None]  # [block 1]
                present = present & (safe <= position)
            alpha = torch.exp(scores - lse_sel[:, :, rows, None].float())  # [batch head block slot]
            out[:, :, rows] = alpha * present[:, None]
            start = stop
        sink.update_gathered(layer, heads, out)
