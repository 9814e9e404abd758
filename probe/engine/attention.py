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

from probe.engine.output_norms import with_output_norms
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
    value: torch.Tensor,  # [batch kv_head key dim]
    attention_mask: torch.Tensor | None,  # [batch 1 query key] bool (True = attend) or additive float, or None
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Registered as "probe_capture": the fused kernel's output, and α of the wanted heads handed to the sinks."""
    session = _ACTIVE.get()
    if session is None:  # the model was left on the engine outside `capture`: behave exactly like sdpa
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    if kwargs.get("softcap") is not None:
        raise ProbeError("attention logit soft-capping is not supported by the capture engine")

    n_query, n_heads = query.shape[2], query.shape[1]
    if key.shape[1] != n_heads:  # grouped-query attention: each kv head serves n_heads / kv_heads query heads
        key = repeat_kv(key, n_heads // key.shape[1])  # [batch head key dim]
        value = repeat_kv(value, n_heads // value.shape[1])  # [batch head key dim]

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
    output, lse = with_output_norms(session, module, layer, query, key, value, lambda q, k, v: _fused_attention(
        q, k, v, additive, is_causal, scale, dropout))  # [batch head query dim]; output norms to sinks that ask
    _stream_alpha(session, layer, query, key, additive, is_causal, scale, lse)
    _gather_alpha(session, layer, query, key, additive, is_causal, scale, lse)
    if session.ablate is not None:
        output = _apply_ablation(output, session.ablate, layer)  # [batch head query dim]
    return output.transpose(1, 2).contiguous(), None  # [batch query head dim]


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
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    scale: float,
    dropout: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output [batch head query dim], lse [batch head query] float32) from a fused kernel, else blockwise torch."""
    if query.device.type == "cpu":
        output, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout, is_causal, attn_mask=mask, scale=scale
        )
        return output, lse.float()
    if query.device.type == "cuda":
        with contextlib.suppress(RuntimeError):
            return _cuda_fused_attention(query, key, value, mask, is_causal, scale, dropout)
    return _blockwise_attention(query, key, value, mask, is_causal, scale)


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
    """Reference path for devices without an LSE-returning kernel: softmax one query block at a time."""
    outputs, lses = [], []
    for start in range(0, query.shape[2], block_rows):
        rows = slice(start, min(start + block_rows, query.shape[2]))
        scores = _block_scores(query, key, rows, mask, is_causal, scale)  # [batch head block key]
        lse = torch.logsumexp(scores, dim=-1)  # [batch head block]
        probs = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
        outputs.append((probs @ value.float()).to(query.dtype))  # [batch head block dim]
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
    bad = [head for head in heads if not 0 <= head < n_heads]
    if bad:
        raise ProbeError(f"head index {bad[0]} is out of range: layer {layer} has heads 0..{n_heads - 1}")
    if tuple(heads) == tuple(range(n_heads)):
        return query, key, lse, mask
    index = torch.tensor(list(heads), device=query.device)
    if mask is not None and mask.shape[1] > 1:
        mask = mask.index_select(1, index)  # [batch head_sel query key]
    # [batch head_sel query dim], [batch head_sel key dim], [batch head_sel query]
    return query.index_select(1, index), key.index_select(1, index), lse.index_select(1, index), mask


def _stream_alpha(
    session: _Session,
    layer: int,
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch head key dim]
    mask: torch.Tensor | None,
    is_causal: bool,
    scale: float,
    lse: torch.Tensor,  # [batch head query]
) -> None:
    """Rebuild α for the heads the sinks want, one query block at a time, and hand each block to the sinks."""
    n_heads, n_query, n_key = query.shape[1], query.shape[2], key.shape[2]
    wanted = {sink: tuple(sink.heads_for(layer, n_heads)) for sink in session.sinks if hasattr(sink, "heads_for")}
    heads = sorted({head for chosen in wanted.values() for head in chosen})
    if not heads:
        return
    position = {head: index for index, head in enumerate(heads)}
    query_sel, key_sel, lse_sel, mask_sel = _select_heads(heads, layer, query, key, lse, mask)
    row_bytes = query.shape[0] * len(heads) * n_key * 4
    block_rows = max(1, min(n_query, MAX_BLOCK_ROWS, session.block_bytes // max(row_bytes, 1)))
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
    causal_bias = torch.zeros(block_rows, block_rows, device=query.device).masked_fill_(
        torch.ones(block_rows, block_rows, dtype=torch.bool, device=query.device).triu(1), -math.inf
    )  # [query key] within the diagonal square of a block
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
        for sink, chosen in wanted.items():
            if not chosen:
                continue
            mine = alpha if tuple(chosen) == tuple(heads) else alpha[:, [position[h] for h in chosen]]
            if mine.shape[-1] < n_key and not getattr(sink, "accepts_causal_crop", False):
                mine = torch.nn.functional.pad(mine, (0, n_key - mine.shape[-1]))  # [batch head block key]
            sink.update(AttentionBlock(session.step, layer, chosen, start, n_query, query_offset, n_key, mine))


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
