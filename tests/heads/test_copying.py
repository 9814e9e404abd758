"""Copying (Elhage et al. 2021; Olsson et al. 2022): the eigenvalue score of each head's OV circuit, the
direct logit attribution on the induction probes, and the copying / suppressing role of induction labels."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import torch

from probe import models
from probe.heads.copying import copying_score, copying_scores
from probe.heads.label import LabelConfig, label_model
from probe.heads.label.table import COPYING_MARGIN, roles
from probe.zoo.planted import negate_head_output


def full_score(matrix: torch.Tensor) -> float:
    """Σλ / Σ|λ| over every eigenvalue of the vocab × vocab OV circuit."""
    eigenvalues = torch.linalg.eigvals(matrix)
    return float(eigenvalues.sum().real / eigenvalues.abs().sum())


def test_copying_equals_the_full_vocab_by_vocab_eigenvalues_on_gpt2(tiny_dir):
    """GPT-2: W_E diag(g_ln1) W_V^h W_O^h diag(g_lnf) W_U written out from the state dict, LayerNorm gains
    random so that folding them matters."""
    loaded = models.load(str(tiny_dir("gpt2")))
    model = loaded.model
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for block in model.transformer.h:
            block.ln_1.weight.copy_(torch.rand(block.ln_1.weight.shape, generator=generator) * 2 - 0.5)
        model.transformer.ln_f.weight.copy_(
            torch.rand(model.transformer.ln_f.weight.shape, generator=generator) + 0.5
        )
    got = copying_scores(loaded)
    assert got.unembedding == "lm_head" and got.note is None
    width, n_heads = model.config.n_embd, model.config.n_head
    d_head = width // n_heads
    embed = model.transformer.wte.weight.double()  # [vocab width]
    unembed = (
        model.lm_head.weight.double().T * model.transformer.ln_f.weight.double()[:, None]
    )  # [width vocab]
    unembed = unembed - unembed.mean(1, keepdim=True)  # TransformerLens' center_unembed
    for layer, block in enumerate(model.transformer.h):
        qkv = block.attn.c_attn.weight.double()  # Conv1D [width 3·width]
        proj = block.attn.c_proj.weight.double()  # Conv1D [width width]
        for head in range(n_heads):
            value = (
                block.ln_1.weight.double()[:, None]
                * qkv[:, 2 * width + head * d_head : 2 * width + (head + 1) * d_head]
            )
            output = proj[head * d_head : (head + 1) * d_head]
            circuit = embed @ value @ output @ unembed  # [vocab vocab]
            assert abs(float(got.scores[layer, head]) - full_score(circuit.detach())) < 1e-6


def test_copying_uses_the_shared_value_head_under_gqa(tiny_dir):
    """Llama with 4 query heads on 2 value heads: head h reads value head h // 2; RMSNorm gains folded."""
    loaded = models.load(str(tiny_dir("llama")))
    model = loaded.model
    config = model.config
    n_heads, n_kv = config.num_attention_heads, config.num_key_value_heads
    assert n_kv < n_heads
    d_head = config.hidden_size // n_heads
    got = copying_scores(loaded)
    embed = model.model.embed_tokens.weight.double()
    unembed = model.lm_head.weight.double().T * model.model.norm.weight.double()[:, None]
    unembed = unembed - unembed.mean(1, keepdim=True)  # TransformerLens' center_unembed
    for layer, block in enumerate(model.model.layers):
        v = (
            block.self_attn.v_proj.weight.double().T * block.input_layernorm.weight.double()[:, None]
        )  # [width kv·d]
        o = block.self_attn.o_proj.weight.double().T  # [heads·d width]
        for head in range(n_heads):
            group = head // (n_heads // n_kv)
            circuit = (
                embed
                @ v[:, group * d_head : (group + 1) * d_head]
                @ o[head * d_head : (head + 1) * d_head]
                @ unembed
            )
            assert abs(float(got.scores[layer, head]) - full_score(circuit.detach())) < 1e-6


def test_copying_score_is_one_for_the_identity_and_minus_one_negated():
    torch.manual_seed(0)
    embed = torch.randn(12, 4, dtype=torch.float64)
    value = torch.eye(4, dtype=torch.float64)
    unembed = torch.linalg.pinv(
        embed
    )  # [4 12]: W_U W_E = I, so the circuit is a projection (eigenvalues 1, 0)
    assert abs(copying_score(embed, value, torch.eye(4, dtype=torch.float64), unembed) - 1.0) < 1e-9
    assert abs(copying_score(embed, value, -torch.eye(4, dtype=torch.float64), unembed) + 1.0) < 1e-9
    assert math.isnan(copying_score(embed, value, torch.zeros(4, 4, dtype=torch.float64), unembed))


def test_a_logit_shift_shared_by_every_token_changes_the_score_only_uncentred(tiny_dir):
    """Adding one direction's logit to every token (W_U + c·1ᵀ) changes no prediction: the centred score
    (copying_scores) is unchanged, while the score of the uncentred circuit (copying_score on the raw W_U,
    the convention before this column named one) moves — the convention matters and is the one we state."""
    from probe.heads.copying import centre_unembed

    loaded = models.load(str(tiny_dir("gpt2")))
    model = loaded.model
    before = copying_scores(loaded).scores
    width, n_heads = model.config.n_embd, model.config.n_head
    d_head = width // n_heads
    shift = torch.randn(width, generator=torch.Generator().manual_seed(4)) * 0.5  # [d_model]
    # [width vocab]
    raw = (model.lm_head.weight.double().T * model.transformer.ln_f.weight.double()[:, None]).detach()
    shifted = raw + shift.double()[:, None]  # every token's logit moves by x·shift: argmax unchanged
    assert torch.allclose(centre_unembed(shifted), centre_unembed(raw), atol=1e-12)
    embed = model.transformer.wte.weight.detach().double()
    block = model.transformer.h[0]
    qkv = block.attn.c_attn.weight.detach().double()  # Conv1D [width 3·width]
    value = block.ln_1.weight.detach().double()[:, None] * qkv[:, 2 * width:2 * width + d_head]
    output = block.attn.c_proj.weight.detach().double()[:d_head]
    moved = abs(copying_score(embed, value, output, shifted) - copying_score(embed, value, output, raw))
    assert moved > 1e-3  # uncentred: the shared shift counts
    with torch.no_grad():
        # the model's own unembedding shifted the same way (lm_head is tied to wte: untie it first)
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
        gain = model.transformer.ln_f.weight
        model.lm_head.weight += (shift / gain)[None, :].to(model.lm_head.weight.dtype)
    after = copying_scores(loaded).scores
    assert torch.allclose(after, before, atol=1e-9)


def test_a_model_without_an_unembedding_is_nan_with_a_note(tiny_dir):
    loaded = models.load(str(tiny_dir("bert")))
    assert copying_scores(loaded).unembedding == "mlm_decoder"  # the masked LM's decoder
    bare = dataclasses.replace(loaded, model=loaded.model.bert)  # BertModel: no output embedding
    got = copying_scores(bare)
    assert got.scores.isnan().all() and "no output embedding" in got.note


def test_roles_copying_and_suppressing_by_hand():
    table = pd.DataFrame(
        {
            "head_type": ["induction"] * 5 + ["previous_token"],
            "label": [True, True, True, True, False, True],
            "output_share": [0.5, 0.5, 0.5, 0.02, 0.5, 0.5],
            "chance": [0.03] * 6,
            "copying": [0.9, -0.9, COPYING_MARGIN / 2, -0.9, 0.9, -0.9],
        }
    )
    # copying, suppressing, neither (function), inert (its targets supply no more than chance) stays inert;
    # unlabelled: no role; other types by their output share against chance only
    assert roles(table).tolist()[:4] == ["copying", "suppressing", "function", "inert"]
    assert pd.isna(roles(table)[4]) and roles(table)[5] == "function"


def test_zoo_induction_heads_copy_and_a_negated_twin_is_suppressing():
    """zoo:induction's layer-1 induction heads copy (score and direct logit attribution positive); the same
    model with L1H0's output slice negated keeps L1H0's induction label (same pattern) but marks it
    suppressing."""
    config = LabelConfig(types=("induction",), examples=16, ablate="none", n_bootstrap=200)
    loaded = models.load("zoo:induction")
    table = label_model(loaded, config).set_index(["layer", "head"])
    induction = table[table["label"]]
    assert {(1, h) for h in range(4)} <= set(induction.index)
    layer1 = induction.loc[1]
    assert (layer1["copying"] > 0.9).all() and (layer1["copying_dla"] > 1.0).all()
    assert (layer1["role"] == "copying").all()

    negate_head_output(loaded.model, 1, 0)
    twin = label_model(loaded, config).set_index(["layer", "head"])
    assert bool(twin.loc[(1, 0), "label"])  # the pattern is unchanged: still labelled induction
    assert abs(twin.loc[(1, 0), "score"] - table.loc[(1, 0), "score"]) < 1e-6
    assert twin.loc[(1, 0), "copying"] < -0.9 and twin.loc[(1, 0), "copying_dla"] < -1.0
    assert twin.loc[(1, 0), "role"] == "suppressing"
    assert (twin.loc[[(1, 1), (1, 2), (1, 3)], "role"] == "copying").all()  # the others still copy


def _dla_written_out(loaded, probes) -> torch.Tensor:
    """The module doc's definition expanded: c = z_h W_O^h per row, through the final norm linearised at the
    residual's scale, dotted with W_U[:, t_j] minus the vocabulary mean; mean over the counted rows."""
    from probe.heads.direct_logit import induction_rows

    model = loaded.model
    blocks = model.transformer.h if hasattr(model, "transformer") else model.model.layers
    norm = model.transformer.ln_f if hasattr(model, "transformer") else model.model.norm
    projections = [b.attn.c_proj if hasattr(b, "attn") else b.self_attn.o_proj for b in blocks]
    caught = {}
    handles = [p.register_forward_pre_hook(lambda _m, a, i=i: caught.__setitem__(i, a[0])) for i, p in
               enumerate(projections)]
    handles.append(norm.register_forward_pre_hook(lambda _m, a: caught.__setitem__("r", a[0])))
    with torch.inference_mode():
        model(input_ids=probes.input_ids)
    for handle in handles:
        handle.remove()
    rows, target = induction_rows(probes.repeat_start, probes.repeat_len, probes.input_ids.shape[1])
    unembed = model.get_output_embeddings().weight.double().T  # [d_model vocab]
    u = unembed.T[probes.input_ids.gather(1, target.clamp(min=0))] - unembed.mean(-1)  # [batch seq d_model]
    residual = caught["r"].double()
    if isinstance(norm, torch.nn.LayerNorm):
        scale = (residual.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
    else:
        scale = (residual.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon).sqrt()
    n_heads = loaded.n_heads
    out = torch.zeros(loaded.n_layers, n_heads, dtype=torch.float64)
    for layer, projection in enumerate(projections):
        w = projection.weight.double()
        w_out = w.T if isinstance(projection, torch.nn.Linear) else w  # [head·d_head d_model]
        d_head = w_out.shape[0] // n_heads
        z = caught[layer].double().reshape(*caught[layer].shape[:2], n_heads, d_head)
        for head in range(n_heads):
            c = z[:, :, head] @ w_out[head * d_head:(head + 1) * d_head]  # [batch seq d_model]
            if isinstance(norm, torch.nn.LayerNorm):
                c = c - c.mean(-1, keepdim=True)
            c = c / scale * norm.weight.double()
            out[layer, head] = (c * u).sum(-1)[rows].mean()
    return out


def test_copying_dla_equals_its_definition_written_out(tiny_dir):
    """LayerNorm (GPT-2) and RMSNorm (Llama), gains random so the norm matters: the reduced row computation of
    probe.heads.direct_logit equals the expanded definition (float64 throughout) within the rounding of its
    one float32 product: 1e-5 of the largest attribution (measured: 3e-7)."""
    from probe.heads.direct_logit import induction_dla
    from probe.heads.label.probes import TokenProbeSet
    from probe.heads.probesets import repeated_blocks

    for arch in ("gpt2", "llama"):
        loaded = models.load(str(tiny_dir(arch)))
        norm = loaded.model.transformer.ln_f if arch == "gpt2" else loaded.model.model.norm
        with torch.no_grad():
            norm.weight.copy_(torch.rand(norm.weight.shape, generator=torch.Generator().manual_seed(1)) + 0.5)
        blocks = repeated_blocks(loaded.tokenizer, 4, 48, seed=0)
        probes = TokenProbeSet("repeated", blocks.input_ids, torch.arange(4), blocks.offset, blocks.block_len)
        got = induction_dla(loaded, probes, batch_size=2)
        expected = _dla_written_out(loaded, probes)
        assert torch.isfinite(got).all()
        error = float((got - expected).abs().max().detach())
        largest = float(expected.abs().max().detach())
        assert error <= 1e-5 * largest, (arch, error, largest)


def test_the_labelling_run_reduces_the_attribution_from_its_scoring_forwards():
    """label_model runs no forward of its own for copying_dla: the body runs once per probe batch (counted by
    a forward pre-hook), and the column equals induction_dla's own forwards over the same probes."""
    from probe.heads.direct_logit import induction_dla
    from probe.heads.label.probes import ProbeSource

    loaded = models.load("zoo:induction")
    config = LabelConfig(types=("induction",), examples=8, batch_size=4, ablate="none", n_bootstrap=50,
                         output_share=False)
    calls = []
    body = loaded.model.model
    handle = body.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        table = label_model(loaded, config)
    finally:
        handle.remove()
    assert len(calls) == 2  # two batches of four probes: the scoring forwards only
    source = ProbeSource(loaded, config)
    probes = source.token_probes(source.resolve("repeated"), int(table["seq_len"].iloc[0]))
    separate = induction_dla(loaded, probes, config.batch_size)  # [layer head]
    rows = table.set_index(["layer", "head"])["copying_dla"]
    for (layer, head), value in rows.items():
        assert abs(value - float(separate[layer, head])) < 1e-6


def test_the_attribution_keeps_each_output_projection_until_its_weight_changes(tiny_dir):
    """InductionDLA keeps W_O (a view of the resident parameter) and its column mean (LayerNorm's centring)
    across the forwards it watches; an in-place change of W_O between two batches is seen: the second batch's
    attribution equals a fresh instance's."""
    from probe.heads.direct_logit import InductionDLA
    from probe.heads.probesets import repeated_blocks

    loaded = models.load(str(tiny_dir("gpt2")))  # LayerNorm: the column mean is read
    blocks = repeated_blocks(loaded.tokenizer, 2, 48, seed=0)
    projection = loaded.model.transformer.h[1].attn.c_proj
    with torch.no_grad():  # a W_O whose column mean is far from 0, so that a stale one shows
        projection.weight.add_(0.5)

    def batch_total(dla: InductionDLA) -> torch.Tensor:
        with dla.watching(), torch.inference_mode():
            dla.expect(blocks.input_ids, blocks.offset, blocks.block_len)
            loaded.model.transformer(input_ids=blocks.input_ids)
            return dla.reduce()[0]  # [layer head]

    kept = InductionDLA(loaded)
    before = batch_total(kept)
    assert set(kept._outputs) == {0, 1}  # both layers' W_O kept: views, nothing copied
    assert kept._outputs[1][1].data_ptr() == projection.weight.data_ptr()
    with torch.no_grad():
        projection.weight.mul_(-2.0)
    after, fresh = batch_total(kept), batch_total(InductionDLA(loaded))
    assert torch.allclose(after, fresh, atol=1e-9)
    assert not torch.allclose(after[1], before[1], atol=1e-3)  # a positive control: the change is seen


def test_the_vocabulary_mean_is_kept_per_unembedding_until_its_weight_changes():
    """kept_mean_row: a second labelling run reads the vocabulary mean back (the same tensor); an in-place
    change of W_U (its version) is seen and the mean computed again."""
    from probe.heads.direct_logit import kept_mean_row, mean_row

    unembedding = torch.nn.Linear(16, 300, bias=False)  # weight [vocab=300 d_model=16]
    first = kept_mean_row(unembedding)
    assert kept_mean_row(unembedding) is first and torch.equal(first, mean_row(unembedding.weight))
    with torch.no_grad():
        unembedding.weight[0] += 30.0
    again = kept_mean_row(unembedding)
    assert torch.allclose(again - first, torch.full((16,), 30.0 / 300, dtype=torch.float64))


def test_the_vocabulary_mean_summed_in_chunks_equals_the_float64_mean():
    """direct_logit.mean_row (chunks of rows summed in float64) equals mean(0, dtype=float64) within
    float64 rounding, for a vocabulary that is not a multiple of the chunk; shifting one row moves it by
    shift / vocab."""
    from probe.heads.direct_logit import mean_row

    weight = torch.randn(1237, 24, generator=torch.Generator().manual_seed(0)) * 3 + 1  # [vocab d_model]
    expected = weight.mean(0, dtype=torch.float64)
    got = mean_row(weight, chunk=100)
    assert got.dtype == torch.float64
    assert torch.allclose(got, expected, atol=1e-13, rtol=0)
    shifted = weight.clone()
    shifted[5] += 1237.0
    assert torch.allclose(mean_row(shifted, chunk=100) - got, torch.ones(24, dtype=torch.float64), atol=1e-9)
