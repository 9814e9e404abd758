"""Output-weighted attention inside the engine: the norm of what each key contributes to a head's output.

Kobayashi et al. 2020 ("Attention is not only a weight: analyzing transformers with vector norms", EMNLP)
write a head's output at query i as Σ_j α_ij f_h(x_j), with f_h(x) = (x W_V^h + b_V^h) W_O^h the key's value
vector through the head's slice of the output projection. ‖α_ij f_h(x_j)‖ = α_ij ‖f_h(x_j)‖ is how much key j
actually moves the output; a head can put most of its weight on a key whose f_h is tiny (the "no-op"
[CLS]/[SEP]/BOS sink).

For every layer a sink asks for, the engine computes

* ``norms`` n_hj = ‖f_h(x_j)‖ — one number per (head, key): the value states the attention function receives
  (``x W_V + b_V``, after grouped-query heads are repeated: the shared value head) through a `dim × dim`
  factor F_h of the head's output-projection slice (its Gram matrix W_O^h W_O^hᵀ = F_hᵀ F_h, so ‖v W_O^h‖
  = ‖v F_hᵀ‖ exactly, at `dim²` instead of `dim · width` per key). The projection's bias is added once to the
  sum of all heads, not per head, so it is no part of any f_h and is left out;
* ``mixed`` = Σ_j α_ij n_hj — the denominator of an output share, which needs every key. On the kernel path
  (:func:`with_output_norms`) it comes from the fused kernel itself: the value tensor gets n as one extra
  channel (query and key get a zero channel, which adds exactly 0 to every score), so the kernel returns
  Σ_j α_ij n_j beside the model's output at the cost of one more value channel, and the model's own output
  channels are those of the plain call (tested bitwise on the CPU kernel). Where the engine runs its single
  pass instead (short CPU inputs whose sinks want slots and norms only, :mod:`probe.engine.attention`), n is
  one more column of the values its α blocks multiply (:func:`layer_norms` gives it, :func:`deliver_norms`
  hands the result out).

:class:`OutputProjections` finds each attention module's output projection where :mod:`probe.anatomy` says
it sits (on the module, or ``output.dense`` beside it); a projection whose input is not `heads × value dim`
counts as not found. Where none is found the sink receives ``None`` (its shares are NaN); nothing raises.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from transformers.integrations.sdpa_attention import repeat_kv

from probe.anatomy import materialised, output_projection, parents, weight_identity
from probe.errors import ProbeError

# Dtypes whose kernel output channels are too coarse for Σ_j α_ij ‖f_h(x_j)‖: the norm channel then runs in
# float32.
REDUCED_PRECISION = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class OutputNorms:
    """‖f_h(x_j)‖ per key and the α-weighted sum of them per query, for every query head of one layer."""

    layer: int
    norms: torch.Tensor  # [batch head key] float32: ‖f_h(x_j)‖
    mixed: torch.Tensor  # [batch head query] float32: Σ_j α_ij ‖f_h(x_j)‖


class OutputProjections:
    """Locates the output projection of each attention module of `model` and keeps its per-head factors F_h.

    Parameters
    ----------
    model : nn.Module
        The model (or its body) whose attention modules the engine will see.
    """

    def __init__(self, model: nn.Module, kept: dict | None = None) -> None:
        self._parent = parents(model)
        # id(module) -> (weight identity, F); `kept`: a dict shared with earlier instances (kept_projections)
        self._factors: dict[int, tuple[tuple, torch.Tensor]] = {} if kept is None else kept
        self.missing: set[str] = set()  # class names of attention modules without a known projection

    def find(self, module: nn.Module) -> nn.Module | None:
        """The output projection applied to `module`'s attention output (nn.Linear or Conv1D), or None
        (:func:`probe.anatomy.output_projection`)."""
        return output_projection(module, self._parent)

    def factors(self, module: nn.Module, n_heads: int, dim: int) -> torch.Tensor | None:
        """F `[head dim dim]` float32 with ‖v W_O^h‖ = ‖v F_hᵀ‖ for every v of width `dim`, or None when
        `module` has no output projection taking `n_heads × dim` inputs. Cached until the weight changes.

        A projection whose weights accelerate offloads (a ``device_map`` with ``"cpu"`` or ``"disk"``: the
        parameter is on the meta device between forwards) is read through accelerate's own hook,
        ``align_module_device``, which loads the weights for the duration of the read exactly as the
        projection's forward would."""
        projection = self.find(module)
        if projection is None:
            self.missing.add(type(module).__name__)
            return None
        with materialised(projection):
            return self._factors_of(module, projection, n_heads, dim)

    def _factors_of(self, module: nn.Module, projection: nn.Module, n_heads: int,
                    dim: int) -> torch.Tensor | None:
        weight = projection.weight
        conv = not isinstance(projection, nn.Linear)  # Conv1D: weight [in out]; Linear: [out in]
        width_in = weight.shape[0] if conv else weight.shape[1]
        if width_in != n_heads * dim:
            self.missing.add(type(module).__name__)
            return None
        if weight.device.type == "meta":
            raise ProbeError(f"the output projection of {type(module).__name__} has its weights on the meta "
                             "device and no accelerate hook to load them; load the model with a device_map")
        found = weight_identity(weight)  # None for an inference tensor: no cache
        identity = None if found is None else (*found, n_heads, dim)
        cached = self._factors.get(id(module))
        if identity is not None and cached is not None and cached[0] == identity:
            return cached[1]
        with torch.no_grad():
            if conv:
                per_head = weight.detach().view(n_heads, dim, -1).transpose(1, 2)  # [head out dim]
            else:
                # [head out dim]
                per_head = weight.detach().view(weight.shape[0], n_heads, dim).transpose(0, 1)
            # ‖v W_O^h‖² = v G vᵀ with the Gram matrix G = W_O^h W_O^hᵀ = U Λ Uᵀ, so ‖v W_O^h‖ = ‖v Fᵀ‖ with
            # F = Λ^½ Uᵀ: one float64 GEMM and a dim × dim eigendecomposition per head, where a QR of the
            # [out dim] map cost about 3x more at the 7B shape; exact up to float64 rounding
            # of G (a norm loses relative precision only where ‖v W_O‖ < 10⁻⁴·‖v‖·‖W_O‖)
            per_head = per_head.double()
            gram = per_head.transpose(1, 2) @ per_head  # [head dim dim]
            eigenvalues, vectors = torch.linalg.eigh(gram)  # [head dim], [head dim dim]
            factor = (eigenvalues.clamp(min=0.0).sqrt()[:, :, None] * vectors.transpose(1, 2)).float()
        if identity is not None:
            self._factors[id(module)] = (identity, factor)
        return factor


# model -> its factors {id(attention module): (weight identity, F)}: tensors only, so that the entry holds no
# reference to the model and goes with it
_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def kept_projections(model: nn.Module) -> OutputProjections:
    """An :class:`OutputProjections` of `model` whose factors F_h (a float64 Gram matrix and
    eigendecomposition per head, 0.06 s for a GPT-2-small shape) are kept while the model is loaded: computed
    on its first labelling run, read back by the next ones in the process (the app, a notebook, a benchmark's
    repeats) until a weight changes (:meth:`OutputProjections.factors` checks)."""
    return OutputProjections(model, _KEPT.setdefault(model, {}))


def value_norms(value: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """‖f_h(x_j)‖ `[batch head key]` float32 from value states `[batch head key dim]` (one per query head) and
    the factors F `[head dim dim]` of :meth:`OutputProjections.factors`."""
    n_batch, n_heads, n_key, dim = value.shape
    # one GEMM per head over every key of the batch (a broadcast matmul over [batch head] is slower on short
    # inputs)
    per_head = value.float().transpose(0, 1).reshape(n_heads, n_batch * n_key, dim)  # [head batch·key dim]
    projected = torch.bmm(per_head, factor.float().transpose(-1, -2))  # [head batch·key dim]
    norms = torch.linalg.vector_norm(projected, dim=-1).view(n_heads, n_batch, n_key)  # [head batch key]
    return norms.transpose(0, 1).contiguous()  # [batch head key]


def with_output_norms(
    # (sink, where its projections are), from SinkNeeds
    norm_sinks: Sequence[tuple[object, OutputProjections]],
    module: nn.Module,
    layer: int,
    query: torch.Tensor,  # [batch head query dim]
    key: torch.Tensor,  # [batch head key dim]
    value: torch.Tensor,  # [batch kv_head key dim_v]: repeated to the query heads here when norms are wanted
    kernel: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """`kernel(query, key, value)` -> (output [batch head query dim], lse'); when `norm_sinks` is not empty,
    the same kernel call also yields Σ_j α_ij ‖f_h(x_j)‖ (value augmented with the norms as one channel; with
    attention sinks the kernel's rescaling by exp(lse − lse') applies to it too) and the sinks receive
    :class:`OutputNorms` before the layer's α."""
    if not norm_sinks:
        return kernel(query, key, value)
    n_heads = query.shape[1]
    # grouped kv heads: each query head reads its group's value through its own W_O^h (repeated once here,
    # for the norms and the augmented call alike)
    grouped = value.shape[1] != n_heads
    # [batch head key dim_v]
    repeated = repeat_kv(value, n_heads // value.shape[1]) if grouped else value
    norms = layer_norms(norm_sinks, module, layer, n_heads, repeated)  # [batch head key]
    if norms is None:
        return kernel(query, key, value)
    dim = value.shape[-1]
    value = repeated
    if grouped:
        key = repeat_kv(key, n_heads // key.shape[1])  # [batch head key dim]
    if query.dtype in REDUCED_PRECISION:
        # A bf16 output channel would round Σ_j α_ij n_j to 3 significant digits (measured: 7e-3 relative); so
        # the model's call stays as it is and the norm channel gets its own float32 call on the same q and k.
        output, lse = kernel(query, key, value)  # [batch head query dim_v], the model's own output
        mixed = kernel(query.float(), key.float(), norms[..., None])[0][..., 0]  # [batch head query]
        deliver_norms(norm_sinks, OutputNorms(layer, norms, mixed))
        return output, lse
    # CUDA kernels want head dims that are multiples of 8: pad with zero channels; the CPU kernel takes dim +
    # 1.
    pad = 8 if query.device.type == "cuda" else 1
    query_aug = _padded(query, None, pad)  # [batch head query dim+pad]
    key_aug = _padded(key, None, pad)  # [batch head key dim+pad]
    value_aug = _padded(value, norms, pad)  # [batch head key dim+pad]
    output, lse = kernel(query_aug, key_aug, value_aug)  # [batch head query dim+pad]
    mixed = output[..., dim].float()  # [batch head query]
    deliver_norms(norm_sinks, OutputNorms(layer, norms, mixed))
    return output[..., :dim], lse


def layer_norms(
    norm_sinks: Sequence[tuple[object, OutputProjections]],  # (sink, where its projections are), not empty
    module: nn.Module,
    layer: int,
    n_heads: int,
    value: torch.Tensor,  # [batch kv_head key dim_v]
) -> torch.Tensor | None:
    """‖f_h(x_j)‖ `[batch head key]` float32 of every query head of `module` (grouped kv heads read through
    each query head's own W_O^h), or None when its output projection is not found — then the sinks have
    already been told (they receive ``None`` for the layer)."""
    factor = norm_sinks[0][1].factors(module, n_heads, value.shape[-1])
    if factor is None:
        for sink, _ in norm_sinks:
            sink.update_output_norms(layer, None)
        return None
    if value.shape[1] != n_heads:
        value = repeat_kv(value, n_heads // value.shape[1])  # [batch head key dim_v]
    return value_norms(value, factor.to(value.device))  # [batch head key]


def deliver_norms(norm_sinks: Sequence[tuple[object, OutputProjections]], delivered: OutputNorms) -> None:
    """Hand one layer's :class:`OutputNorms` to every sink that asked (before the layer's α reaches them)."""
    for sink, _ in norm_sinks:
        sink.update_output_norms(delivered.layer, delivered)


def _padded(states: torch.Tensor, channel: torch.Tensor | None, pad: int) -> torch.Tensor:
    """`states` `[batch head seq dim]` with `pad` more channels: the first holds `channel` `[batch head seq]`
    (None: 0), the rest 0 — written into one new tensor (half the copying of a concatenation with a zero
    block)."""
    out = states.new_empty(*states.shape[:-1], states.shape[-1] + pad)  # [batch head seq dim+pad]
    dim = states.shape[-1]
    out[..., :dim] = states
    out[..., dim:] = 0
    if channel is not None:
        out[..., dim] = channel.to(states.dtype)
    return out
