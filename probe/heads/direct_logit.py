"""The behavioural half of copying: a head's direct logit attribution to the token an induction head attends
to.

On repeated-block probes (:func:`probe.heads.probesets.repeated_blocks`) every query i in the block's second
copy has one induction target j (the token after the earlier occurrence of t_i; REFERENCE.md), and t_j is the
token to predict next. A copying induction head attends to j and raises t_j's logit; a copy-suppressing one
lowers it.

For head h, with z_h(i) its attention output at row i (the input of the output projection, caught by a forward
pre-hook) and W_O^h its slice of the output projection, the head's direct contribution to the residual stream
is c = z_h(i) W_O^h. Through the final norm, linearised at the clean forward's own scale (LayerNorm: c −
mean(c), divided by the residual's standard deviation; RMSNorm: divided by its root mean square; then the
gain), and the unembedding W_U:

    dla(h, i) = c' · W_U[:, t_j] − mean over the vocabulary of c' · W_U[:, v]

(centred: a shift of every logit changes no prediction). ``copying_dla`` is its mean over the counted rows of
every probe, in logits. Causal LMs only (a masked LM's decoder transform is nonlinear): NaN elsewhere, and
where the final norm or an output projection is not found."""

from __future__ import annotations

import math
import threading

import torch
from torch import nn

from probe.engine import capture
from probe.engine.output_norms import OutputProjections, weight_of
from probe.heads.copying import _attention_modules, final_norm
from probe.models import ModelKind


def induction_rows(
    repeat_start: torch.Tensor,
    repeat_len: torch.Tensor,
    seq_len: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(query mask `[example seq]` bool, target position `[example seq]` long): the rows of each second copy
    and their induction targets j = i − block + 1 (−1 elsewhere)."""
    n = len(repeat_start)
    position = torch.arange(seq_len)[None].expand(n, -1)  # [example seq]
    start, size = repeat_start[:, None], repeat_len[:, None]  # [example 1]
    rows = (position >= start + size) & (position < start + 2 * size)  # [example seq]
    target = torch.where(rows, position - size + 1, torch.full_like(position, -1))  # [example seq]
    return rows, target


def _normalise(contribution: torch.Tensor, residual: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """`contribution` [batch seq head d_model] through `norm` linearised at `residual` [batch seq d_model]."""
    residual = residual.double()
    if isinstance(norm, nn.LayerNorm):
        centred = contribution - contribution.mean(-1, keepdim=True)
        scale = residual.var(-1, unbiased=False, keepdim=True).add(norm.eps).sqrt()  # [batch seq 1]
        return centred / scale[:, :, None] * weight_of(norm)
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
    scale = residual.pow(2).mean(-1, keepdim=True).add(eps).sqrt()  # [batch seq 1]
    return contribution / scale[:, :, None] * weight_of(norm)


def induction_dla(loaded, probes, batch_size: int = 8) -> torch.Tensor:
    """Mean direct logit attribution `[layer head]` (float64, logits) of every head to its induction targets'
    tokens on `probes` (a :class:`probe.heads.label_probes.TokenProbeSet` with repeat_start / repeat_len); NaN
    where it is not defined (see the module doc)."""
    shape = (loaded.n_layers, loaded.n_heads)
    nan = torch.full(shape, math.nan, dtype=torch.float64)
    model = loaded.model
    norm = final_norm(model)
    modules = _attention_modules(model)
    unembedding = model.get_output_embeddings()
    kind = type(norm).__name__ if norm is not None else ""
    linearisable = isinstance(norm, nn.LayerNorm) or (
        kind.endswith("RMSNorm") and not kind.startswith("Gemma")
    )
    if (
        loaded.kind != ModelKind.CAUSAL_LM
        or probes is None
        or probes.repeat_start is None
        or not linearisable
        or unembedding is None
        or len(modules) != loaded.n_layers
    ):
        return nan
    finder = OutputProjections(model)
    projections = [finder.find(module) for module in modules]
    if any(projection is None for projection in projections):
        return nan
    unembed = weight_of(unembedding).T  # [d_model vocab]
    mean_unembed = unembed.mean(-1)  # [d_model]
    caught: dict[str, torch.Tensor] = {}
    owner = threading.get_ident()  # hooks are the model's: record only this thread's forwards (the app and
    # threaded callers run other forwards of the same model meanwhile)

    def keep(name: str, args: tuple) -> None:
        if threading.get_ident() == owner:
            caught[name] = args[0].detach()

    handles = [
        projection.register_forward_pre_hook(lambda _module, args, layer=layer: keep(f"z{layer}", args))
        for layer, projection in enumerate(projections)
    ]
    handles.append(norm.register_forward_pre_hook(lambda _m, args: keep("residual", args)))
    total = torch.zeros(shape, dtype=torch.float64)
    counted = 0
    try:
        for start in range(0, len(probes.input_ids), batch_size):
            ids = probes.input_ids[start : start + batch_size]  # [batch seq]
            rows, target = induction_rows(
                probes.repeat_start[start : start + batch_size],
                probes.repeat_len[start : start + batch_size],
                ids.shape[1],
            )
            device = next(model.parameters()).device
            with capture(model, ()), torch.inference_mode():
                model(input_ids=ids.to(device))
            tokens = ids.gather(1, target.clamp(min=0))  # [batch seq] t_j
            picked = unembed.T[tokens.to(unembed.device)]  # [batch seq d_model] W_U[:, t_j]
            for layer, projection in enumerate(projections):
                z = caught[f"z{layer}"].double()  # [batch seq head·d_head]
                weight = weight_of(projection)
                w_out = weight if not isinstance(projection, nn.Linear) else weight.T  # [head·d_head d_model]
                n_heads = loaded.n_heads
                d_head = w_out.shape[0] // n_heads
                per_head = z.reshape(*z.shape[:2], n_heads, d_head)  # [batch seq head d_head]
                contribution = torch.einsum(
                    "bshd,hdm->bshm", per_head, w_out.reshape(n_heads, d_head, -1)
                )  # [batch seq head d_model]
                normed = _normalise(contribution, caught["residual"], norm)  # [batch seq head d_model]
                dla = (normed * picked.to(normed)[:, :, None]).sum(
                    -1
                ) - normed @ mean_unembed  # [batch seq head]
                total[layer] += dla[rows.to(dla.device)].sum(0).cpu()
            counted += int(rows.sum())
    finally:
        for handle in handles:
            handle.remove()
    return total / counted if counted else nan
