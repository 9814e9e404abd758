"""Copying: does a head's OV circuit raise the logit of the token it reads? (Elhage et al. 2021; Olsson et al.
2022)

A head h reads a token through its value map and writes through its output map, so its OV circuit on tokens is
the vocab × vocab matrix ``W_E W_V^h W_O^h W_U`` (row-vector convention: a one-hot token times the matrix is
the change of every logit). Elhage et al. ("A Mathematical Framework for Transformer Circuits") summarise it
by its eigenvalues λ: the **copying score** Σλ / Σ|λ| is 1 for a head that raises each token's own logit (pure
copying), −1 for one that lowers it (anti-copying, e.g. copy suppression), near 0 for a head that does
neither. Σλ is real (complex eigenvalues come in conjugate pairs).

Cheap: the nonzero eigenvalues of ``A B`` and ``B A`` are the same (cyclic permutation), so with ``A = W_E
W_V^h`` (vocab × d_head) and ``B = W_O^h W_U`` (d_head × vocab) the score comes from the d_head × d_head
product ``W_O^h (W_U W_E) W_V^h``; ``W_U W_E`` (d_model × d_model) is computed once per model.

Weights, per layer (:func:`ov_weights`):

* ``W_E``: the input embeddings; ``W_U``: the output embeddings (a causal LM's ``lm_head``; a masked LM's
  decoder — its dense + LayerNorm transform before the decoder is left out, as Elhage et al. leave out
  nonlinearities; a model without an output embedding gets NaN and a note);
* ``W_V^h``: the value projection (where :mod:`probe.anatomy` finds it: ``v_proj``, ``value``, ``v``,
  ``v_lin`` or GPT-2's fused ``c_attn``); grouped-query models: the value head that h shares with its group;
* ``W_O^h``: the head's slice of the output projection (:func:`probe.anatomy.output_projection`);
* LayerNorm / RMSNorm gains are folded in where the model is pre-norm and the norms are found (GPT-2's
  ``ln_1`` and ``ln_f``, Llama-family ``input_layernorm`` and ``norm``): ``W_V ← diag(g_layer) W_V``, ``W_U ←
  diag(g_final) W_U``, as TransformerLens does with ``fold_ln``; the normalisation's scale (one positive
  number per position) and the biases do not change the sign pattern and are left out. Post-norm models (BERT)
  fold nothing;
* ``W_U`` is **centred over the vocabulary** (each row of the ``[d_model vocab]`` matrix minus its mean), as
  TransformerLens' ``center_unembed`` does: a logit shift shared by every token changes no prediction, but
  it adds a rank-one term to the OV circuit whose eigenvalue the uncentred score would count (zoo:induction's
  L0H3: 0.38 uncentred, 0.26 centred; clear copiers move by < 0.002). Centring the columns first keeps the
  d_head × d_head shortcut exact: ``(W_U − mean) W_E`` is again d_model × d_model.

:func:`copying_score` is the pure function; :func:`copying_scores` applies it to every head of a loaded model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from probe.anatomy import attention_parts, final_norm, norm_gain, weight_of
from probe.models import ModelKind


def centre_unembed(unembed: torch.Tensor) -> torch.Tensor:
    """``W_U`` `[d_model vocab]` minus its mean over the vocabulary (TransformerLens' ``center_unembed``):
    every direction then writes logits that sum to zero over the vocabulary, so a shift shared by every token
    is gone. A new tensor."""
    return unembed - unembed.mean(-1, keepdim=True)


def copying_score(
    embed: torch.Tensor,  # [vocab d_model] W_E
    value: torch.Tensor,  # [d_model d_head] W_V^h
    output: torch.Tensor,  # [d_head d_model] W_O^h
    unembed: torch.Tensor,  # [d_model vocab] W_U
) -> float:
    """Σλ / Σ|λ| over the eigenvalues λ of the OV circuit ``W_E W_V W_O W_U`` (vocab × vocab), computed from
    the d_head × d_head product ``W_O W_U W_E W_V`` (same nonzero eigenvalues). NaN when every eigenvalue is
    0. `unembed` is used as given: :func:`copying_scores` centres it first (:func:`centre_unembed`).

    Parameters
    ----------
    embed : torch.Tensor, shape=(vocab, d_model)
        W_E.
    value : torch.Tensor, shape=(d_model, d_head)
        The head's W_V.
    output : torch.Tensor, shape=(d_head, d_model)
        The head's W_O.
    unembed : torch.Tensor, shape=(d_model, vocab)
        W_U.

    Returns
    -------
    float
        In [−1, 1]: +1 a head that raises the logit of the token it attends to, −1 one that suppresses it.

    Examples
    --------
    >>> embed = torch.randn(50, 8, generator=torch.Generator().manual_seed(0))  # [vocab d_model]
    >>> copying_score(embed, torch.eye(8), torch.eye(8), embed.T)  # W_V W_O = I, tied: W_E W_Eᵀ, a copier
    1.0
    >>> copying_score(embed, torch.eye(8), -torch.eye(8), embed.T)  # the negated circuit suppresses
    -1.0
    """
    return copying_score_from(unembed.double() @ embed.double(), value, output)


def copying_score_from(
    unembed_embed: torch.Tensor,  # [d_model d_model] W_U W_E
    value: torch.Tensor,  # [d_model d_head]
    output: torch.Tensor,  # [d_head d_model]
) -> float:
    """:func:`copying_score` with ``W_U W_E`` already multiplied (once per model)."""
    small = output.double() @ unembed_embed.double() @ value.double()  # [d_head d_head]
    eigenvalues = torch.linalg.eigvals(small)  # [d_head] complex
    total = float(eigenvalues.abs().sum())
    if not math.isfinite(total) or total == 0.0:
        return math.nan
    return float(eigenvalues.sum().real) / total


@dataclass(frozen=True)
class OVWeights:
    """One model's OV-circuit weights, gains folded in (see the module doc). The per-layer maps are read one
    layer at a time by :meth:`layer` (an offloaded model's weights are never all in memory at once)."""

    embed: torch.Tensor  # [vocab d_model]
    unembed: torch.Tensor  # [d_model vocab], gain folded, centred over the vocabulary
    unembedding: str  # "lm_head" | "mlm_decoder": where W_U comes from
    layers: tuple  # per layer (AttentionParts, gain [d_model] or None)
    n_heads: int

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(values [head d_model d_head], outputs [head d_head d_model]) of layer `index`: each query head's
        (shared) value map, gain folded, and its slice of the output projection."""
        parts, gain = self.layers[index]
        value = parts.value.weight()  # [d_model kv_width]
        out = parts.output.weight()  # [n_heads·d_head d_model]
        d_head = out.shape[0] // self.n_heads
        n_kv = value.shape[1] // d_head
        per_kv = value.reshape(value.shape[0], n_kv, d_head).permute(1, 0, 2)  # [kv_head d_model d_head]
        if gain is not None:
            per_kv = gain[None, :, None] * per_kv
        values = per_kv.repeat_interleave(self.n_heads // n_kv, dim=0)  # [head d_model d_head]
        return values, out.reshape(self.n_heads, d_head, -1)  # [head d_head d_model]


@dataclass(frozen=True)
class CopyingScores:
    """:func:`copying_scores`' result: the score of every head, or NaN with the reason."""

    scores: torch.Tensor  # [layer head] float64, NaN where unknown
    unembedding: str | None  # "lm_head" | "mlm_decoder" | None (not computed)
    note: str | None = None  # why the scores are NaN


def ov_weights(loaded) -> OVWeights | str:
    """The OV weights of every head of `loaded` (see the module doc), or one line saying why they are
    unknown."""
    model = loaded.model
    output_embeddings, input_embeddings = model.get_output_embeddings(), model.get_input_embeddings()
    if output_embeddings is None or input_embeddings is None:
        return f"{loaded.name} has no output embedding (unembedding): copying is NaN"
    unembedding = "lm_head" if loaded.kind == ModelKind.CAUSAL_LM else "mlm_decoder"
    found = attention_parts(model)
    if len(found) != loaded.n_layers:
        return (
            f"{loaded.name}: found {len(found)} value projections for {loaded.n_layers} layers: copying is "
            "NaN"
        )
    n_heads = loaded.n_heads
    layers = []
    for parts in found:  # shapes only: no layer's weights are read here
        name = type(parts.module).__name__
        if parts.value is None or parts.output is None:
            return f"{loaded.name}: no value or output projection on {name}: copying is NaN"
        width, value = parts.output.width_in, parts.value.width_out
        d_head = width // n_heads
        n_kv = value // d_head if d_head else 0
        if width != n_heads * d_head or value != n_kv * d_head or n_kv == 0 or n_heads % n_kv:
            return f"{loaded.name}: value/output widths of {name} do not split into heads"
        layers.append((parts, norm_gain(parts.norm)))
    pre_norm = any(gain is not None for _, gain in layers)
    final = norm_gain(final_norm(model)) if pre_norm else None  # pre-norm only
    unembed = weight_of(output_embeddings).T  # [d_model vocab]
    if final is not None:
        unembed = final[:, None] * unembed
    unembed = centre_unembed(unembed)  # a logit shared by every token changes nothing (module doc)
    embed = weight_of(input_embeddings)  # [vocab d_model]
    return OVWeights(embed, unembed, unembedding, tuple(layers), n_heads)


def copying_scores(loaded) -> CopyingScores:
    """The copying score `[layer head]` of every head of `loaded` (NaN with a note where the weights are
    unknown).

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        A model with input and output embeddings (a causal LM's ``lm_head`` or a masked LM's decoder).

    Returns
    -------
    CopyingScores
        ``scores`` [layer head] float64 (:func:`copying_score` of each head), the unembedding used, and a
        note where the scores are NaN.

    Examples
    --------
    >>> result = copying_scores(probe.load("zoo:induction"))
    >>> result.scores.round(decimals=2), result.unembedding  # layer 1: the induction heads copy
    (tensor([[ 0.7600, -0.3000,  0.9700,  0.2600],
            [ 1.0000,  1.0000,  1.0000,  1.0000]], dtype=torch.float64), 'lm_head')
    """
    shape = (loaded.n_layers, loaded.n_heads)
    weights = ov_weights(loaded)
    if isinstance(weights, str):
        return CopyingScores(torch.full(shape, math.nan, dtype=torch.float64), None, weights)
    product = (weights.unembed @ weights.embed).double()  # [d_model d_model] W_U W_E, once per model
    scores = torch.full(shape, math.nan, dtype=torch.float64)  # [layer head]
    for layer in range(len(weights.layers)):  # one layer's maps alive at a time
        values, outputs = weights.layer(layer)
        for head in range(loaded.n_heads):
            scores[layer, head] = copying_score_from(product, values[head], outputs[head])
    return CopyingScores(scores, weights.unembedding)
