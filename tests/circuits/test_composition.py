"""Composition scores (probe.circuits.composition): equal to TransformerLens' definition written out with full
d_model × d_model products on tiny models (GPT-2's fused projection, a grouped-query Llama, a post-norm BERT),
equal to TransformerLens 4.3's rule in compatibility mode written out from its definitions (a freshly booted
bridge's unprocessed weights and the gain-only fold differ), hand-computed cases, the random baseline, the
zoo:induction positive control and its negative controls (the previous-token head's OV zeroed; an untrained
twin), MLA refused."""

from __future__ import annotations

import math

import pytest
import torch

from probe import models
from probe.circuits.composition import (
    composition_cost,
    composition_score,
    composition_scores,
    pair_scores,
    random_scores,
    reduce_receiver,
    reduce_sender,
)
from probe.circuits.factors import Refusal, model_factors
from probe.untrained import untrained_twins

TOL = 1e-6


def _randomise_gains(model, seed: int = 1) -> None:
    """Norm gains far from 1, so that folding them matters."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ("ln_" in name or "layernorm" in name.lower() or name.endswith("norm.weight")) and \
                    name.endswith("weight"):
                parameter.copy_(0.5 + 1.5 * torch.rand(parameter.shape, generator=generator))


def _tl_matrices(model, arch: str, n_heads: int):
    """Per layer and head, TransformerLens' W_Q, W_K, W_V [d_model d_head] and W_O [d_head d_model] read
    straight from the modules, float64: gains folded as fold_ln does, and for GPT-2's LayerNorm also centred
    over d_model (reading maps and writing rows) as compatibility mode does; RMSNorm (Llama) gain only."""
    out = []
    if arch == "gpt2":
        for block in model.transformer.h:
            weight = block.attn.c_attn.weight.double()  # Conv1D [in 3·d]
            d = weight.shape[0]
            dh = d // n_heads
            gain = block.ln_1.weight.double()[:, None]
            read = [gain * weight[:, part * d:(part + 1) * d] for part in range(3)]  # q, k, v [d_model d]
            read = [w - w.mean(0, keepdim=True) for w in read]
            write = block.attn.c_proj.weight.double()  # [d d_model]
            write = write - write.mean(1, keepdim=True)
            heads = [slice(h * dh, (h + 1) * dh) for h in range(n_heads)]
            out.append([(read[0][:, s], read[1][:, s], read[2][:, s], write[s]) for s in heads])
    elif arch == "llama":
        for block in model.model.layers:
            attn, gain = block.self_attn, block.input_layernorm.weight.double()[:, None]
            # Linear [out in]
            q, k = attn.q_proj.weight.double(), attn.k_proj.weight.double()
            v, o = attn.v_proj.weight.double(), attn.o_proj.weight.double()
            dh = q.shape[0] // n_heads
            group = n_heads // (k.shape[0] // dh)
            out.append([(gain * q[h * dh:(h + 1) * dh].T, gain * k[(h // group) * dh:(h // group + 1) * dh].T,
                         gain * v[(h // group) * dh:(h // group + 1) * dh].T, o[:, h * dh:(h + 1) * dh].T)
                        for h in range(n_heads)])
    else:  # bert: post-norm, nothing folded
        for layer in model.bert.encoder.layer:
            attn = layer.attention.self
            q, k, v = attn.query.weight.double(), attn.key.weight.double(), attn.value.weight.double()
            o = layer.attention.output.dense.weight.double()
            dh = q.shape[0] // n_heads
            out.append([(q[h * dh:(h + 1) * dh].T, k[h * dh:(h + 1) * dh].T, v[h * dh:(h + 1) * dh].T,
                         o[:, h * dh:(h + 1) * dh].T) for h in range(n_heads)])
    return out


def _tl_scores(matrices, mode: str) -> dict[tuple, float]:
    """TL's all_composition_scores(mode) for every causal pair, full d_model × d_model products."""
    matrices = [[tuple(weight.detach() for weight in head) for head in layer] for layer in matrices]
    scores = {}
    for la, layer_a in enumerate(matrices):
        for ha, (_, _, v_a, o_a) in enumerate(layer_a):
            ov_a = v_a @ o_a  # [d_model d_model]
            for lb in range(la + 1, len(matrices)):
                for hb, (q_b, k_b, v_b, o_b) in enumerate(matrices[lb]):
                    right = {"Q": q_b @ k_b.T, "K": k_b @ q_b.T, "V": v_b @ o_b}[mode]  # [d_model d_model]
                    scores[(la, ha, lb, hb)] = float(torch.linalg.matrix_norm(ov_a @ right) / (
                        torch.linalg.matrix_norm(ov_a) * torch.linalg.matrix_norm(right)))
    return scores


@pytest.mark.parametrize("arch", ["gpt2", "llama", "bert"])
def test_scores_equal_transformerlens_definition_with_full_products(tiny_dir, arch):
    directory = tiny_dir(arch, num_hidden_layers=3) if arch != "gpt2" else tiny_dir(arch, n_layer=3)
    loaded = models.load(str(directory))
    if arch != "bert":
        _randomise_gains(loaded.model)
    matrices = _tl_matrices(loaded.model, arch, loaded.n_heads)
    table = composition_scores(loaded, n_random=20)
    assert len(table) == 3 * 3 * 16  # 3 modes × (4·4 + 4·4 + 4·4) causal pairs of 3 layers × 4 heads
    for mode in ("Q", "K", "V"):
        expected = _tl_scores(matrices, mode)
        rows = table[table["mode"] == mode]
        assert len(rows) == len(expected)
        for row in rows.itertuples():
            key = (row.sender_layer, row.sender_head, row.receiver_layer, row.receiver_head)
            assert row.score == pytest.approx(expected[key], abs=TOL), (mode, key)
    # the folded gains matter: the same definition without them gives other numbers
    if arch != "bert":
        factors = model_factors(loaded)
        assert factors.pre_norm and all(gain is not None for gain in factors.gains)
        _randomise_gains(loaded.model, seed=7)
        unfolded = _tl_scores(_tl_matrices(loaded.model, arch, loaded.n_heads), "K")
        rows = table[table["mode"] == "K"]
        assert max(abs(row.score - unfolded[(row.sender_layer, row.sender_head, row.receiver_layer,
                                             row.receiver_head)]) for row in rows.itertuples()) > 1e-3


def _tl43_compatibility_mode_scores(model, mode: str, n_heads: int, fold: bool = True,
                                    centre: bool = True) -> torch.Tensor:
    """TransformerLens 4.3's ``TransformerBridge.all_composition_scores(mode)`` after
    ``enable_compatibility_mode()``, written out from its definitions for GPT-2 in plain torch (float64):

    * weights in TL's layout: W_Q, W_K, W_V ``[layer head d_model d_head]``, W_O ``[layer head d_head
      d_model]`` (GPT-2's Conv1D ``c_attn`` ``[d_model 3·d_model]`` split q | k | v, then by head);
    * ``ProcessWeights.fold_layer_norm`` (LayerNorm: ``fold_biases`` and ``center_weights``):
      ``fold_layer_norm_weight_single`` multiplies each of W_Q, W_K, W_V by ln1's weight along d_model
      (``w * ln_w[None, :, None]``), then ``center_weight_single`` subtracts its mean over d_model;
    * ``ProcessWeights.center_writing_weights``: W_O minus its mean over its last axis (d_model);
    * ``all_composition_scores``: left = W_V W_O (every sender's OV circuit), right = W_Q W_Kᵀ (``Q``), its
      transpose (``K``) or left (``V``); ``utils.composition_scores`` broadcasts left's [layer head] against
      right's and returns ‖left·right‖_F / (‖left‖_F ‖right‖_F); pairs whose sender layer is not earlier are
      set to 0.

    `fold` / `centre` off give a freshly booted bridge's unprocessed weights (the negative controls).
    Returns ``[layer head layer head]``."""
    q, k, v, o = [], [], [], []
    for block in model.transformer.h:
        weight = block.attn.c_attn.weight.detach().double()  # [d_model 3·d_model]
        d_model = weight.shape[0]
        d_head = d_model // n_heads
        qkv = weight.reshape(d_model, 3, n_heads, d_head).permute(1, 2, 0, 3)  # [3 head d_model d_head]
        if fold:
            qkv = qkv * block.ln_1.weight.detach().double()[None, None, :, None]
        if centre:
            qkv = qkv - qkv.mean(2, keepdim=True)
        w_o = block.attn.c_proj.weight.detach().double().reshape(n_heads, d_head, d_model)
        if centre:
            w_o = w_o - w_o.mean(-1, keepdim=True)
        q.append(qkv[0]), k.append(qkv[1]), v.append(qkv[2]), o.append(w_o)
    q, k, v, o = (torch.stack(x) for x in (q, k, v, o))  # [layer head ...]
    left = v @ o  # [layer head d_model d_model]
    right = {"Q": q @ k.transpose(-1, -2), "K": (q @ k.transpose(-1, -2)).transpose(-1, -2), "V": left}[mode]
    product = left[:, :, None, None] @ right[None, None]  # [layer head layer head d_model d_model]
    scores = (torch.linalg.matrix_norm(product) / torch.linalg.matrix_norm(left)[:, :, None, None]
              / torch.linalg.matrix_norm(right)[None, None])
    layers = torch.arange(len(q))
    return torch.where((layers[:, None, None, None] < layers[None, None, :, None]), scores,
                       torch.zeros_like(scores))


def test_scores_equal_transformerlens_43_compatibility_mode_on_gpt2(tiny_dir):
    """Our scores are TL 4.3's in compatibility mode (fold_ln with centring, centred writing weights) to float
    rounding, every causal pair and mode; a freshly booted bridge's weights (nothing folded) and the gain fold
    without centring give other numbers (up to ~0.03 on this model), so the test can tell them apart."""
    loaded = models.load(str(tiny_dir("gpt2", n_layer=3)))
    _randomise_gains(loaded.model)
    table = composition_scores(loaded, n_random=5)
    for mode in ("Q", "K", "V"):
        expected = _tl43_compatibility_mode_scores(loaded.model, mode, loaded.n_heads)
        fresh = _tl43_compatibility_mode_scores(loaded.model, mode, loaded.n_heads, fold=False, centre=False)
        gain_only = _tl43_compatibility_mode_scores(loaded.model, mode, loaded.n_heads, centre=False)
        rows = table[table["mode"] == mode]
        assert len(rows) == 48 and int((expected > 0).sum()) == 48  # 3 layer pairs × 4 × 4 heads
        index = [tuple(key) for key in rows[["sender_layer", "sender_head", "receiver_layer",
                                             "receiver_head"]].to_numpy()]
        ours = torch.tensor(rows["score"].to_numpy(), dtype=torch.float64)
        theirs = torch.stack([expected[key] for key in index])
        assert torch.allclose(ours, theirs, rtol=0, atol=1e-12), (mode, float((ours - theirs).abs().max()))
        for other in (fresh, gain_only):
            assert float((ours - torch.stack([other[key] for key in index])).abs().max()) > 1e-3, mode


def test_hand_computed_cases():
    e = torch.eye(4, dtype=torch.float64)
    # W_A = e0 e0ᵀ (rank 1: V = e0, O = e0ᵀ); W_B = e0 e0ᵀ: ‖W_A W_B‖ = 1 = ‖W_A‖‖W_B‖
    sender = reduce_sender(e[:, :1], e[:1])  # [1 4]
    same = reduce_receiver(e[:, :1], e[:, :1])
    other = reduce_receiver(e[:, 1:2], e[:, 1:2])
    scores = pair_scores(sender[None], torch.stack([same, other]))
    assert scores.tolist() == [[1.0, 0.0]]
    # a rank-2 identity block against a rank-1 reader of one of its directions: 1 / sqrt(2)
    sender = reduce_sender(e[:, :2], e[:2])
    assert float(pair_scores(sender[None], same[None])) == pytest.approx(1 / math.sqrt(2), abs=1e-12)
    assert composition_score(e[:, :2] @ e[:2], e[:, :1] @ e[:1]) == pytest.approx(1 / math.sqrt(2), abs=1e-12)
    # reductions do not depend on the factorisation: V O = (V M)(M⁻¹ O)
    generator = torch.Generator().manual_seed(0)
    v, o = torch.randn(6, 2, generator=generator, dtype=torch.float64), torch.randn(2, 6, generator=generator,
                                                                                    dtype=torch.float64)
    m = torch.tensor([[2.0, 1.0], [0.5, 3.0]], dtype=torch.float64)
    x, y = torch.randn(6, 2, generator=generator, dtype=torch.float64), torch.randn(6, 2, generator=generator,
                                                                                    dtype=torch.float64)
    first = pair_scores(reduce_sender(v, o)[None], reduce_receiver(x, y)[None])
    second = pair_scores(reduce_sender(v @ m, torch.linalg.inv(m) @ o)[None], reduce_receiver(x, y)[None])
    assert float(first) == pytest.approx(float(second), abs=1e-12)
    assert float(first) == pytest.approx(composition_score(v @ o, x @ y.T), abs=1e-12)


def test_random_baseline_is_near_one_over_sqrt_d_model():
    """Elhage et al.'s baseline: for Gaussian factors the score concentrates near 1/√d_model, whatever the
    rank (zoo:induction's shape: 0.126)."""
    for d_model, rank in ((64, 16), (64, 4), (256, 16)):
        scores = random_scores(d_model, rank, rank, n=300, seed=0)
        assert abs(float(scores.mean()) - 1 / math.sqrt(d_model)) < 0.1 / math.sqrt(d_model)
        assert float(scores.std()) > 0
    assert torch.equal(random_scores(64, 16, 16, 10, seed=3), random_scores(64, 16, 16, 10, seed=3))


def test_induction_previous_token_head_k_composes_with_every_induction_head():
    """The positive control (issue 41): L0H1 → L1H0–L1H3 by K-composition 0.32–0.34, above every random pair
    and above every other layer-0 head (0.14–0.23)."""
    loaded = models.load("zoo:induction")
    table = composition_scores(loaded, receivers=[(1, h) for h in range(4)], modes=["K"])
    for receiver in range(4):
        rows = table[table["receiver_head"] == receiver].sort_values("score", ascending=False)
        assert rows.iloc[0]["sender"] == "L0H1"
        assert 0.31 < rows.iloc[0]["score"] < 0.345 and bool(rows.iloc[0]["beats_random"])
        assert rows.iloc[0]["percentile"] == 1.0 and rows.iloc[0]["z"] > 20
        assert rows.iloc[1:]["score"].max() < 0.235
    assert table.attrs["baseline"]["K"]["mean"] == pytest.approx(0.126, abs=0.004)
    assert any("RoPE" in note for note in table.attrs["notes"])


def test_negative_controls_ov_zeroed_twin_and_untrained_twin():
    loaded = models.load("zoo:induction")
    with torch.no_grad():  # the previous-token head's value map zeroed: its OV circuit is 0
        loaded.model.model.layers[0].self_attn.v_proj.weight[16:32] = 0
    table = composition_scores(loaded, receivers=[(1, h) for h in range(4)], modes=["K"])
    zeroed = table[table["sender"] == "L0H1"]
    assert zeroed["score"].isna().all() and not zeroed["beats_random"].any()  # unknown (0/0), never an edge
    # untrained twins (probe.untrained: the class's own initialisation, 3 seeds) score like the baseline
    for twin in untrained_twins(models.load("zoo:induction"), 3):
        table = composition_scores(twin, n_random=200)
        assert len(table) == 48
        assert table["beats_random"].sum() <= 3, twin.name  # 1 in 201 per pair by chance: ~0.24 expected
        assert abs(table["z"].mean()) < 1.0, twin.name
        from_prev = table[(table["sender"] == "L0H1") & (table["mode"] == "K")]
        assert not from_prev["beats_random"].any() and (from_prev["z"].abs() < 3).all(), twin.name


def test_mla_is_refused_with_a_note(tmp_path):
    from tests.engine.test_mla import save_tiny_deepseek

    loaded = models.load(str(save_tiny_deepseek(tmp_path / "deepseek")))
    assert isinstance(model_factors(loaded), Refusal)
    table = composition_scores(loaded)
    assert table.empty and "MLA" in table.attrs["refused"]


def test_cost_of_every_pair():
    # GPT-2 small: 144 heads, pairs in causal order 66 layer pairs × 144 head pairs = 9504 pairs
    assert composition_cost(9504, 1, 768, 64) == pytest.approx(9504 * 64 * 64 * 768 * 3)
    with pytest.raises(Exception, match="mode"):
        composition_scores(models.load("zoo:induction"), modes=["X"])
