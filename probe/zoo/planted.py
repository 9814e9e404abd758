"""A tiny GPT-2 whose heads are set by hand, so the right labels are known: the ground truth for
`probe label`.

Layer 0, head 0 — previous-token head, built from positional embeddings: position p is embedded as
(cos ω_f p, sin ω_f p) for four frequencies (plus the negated copy, so LayerNorm only rescales it); the query
rotates position i back by one step, so q_i · k_j = β Σ_f cos(ω_f (i − 1 − j)) peaks at j = i − 1.
Layer 0, head 1 — self head: the same features without the rotation (peak at j = i).
Layer 1, head 2 — first-token sink: a constant query and a key that reads a feature only the <bos> token
carries. Every other head has zero query/key weights, so it attends uniformly. Attention and MLP outputs are
zeroed, so the residual stream (what the next layer sees) is just the embeddings.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from probe.zoo.tiny import build_tiny

# (layer, head) -> head type that `probe label` must find (and nothing else).
PLANTED_HEADS: dict[tuple[int, int], str] = {(0, 0): "previous_token", (0, 1): "self", (1, 2): "first_token"}

_FREQUENCIES = (1, 3, 7, 17)  # ω_f = 2π · k / 256: no offset within 128 positions mimics offset 0
_BOS_FEATURE = 16  # embedding dims 16 and 17 carry (+b, −b) on <bos> only


def _positional(n_positions: int, width: int) -> torch.Tensor:
    """[position width] features: per frequency (cos, sin, −cos, −sin), zero mean across dims, constant
    norm."""
    position = torch.arange(n_positions, dtype=torch.float64)
    table = torch.zeros(n_positions, width, dtype=torch.float64)
    for f, k in enumerate(_FREQUENCIES):
        angle = 2 * math.pi * k / 256 * position
        table[:, 4 * f:4 * f + 4] = torch.stack([angle.cos(), angle.sin(), -angle.cos(), -angle.sin()], -1)
    return table


def build_planted_gpt2(beta: float = 400.0, sink: float = 300.0):
    """(model, tokenizer) of the hand-set 2-layer, 4-head GPT-2 described in the module doc."""
    model, tokenizer = build_tiny("gpt2", seed=0)
    config = model.config
    width, n_heads = config.n_embd, config.n_head
    head_dim = width // n_heads
    assert width == 32 and n_heads == 4 and config.n_layer == 2, \
        "the planted model is laid out for the tiny GPT-2"
    with torch.no_grad():
        for parameter in model.transformer.h.parameters():
            parameter.zero_()
        for layer in model.transformer.h:  # LayerNorms back to the identity map (weight 1, bias 0)
            layer.ln_1.weight.fill_(1.0)
            layer.ln_2.weight.fill_(1.0)
        model.transformer.wte.weight.zero_()
        model.transformer.wte.weight[tokenizer.bos_token_id, _BOS_FEATURE] = 0.2
        model.transformer.wte.weight[tokenizer.bos_token_id, _BOS_FEATURE + 1] = -0.2
        model.transformer.wpe.weight.copy_(_positional(config.n_positions, width).float())

        # After ln_1 a position's (cos, sin) pair reads 2·(cos, sin) (the features have std 1/2).
        def plant_positional(layer: int, head: int, shift: int) -> None:
            weight = model.transformer.h[layer].attn.c_attn.weight  # [in, 3·width]: q | k | v
            q0, k0 = head * head_dim, width + head * head_dim
            for f, k in enumerate(_FREQUENCIES):
                omega = 2 * math.pi * k / 256 * shift
                c, s = math.cos(omega), math.sin(omega)
                # q = β/2 · R(−ω·shift) x: cos(a)cos(ω)+sin(a)sin(ω) = cos(a − ω), sin(a)cos(ω) − cos(a)sin(ω)
                # = sin(a − ω)
                weight[4 * f, q0 + 2 * f] = beta / 2 * c
                weight[4 * f + 1, q0 + 2 * f] = beta / 2 * s
                weight[4 * f, q0 + 2 * f + 1] = -beta / 2 * s
                weight[4 * f + 1, q0 + 2 * f + 1] = beta / 2 * c
                weight[4 * f, k0 + 2 * f] = 0.5
                weight[4 * f + 1, k0 + 2 * f + 1] = 0.5

        plant_positional(0, 0, shift=1)  # previous token
        plant_positional(0, 1, shift=0)  # self
        attn = model.transformer.h[1].attn.c_attn
        attn.bias[2 * head_dim] = 1.0  # head 2: constant query
        attn.weight[_BOS_FEATURE, width + 2 * head_dim] = sink  # its key reads the <bos> feature
    return model.eval(), tokenizer


def save_planted_gpt2(directory: str | Path) -> Path:
    """Save the planted model (weights, config, tokenizer) to `directory`; `probe label --model DIR` reads
    it."""
    directory = Path(directory)
    model, tokenizer = build_planted_gpt2()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def negate_head_output(model, layer: int, head: int) -> None:
    """Negate the slice of `layer`'s output projection that head `head` writes through (Llama-family
    ``o_proj``, GPT-2's ``c_proj``), in place: the head attends exactly as before (its query and key maps are
    untouched, and in the last layer nothing downstream reads its output but the logits) while its OV circuit
    is negated, so a copying head becomes its copy-suppressing twin."""
    n_heads = model.config.num_attention_heads
    with torch.no_grad():
        if model.config.model_type == "gpt2":
            weight = model.transformer.h[layer].attn.c_proj.weight  # Conv1D [in out]: rows are head · d_head
            d_head = weight.shape[0] // n_heads
            weight[head * d_head:(head + 1) * d_head] *= -1
        else:
            # Linear [out in]: columns head · d_head
            weight = model.model.layers[layer].self_attn.o_proj.weight
            d_head = weight.shape[1] // n_heads
            weight[:, head * d_head:(head + 1) * d_head] *= -1
