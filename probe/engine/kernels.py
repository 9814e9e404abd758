"""The attention output and its log-sum-exp: the fused kernels, the blockwise softmax, and how the scores are
formed.

:class:`Scores` says how one layer's scores are made from q and k — the scale, the additive mask, causality,
soft-capping (Gemma 2: c·tanh(s / c) before the mask) and attention sinks (gpt-oss: one logit per head that
joins every row's softmax and has no value). :func:`layer_output` gives the output and the row normaliser

    lse'_i = logaddexp(lse_i, sink_h)    (= lse_i without sinks)

so that α_ij = exp(s_ij − lse'_i) on every path. Without soft-capping a fused kernel runs and its output is
rescaled by exp(lse − lse') for the sinks; with soft-capping no kernel computes the model's scores, so the
blockwise softmax runs instead.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
from transformers.integrations.sdpa_attention import repeat_kv


@dataclass(frozen=True)
class Scores:
    """How a layer's scores s_ij are formed: s = cap(scale · q·k) + mask (cap only with `softcap`)."""

    scale: float
    mask: torch.Tensor | None  # [batch 1|head query key] additive (0 / −inf, position bias), or None
    is_causal: bool  # the causal pattern is not in `mask`: keys after the query are masked
    softcap: float | None = None  # c of c·tanh(s / c), applied before the mask
    sinks: torch.Tensor | None = None  # [head] float32 learned sink logits (s_aux), or None

    def cap_(self, scores: torch.Tensor) -> torch.Tensor:
        """Soft-cap raw scaled scores in place (no-op without `softcap`)."""
        if self.softcap is not None:
            scores.div_(self.softcap).tanh_().mul_(self.softcap)
        return scores


def expand_kv(key: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Grouped-query attention: each kv head serves n_heads / kv_heads query heads ([batch head key dim])."""
    return key if key.shape[1] == n_heads else repeat_kv(key, n_heads // key.shape[1])


def additive_mask(
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
        position_bias = position_bias[..., :n_key]  # a causal prefill into a static cache crops the keys
        if mask is None and is_causal:
            causal = torch.ones(n_query, n_key, dtype=torch.bool, device=query.device).tril()
            mask = torch.zeros(causal.shape, dtype=query.dtype,
                               device=query.device).masked_fill(~causal, -math.inf)
        mask = position_bias if mask is None else position_bias + mask
    return None if mask is None else mask.to(query.dtype)


def with_sinks(
    output: torch.Tensor,  # [batch head query dim_v]
    lse: torch.Tensor,  # [batch head query] float32
    sinks: torch.Tensor | None,  # [head] float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """A sink-free kernel's (output, lse) turned into the sink model's: (output · exp(lse − lse'), lse')."""
    if sinks is None:
        return output, lse
    normaliser = torch.logaddexp(lse, sinks.to(lse.device)[None, :, None])  # [batch head query]
    factor = torch.exp(lse - normaliser)  # [batch head query]: the rows' mass on the keys
    return (output.float() * factor[..., None]).to(output.dtype), normaliser


def sink_mass(sinks: torch.Tensor, normaliser: torch.Tensor) -> torch.Tensor:
    """exp(sink_h − lse'_i) `[batch head row]`: the weight on the learned sink, from `sinks` `[head]` and lse'
    `[batch head row]` of the same heads."""
    return torch.exp(sinks.to(normaliser.device)[None, :, None] - normaliser)


def layer_output(
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch kv_head key dim]
    value: torch.Tensor,  # [batch kv_head key dim_v]
    scores: Scores,
    dropout: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output [batch head query dim_v], lse' [batch head query] float32) of one attention call: the fused
    kernel (rescaled for sinks), or the blockwise softmax where the scores are soft-capped."""
    if scores.softcap is not None:
        output, lse = blockwise_attention(query, key, value, scores)
    else:
        output, lse = fused_attention(query, key, value, scores.mask, scores.is_causal, scores.scale, dropout)
    return with_sinks(output, lse, scores.sinks)


def fused_attention(
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch kv_head key dim]
    value: torch.Tensor,  # [batch kv_head key dim_v]
    mask: torch.Tensor | None,
    is_causal: bool,
    scale: float,
    dropout: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output [batch head query dim_v], lse [batch head query] float32) from a fused kernel, else blockwise
    torch.

    Shapes a kernel refuses never raise: a value head size that differs from the query/key one (MLA) is
    zero-padded to it (exact: padded value columns give zero output columns, padded q/k columns add zero to
    the scores), and anything else the kernel rejects goes to the blockwise path, which also returns the
    log-sum-exp.
    """
    dim_v = value.shape[-1]
    # a float32 call on reduced-precision q, k (output norms)
    mask = None if mask is None else mask.to(query.dtype)
    if query.device.type == "cpu" and dim_v == query.shape[-1]:
        with contextlib.suppress(RuntimeError):  # the CPU flash kernel takes grouped kv heads as they are
            output, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                query, key, value, dropout, is_causal, attn_mask=mask, scale=scale
            )
            return output, lse.float()
    query, key, value = _same_head_size(query, expand_kv(key, query.shape[1]),
                                        expand_kv(value, query.shape[1]))
    with contextlib.suppress(RuntimeError):
        if query.device.type == "cpu":
            output, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                query, key, value, dropout, is_causal, attn_mask=mask, scale=scale
            )
            return output[..., :dim_v], lse.float()
        if query.device.type == "cuda":
            output, lse = _cuda_fused_attention(query, key, value, mask, is_causal, scale, dropout)
            return output[..., :dim_v], lse
    output, lse = blockwise_attention(query, key, value, Scores(scale, mask, is_causal))
    return output[..., :dim_v], lse


def _same_head_size(query, key, value):
    """Zero-pad the value (or query and key) head size so all three match; exact for attention with a given
    scale."""
    dim, dim_v = query.shape[-1], value.shape[-1]
    if dim_v < dim:
        value = torch.nn.functional.pad(value, (0, dim - dim_v))  # [batch head key dim]
    elif dim_v > dim:
        query = torch.nn.functional.pad(query, (0, dim_v - dim))  # [batch head query dim_v]
        key = torch.nn.functional.pad(key, (0, dim_v - dim))  # [batch head key dim_v]
    return query, key, value


def _cuda_fused_attention(query, key, value, mask, is_causal, scale, dropout):
    """CUDA: the flash kernel when there is no mask (fp16/bf16), else the memory-efficient kernel; both give
    the LSE (a fully masked row's LSE is 0, as the CPU kernel gives it: α = exp(−inf − 0) = 0 there)."""
    n_query = query.shape[2]
    if mask is None and query.dtype in (torch.float16, torch.bfloat16):
        output, lse, *_ = torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, dropout, is_causal, False, scale=scale
        )
    else:
        shape = (query.shape[0], query.shape[1], n_query, key.shape[2])  # [batch head query key]
        bias = None if mask is None else aligned_bias(mask).expand(shape)
        output, lse, *_ = torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, bias, True, dropout, is_causal, scale=scale
        )
    lse = lse[..., :n_query].float()  # the memory-efficient kernel pads the LSE's query axis
    return output, torch.where(lse.isfinite(), lse, 0.0)


BIAS_ALIGNMENT = 16  # elements; the memory-efficient kernel wants 16-byte strides (4 float32, 8 half values)


def aligned_bias(
    mask: torch.Tensor,  # [batch 1|head query key] additive
) -> torch.Tensor:
    """The mask over storage whose every stride but the last is a multiple of 16 elements: the CUDA
    memory-efficient kernel refuses any other bias ("attn_bias is not correctly aligned (strideM)": a key
    count that is not a multiple of 4 / 8 does it), as torch's own sdpa pads it (`preprocess_mask`). A copy
    only when the mask is not aligned already; its values are unchanged."""
    n_key = mask.shape[-1]
    aligned = mask.stride(-1) == 1 and all(stride % BIAS_ALIGNMENT == 0
                                           for size, stride in zip(mask.shape[:-1], mask.stride()[:-1],
                                                                   strict=True) if size > 1)
    if aligned:
        return mask
    width = -(-n_key // BIAS_ALIGNMENT) * BIAS_ALIGNMENT
    storage = mask.new_zeros(*mask.shape[:-1], width)  # [batch 1|head query key_padded]
    storage[..., :n_key] = mask
    return storage[..., :n_key]


def blockwise_attention(query, key, value, scores: Scores, block_rows: int = 256):
    """Softmax one query block at a time in float32 (sink-free: :func:`with_sinks` adds the sinks): (output
    [batch head query dim_v] in the query's dtype, lse [batch head query] float32). The path for soft-capped
    scores and for shapes or devices without an LSE-returning kernel."""
    key, value = expand_kv(key, query.shape[1]), expand_kv(value, query.shape[1])
    outputs, lses = [], []
    for start in range(0, query.shape[2], block_rows):
        rows = slice(start, min(start + block_rows, query.shape[2]))
        block = block_scores(query, key, rows, scores)  # [batch head block key]
        lse = torch.logsumexp(block, dim=-1)  # [batch head block]
        probs = torch.exp(block - lse[..., None]).nan_to_num(0.0)
        # a fully masked row: lse = 0, as the CPU kernel gives it
        lse = lse.masked_fill(torch.isneginf(lse), 0.0)
        outputs.append((probs @ value.float()).to(query.dtype))  # [batch head block dim_v]
        lses.append(lse)
    return torch.cat(outputs, dim=2), torch.cat(lses, dim=2)


def block_scores(
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch head key dim]
    rows: slice,
    scores: Scores,
) -> torch.Tensor:
    """Masked, scaled (and capped) scores of a block of query rows in float32: [batch head block key]."""
    # [batch head block key]
    block = (query[:, :, rows].float() @ key.float().transpose(-1, -2)) * scores.scale
    scores.cap_(block)
    if scores.mask is not None:
        block = block + scores.mask[:, :, rows].float()
    if scores.is_causal:
        query_pos = torch.arange(rows.start, rows.stop, device=block.device)[:, None]
        key_pos = torch.arange(key.shape[2], device=block.device)[None, :]
        block = block.masked_fill(key_pos > query_pos, -math.inf)
    return block


def causal_bias(block_rows: int, device: torch.device) -> torch.Tensor:
    """[query key] additive causal mask of the diagonal square of a block: −inf above the diagonal."""
    return torch.zeros(block_rows, block_rows, device=device).masked_fill_(
        torch.ones(block_rows, block_rows, dtype=torch.bool, device=device).triu(1), -math.inf
    )


def mask_bias(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The finite part of an additive mask when it has one (ALiBi, T5 position bias), else None (0/−inf
    masks). Row entropy then subtracts Σ α·bias."""
    if mask is None:
        return None
    bias = mask.float().masked_fill(torch.isinf(mask), 0.0)
    return bias if bool(bias.any()) else None


def softmax_in_place(
    scores: torch.Tensor,  # [batch head block key] float32, masked with −inf
    want_lse: bool,
    masked: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Softmax over keys written over `scores`, and the rows' log-sum-exp if wanted: (α [batch head block
    key], lse [batch head block] or None).

    One fused softmax (its max, exp and sum in cache-friendly passes: on CPU about half the time of separate
    max, sub, exp, sum and mul over a block larger than the cache). The LSE, when a consumer needs it, costs
    two row maxima: it follows from the largest score m and the largest weight, which is 1/Σ exp(s − m), as
    lse = m − log max α. With a mask (`masked`), a fully masked row has α = 0 and, as the CPU kernel gives it,
    lse = 0.
    """
    row_max = scores.amax(dim=-1) if want_lse else None  # [batch head block]
    # in place: each row is read before it is written
    torch.ops.aten._softmax.out(scores, -1, False, out=scores)
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
