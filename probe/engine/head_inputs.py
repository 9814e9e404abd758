"""The gradient at per-head input sites (``L{L}.q_in`` / ``k_in`` / ``v_in``, :mod:`probe.engine.sites`) from
the gradient at their projection's output columns: what ``run.grads`` of
:func:`probe.engine.interventions.intervene` gives there.

Head h's query reads its own copy of the norm's input x: q_h = norm(x_h) W_h (W_h: its columns of the
projection). So ∂/∂x_h = J(x)ᵀ (W_h ∂/∂q_h), J the norm's Jacobian at x. Every head of a layer's q, k and v
sites reads the same x (unless an edit gave a head an input of its own), and Jᵀ is linear in the cotangent:
the norm's VJP is taken once per input (``torch.func.vjp``, any norm module) and mapped over the heads of
all the sites that share it (``torch.vmap``), instead of the norm run forward and backward on a head-many copy
of x per site. The products W_h ∂/∂q_h are written head-major into one buffer, and the VJP replaces them
there a few batch rows at a time (a norm acts on each position alone; the rows' cotangents stay in cache). On
a GPT-2-small shape (16 × 64 tokens, 36 q / k / v heads a layer, one CPU thread) a layer's input gradients
take ≈ 0.11 s, the VJP ≈ 0.035 s of it (docs/benchmarks.md).

Examples
--------
>>> from probe.zoo.tiny import build_tiny
>>> from probe.engine.sites import site_map
>>> model, _ = build_tiny("gpt2")  # 4 heads of width 8, d_model 32
>>> found = site_map(model)
>>> sites = [found.site("L1.q_in"), found.site("L1.k_in")]
>>> shared = torch.randn(2, 5, 1, 32)  # [batch query 1 d_model]: one input every head reads
>>> grads = [torch.randn(2, 5, 4, 8) for _ in sites]  # [batch query head d_head]
>>> tuple(input_gradients(sites, [shared.expand(2, 5, 4, 32)] * 2, grads).shape)  # [Σ head batch query d]
(8, 2, 5, 32)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from probe.anatomy import linear_weight
from probe.engine.sites import Site

CHUNK = 1 << 21  # cotangent elements per norm VJP call (8 MB in float32)


def out_width(site: Site) -> int:
    """The projection columns per head of a q / k / v site or of its input site.

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> from probe.engine.sites import site_map
    >>> out_width(site_map(build_tiny("llama")[0]).site("L0.k_in"))  # d_head 8
    8
    """
    return (site.columns.stop - site.columns.start) // site.heads


def input_gradients(sites: Sequence[Site], inputs: Sequence[torch.Tensor],
                    grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """∂/∂ each head's own input at per-head input sites, every site's heads stacked head-major.

    Parameters
    ----------
    sites : sequence of Site
        ``L{L}.q_in`` / ``k_in`` / ``v_in`` sites (one query length and batch).
    inputs : sequence of torch.Tensor
        Per site, the per-head input the forward used `[batch query head d_model]` (a head axis of stride 0:
        one input every head reads, whose norm VJP is taken once and shared with the other sites that read
        the same tensor through the same norm).
    grads : sequence of torch.Tensor
        Per site, the gradient at its heads' projection columns `[batch query head width]`.

    Returns
    -------
    torch.Tensor
        `[Σ head batch query d_model]` (site after site, in the order given), in the gradients' dtype.

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> from probe.engine.sites import site_map
    >>> model, _ = build_tiny("llama")
    >>> site = site_map(model).site("L0.v_in")  # 2 kv heads of width 8, d_model 32, an RMSNorm before
    >>> x = torch.randn(1, 3, 32)
    >>> grad = torch.randn(1, 3, 2, 8)  # [batch query head d_head]
    >>> result = input_gradients([site], [x[:, :, None].expand(1, 3, 2, 32)], [grad])  # [head b q d]
    >>> leaf = x.clone().requires_grad_(True)  # autograd's: head 1's columns of proj(norm(x))
    >>> value = site.module(site.norm(leaf))[..., site.columns].unflatten(-1, (2, 8))[:, :, 1]  # [b q d_head]
    >>> expected = torch.autograd.grad((value * grad[:, :, 1]).sum(), leaf)[0]
    >>> bool(torch.allclose(result[1], expected, atol=1e-6)), bool(expected.abs().max() > 0)
    (True, True)
    """
    dtype, device = grads[0].dtype, grads[0].device
    batch, query = grads[0].shape[:2]
    width = inputs[0].shape[-1]
    through = torch.empty(sum(site.heads for site in sites), batch * query, width, dtype=dtype, device=device)
    start = 0
    for site, grad in zip(sites, grads, strict=True):  # W_h ∂/∂q_h, straight into its rows
        weight = linear_weight(site.module, dtype, copy=False)[:, site.columns].to(device)  # [d_model out]
        weight = weight.unflatten(-1, (site.heads, out_width(site))).permute(1, 2, 0)  # [head width d_model]
        with torch.no_grad():  # a gradient, not part of a graph (out= takes no autograd)
            torch.bmm(grad.flatten(0, 1).transpose(0, 1), weight, out=through[start:start + site.heads])
        start += site.heads  # [head batch*query d_model] written
    through = through.unflatten(1, (batch, query))  # [Σ head batch query d_model]
    start = 0
    for group, shared in _groups(sites, inputs):
        heads = sum(sites[index].heads for index in group)
        part, norm = through[start:start + heads], sites[group[0]].norm
        start += heads
        if norm is not None:  # (post-norm: the projection reads the input itself, W_h ∂/∂q_h is all)
            # the primal: the shared input [batch query d_model], or each head's own [head batch query d]
            primal = shared if shared is not None else inputs[group[0]].permute(2, 0, 1, 3)
            _norm_vjp(norm.forward, primal.detach().to(dtype), part, shared is not None)
    return through


def _groups(sites: Sequence[Site], inputs: Sequence[torch.Tensor]) -> list[tuple[list, torch.Tensor | None]]:
    """Consecutive sites that read one input through one norm: (their indices, the input `[batch query
    d_model]`); an input that differs between heads (an edit's) is a group of its own, with None."""
    groups: list[tuple[list, torch.Tensor | None]] = []
    last = None
    for index, (site, given) in enumerate(zip(sites, inputs, strict=True)):
        shared = given[:, :, 0] if given.stride(2) == 0 else None  # every head reads the same values
        key = None if shared is None else (id(site.norm), shared.data_ptr(), shared.shape, shared.stride(),
                                           shared.dtype)
        if key is not None and key == last:
            groups[-1][0].append(index)
        else:
            groups.append(([index], shared))
        last = key
    return groups


def _norm_vjp(norm, primal: torch.Tensor, cotangents: torch.Tensor, shared: bool) -> None:
    """Each of `cotangents` `[head batch query d_model]` replaced by J(primal)ᵀ · it: the norm's VJP taken at
    a shared `primal` `[batch query d_model]` (`shared`) or per head at `[head batch query d_model]`. A norm
    acts on each position alone, so this runs a few batch rows at a time (CHUNK elements of cotangents): the
    VJP's passes over them then stay in cache, and the same numbers come out."""
    rows = max(1, CHUNK // max(1, cotangents[:, :1].numel()))

    def one(head_input: torch.Tensor, cotangent: torch.Tensor) -> torch.Tensor:
        return torch.func.vjp(norm, head_input)[1](cotangent)[0]
    with torch.no_grad():  # torch.func differentiates the primal only; nothing else is tracked
        for start in range(0, cotangents.shape[1], rows):
            chunk = slice(start, start + rows)
            if shared:
                vjp = torch.func.vjp(norm, primal[chunk])[1]  # once for every head
                cotangents[:, chunk] = torch.vmap(vjp)(cotangents[:, chunk])[0]
            else:
                cotangents[:, chunk] = torch.vmap(one)(primal[:, chunk], cotangents[:, chunk])


__all__ = ["CHUNK", "input_gradients", "out_width"]
