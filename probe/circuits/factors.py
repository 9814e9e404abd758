"""Per-head weight factors for composition: each head's query, key, value and output maps, read through
:mod:`probe.anatomy`, norm gains folded, one layer at a time.

Row-vector convention (a residual vector times a matrix), as :mod:`probe.heads.copying`:

* ``query[h]``, ``key[h]``: ``[d_model d_head]``: the head's query map and the key map of the key/value head
  it shares (grouped-query attention: query head h reads key/value head ``h // (heads / kv_heads)``);
* ``value[h]``: ``[d_model d_v]``, the shared value map; ``output[h]``: ``[d_v d_model]``, the head's rows of
  the output projection;
* the pre-attention norm's gain g (pre-norm models whose norm :func:`probe.anatomy.norm_gain` reads: GPT-2's
  LayerNorm, Llama-family RMSNorm) is folded into every map that reads the residual stream: ``W_Q ← diag(g)
  W_Q``, ``W_K ← diag(g) W_K``, ``W_V ← diag(g) W_V``;
* a LayerNorm also subtracts the mean over d_model, so behind one the reading maps are centred over d_model
  (``W ← P W``, P = I − 11ᵀ/d_model) and so are the writing rows (``W_O ← W_O P``: no LayerNorm reader sees
  a write's mean). With both, the factors are TransformerLens 4.3's in compatibility mode
  (``TransformerBridge.enable_compatibility_mode()``: ``ProcessWeights.fold_layer_norm`` with
  ``center_weights`` and ``ProcessWeights.center_writing_weights``); RMSNorm, which does not centre, gets the
  gain alone, as TL folds it there. The normalisation's own scale (one positive number per position) and the
  biases are left out: Elhage et al.'s composition is a property of the weight matrices. Post-norm models
  (BERT) fold nothing.

What is refused, with one line (:class:`Refusal`): multi-head latent attention (DeepSeek's MLA: keys and
values are decompressed from a shared latent after a norm of their own, so no per-head W_K / W_V of the
residual exists), a model whose projections are not found or whose widths do not split into heads. Rotary
position embeddings rotate q and k *after* W_Q and W_K: the factors are the weights, and the composition score
read from them ignores position (docs/circuits.md says what that means).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from probe.anatomy import AttentionParts, attention_parts, norm_gain, text_config

Head = tuple[int, int]  # (layer, head)


@dataclass(frozen=True)
class Refusal:
    """Why a model's factors are not read (one line)."""

    reason: str


@dataclass(frozen=True)
class LayerFactors:
    """One layer's per-head maps, gains folded and, behind a LayerNorm, centred (float64 unless asked
    otherwise)."""

    query: torch.Tensor  # [head d_model d_head]
    key: torch.Tensor  # [head d_model d_head]: each query head's (shared) key map
    value: torch.Tensor  # [head d_model d_v]: each query head's (shared) value map
    output: torch.Tensor  # [head d_v d_model]
    kv_of: tuple[int, ...]  # query head -> its key/value head


@dataclass(frozen=True)
class ModelFactors:
    """Where every attention layer's parts are; :meth:`layer` reads one layer's maps (an offloaded model's
    weights are never all in memory at once)."""

    layers: tuple[int, ...]  # the layer numbers with attention (a hybrid's softmax layers)
    parts: tuple[AttentionParts, ...]  # one per entry of `layers`
    gains: tuple[torch.Tensor | None, ...]  # [d_model] per layer, None: nothing folded
    n_heads: int
    n_kv: int
    d_head: int
    d_v: int
    d_model: int
    pre_norm: bool
    centred: tuple[bool, ...] = ()  # per layer: its pre-attention norm is a LayerNorm (maps centred); () none

    def layer(self, layer: int, dtype: torch.dtype = torch.float64) -> LayerFactors:
        """The maps of attention layer `layer` (a layer number of :attr:`layers`)."""
        index = self.layers.index(layer)
        parts, gain = self.parts[index], self.gains[index]
        heads, kv, d, dv = self.n_heads, self.n_kv, self.d_head, self.d_v
        query = parts.query.weight()  # [d_model heads·d]
        key = parts.key.weight()  # [d_model kv·d]
        value = parts.value.weight()  # [d_model kv·dv]
        if gain is not None:
            query, key, value = (gain[:, None] * weight for weight in (query, key, value))
        kv_of = tuple(head // (heads // kv) for head in range(heads))
        index_kv = torch.tensor(kv_of)
        query = query.reshape(-1, heads, d).permute(1, 0, 2)  # [head d_model d]
        key = key.reshape(-1, kv, d).permute(1, 0, 2)[index_kv]  # [head d_model d]
        value = value.reshape(-1, kv, dv).permute(1, 0, 2)[index_kv]  # [head d_model dv]
        output = parts.output.weight().reshape(heads, dv, -1)  # [head dv d_model]
        query, key, value, output = (weight.to(dtype) for weight in (query, key, value, output))
        if self.centred and self.centred[index]:  # LayerNorm's mean subtraction: TL's centring of both sides
            query, key, value = (weight - weight.mean(1, keepdim=True) for weight in (query, key, value))
            output = output - output.mean(-1, keepdim=True)
        return LayerFactors(query, key, value, output, kv_of)


def model_factors(loaded) -> ModelFactors | Refusal:
    """The factor map of `loaded` (shapes only: no weight is read here), or why there is none."""
    model = loaded.model
    config = text_config(model.config)
    if getattr(config, "kv_lora_rank", None) or getattr(config, "q_lora_rank", None):
        return Refusal(f"{loaded.name} uses multi-head latent attention (MLA): its keys and values are "
                       "decompressed from a shared latent through a norm of their own, so no per-head W_K / "
                       "W_V of the residual stream exists; composition is not defined here")
    found = attention_parts(model)
    layers = tuple(getattr(loaded, "attention_layers", None) or range(loaded.n_layers))
    if len(found) != len(layers):
        return Refusal(f"{loaded.name}: found {len(found)} attention modules with a value projection for "
                       f"{len(layers)} attention layers: composition is not computed")
    heads = loaded.n_heads
    shapes = set()
    for parts in found:
        missing = [name for name in ("query", "key", "value", "output") if getattr(parts, name) is None]
        if missing:
            return Refusal(f"{loaded.name}: no {' / '.join(missing)} projection found on "
                           f"{type(parts.module).__name__}: composition is not computed")
        q, k = parts.query.width_out, parts.key.width_out
        v, o = parts.value.width_out, parts.output.width_in
        d, dv = q // heads, o // heads
        n_kv = k // d if d else 0
        if (q != heads * d or o != heads * dv or not d or not dv or k != n_kv * d or v != n_kv * dv
                or n_kv == 0 or heads % n_kv):
            return Refusal(f"{loaded.name}: the projection widths of {type(parts.module).__name__} (q {q}, k "
                           f"{k}, v {v}, o {o}) do not split into {heads} heads: composition is not computed")
        shapes.add((n_kv, d, dv, parts.query.width_in))
    if len(shapes) != 1:
        return Refusal(f"{loaded.name}: its attention layers have different head shapes: composition is not "
                       "computed")
    n_kv, d, dv, d_model = shapes.pop()
    gains = tuple(norm_gain(parts.norm) for parts in found)
    centred = tuple(isinstance(parts.norm, nn.LayerNorm) for parts in found)
    return ModelFactors(layers, tuple(found), gains, heads, n_kv, d, dv, d_model,
                        any(gain is not None for gain in gains), centred)


__all__ = ["Head", "LayerFactors", "ModelFactors", "Refusal", "model_factors"]
