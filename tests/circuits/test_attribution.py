"""Direct logit attribution and the logit lens (probe.circuits.attribution) against the model's own logits and
against TransformerLens 4.3's rule written out in plain torch (TL itself is not imported: CI has none)."""

from __future__ import annotations

import pytest
import torch

from probe.circuits.attribution import direct_logit_attribution, logit_lens
from probe.errors import ProbeError

PROMPT = [5, 9, 12, 7, 30, 2, 41]


def _model(arch: str):
    """A tiny model whose every weight (norm gains, biases, b_O) is moved off its init, so that gains,
    centring and biases all matter."""
    from probe.zoo.tiny import build_tiny

    overrides = dict(n_layer=3) if arch == "gpt2" else dict(num_hidden_layers=3)
    model, tokenizer = build_tiny(arch, seed=3, **overrides)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
    return model, tokenizer


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def tiny(request):
    return request.param, *_model(request.param)


def _tl_rule(model, prompt, answer, other, position=-1):
    """TransformerLens 4.3, written out: stack_head_results → logit_attrs with the final norm folded into W_U
    (fold_ln): result_h = z_h W_O^h; apply_ln_to_stack: (result − mean(result)) for a LayerNorm, / hook_scale
    of ln_final (LN: √(var + eps), RMS: √(mean x² + eps)) from the clean run;
    · (g ⊙ W_U[:, a] − g ⊙ W_U[:, b]).
    Returns {"L{l}H{h}": value} and {"L{l}.mlp": value}. Reads z and the final norm's input with plain torch
    hooks (independent of probe's intervention layer)."""
    base = model.transformer if hasattr(model, "transformer") else model.model
    blocks = base.h if hasattr(base, "h") else base.layers
    norm = base.ln_f if hasattr(base, "ln_f") else base.norm
    layernorm = isinstance(norm, torch.nn.LayerNorm)
    seen, handles = {}, []
    for layer, block in enumerate(blocks):
        attention = block.attn if hasattr(block, "attn") else block.self_attn
        out = attention.c_proj if hasattr(attention, "c_proj") else attention.o_proj
        handles.append(out.register_forward_pre_hook(
            lambda m, a, layer=layer: seen.__setitem__(("z", layer), a[0])))
        handles.append(block.mlp.register_forward_hook(
            lambda m, a, o, layer=layer: seen.__setitem__(("mlp", layer), o)))
    handles.append(norm.register_forward_pre_hook(lambda m, a: seen.__setitem__("resid", a[0])))
    with torch.no_grad():
        model(input_ids=torch.tensor([prompt]))
    for handle in handles:
        handle.remove()
    resid = seen["resid"][0, position].double()
    eps = norm.eps if layernorm else norm.variance_epsilon
    scale = (resid.var(unbiased=False) if layernorm else resid.pow(2).mean()).add(eps).sqrt()
    gain = norm.weight.detach().double()[:, None]
    w_u = model.get_output_embeddings().weight.detach().double().T * gain  # fold_ln
    direction = w_u[:, answer] - (w_u[:, other] if other is not None else 0)
    values = {}
    for layer, block in enumerate(blocks):
        attention = block.attn if hasattr(block, "attn") else block.self_attn
        out = attention.c_proj if hasattr(attention, "c_proj") else attention.o_proj
        w_o = out.weight.detach().double()
        w_o = w_o if hasattr(attention, "c_proj") else w_o.T  # [in out]
        z = seen[("z", layer)][0, position].double()
        heads = model.config.num_attention_heads
        d_head = z.shape[-1] // heads
        for h in range(heads):
            result = z[h * d_head:(h + 1) * d_head] @ w_o[h * d_head:(h + 1) * d_head]
            values[f"L{layer}H{h}"] = result
        values[f"L{layer}.mlp"] = seen[("mlp", layer)][0, position].double()
    out = {}
    for name, result in values.items():
        if layernorm:
            result = result - result.mean()
        out[name] = float(result / scale @ direction)
    return out


@pytest.mark.parametrize("other", [11, None])
def test_dla_rows_sum_to_the_models_own_logit_difference(tiny, other):
    """Exactness: the final norm is linear at its clean scale, so embeddings + heads + b_O + MLPs + final
    biases add up to the model's logit(answer) − logit(other) at that position."""
    _, model, _ = tiny
    table = direct_logit_attribution(model, PROMPT, answer=3, other=other, position=-2)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([PROMPT])).logits[0, -2].double()
    own = float(logits[3] - (logits[other] if other is not None else 0))
    assert table.attrs["logit_diff"] == pytest.approx(own, abs=1e-6)
    assert table.dla.sum() == pytest.approx(own, abs=2e-5 * max(1.0, abs(own)))
    # negative control: without the final norm's scale the sum is off (the rule is not vacuous)
    assert (table.dla * table.attrs["scale"]).sum() != pytest.approx(own, abs=1e-2)


def test_dla_equals_transformer_lens_rule_written_out(tiny):
    _, model, _ = tiny
    table = direct_logit_attribution(model, PROMPT, answer=3, other=11)
    rule = _tl_rule(model, PROMPT, 3, 11)
    ours = {row.component: row.dla for row in table.itertuples() if row.kind in ("head", "mlp")}
    assert set(ours) == set(rule)
    worst = max(abs(ours[name] - rule[name]) for name in rule)
    assert worst < 1e-9 * max(1.0, max(abs(value) for value in rule.values()))
    assert max(abs(value) for value in rule.values()) > 1e-2  # the heads do write to this direction


def test_dla_controls_zeroed_head_and_swapped_answers(tiny):
    """A head whose output projection rows are zeroed attributes exactly 0 (the others do not); swapping
    answer and other negates every row."""
    arch, model, _ = tiny
    copy, _ = _model(arch)
    attention = copy.transformer.h[1].attn if arch == "gpt2" else copy.model.layers[1].self_attn
    d_head = copy.config.hidden_size // copy.config.num_attention_heads
    with torch.no_grad():
        if arch == "gpt2":
            attention.c_proj.weight[2 * d_head:3 * d_head] = 0  # Conv1D: [in out]
        else:
            attention.o_proj.weight[:, 2 * d_head:3 * d_head] = 0  # Linear: [out in]
    table = direct_logit_attribution(copy, PROMPT, answer=3, other=11).set_index("component")
    assert table.loc["L1H2", "dla"] == 0.0
    assert (table.loc[["L1H0", "L1H1", "L1H3"], "dla"].abs() > 1e-6).all()
    forward = direct_logit_attribution(model, PROMPT, answer=3, other=11)
    backward = direct_logit_attribution(model, PROMPT, answer=11, other=3)
    assert torch.allclose(torch.tensor(forward.dla.values), -torch.tensor(backward.dla.values), atol=1e-12)


def test_logit_lens_equals_rule_and_ends_at_the_models_logits(tiny):
    """TransformerLens' accumulated_resid(apply_ln=True) → unembed: each resid_pre through ln_final with its
    own statistics, then W_U + b_U; the last entry (final_post) is the model's own logits."""
    _, model, _ = tiny
    lens = logit_lens(model, PROMPT, answer=3, top=3)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([PROMPT]), output_hidden_states=True)
    base = model.transformer if hasattr(model, "transformer") else model.model
    norm = base.ln_f if hasattr(base, "ln_f") else base.norm
    n = model.config.num_hidden_layers
    with torch.no_grad():
        rule = [model.get_output_embeddings()(norm(out.hidden_states[layer][0, -1])) for layer in range(n)]
    rule.append(out.logits[0, -1])  # HF's last hidden state is already normed: the model's logits
    assert list(lens.label) == [f"{layer}_pre" for layer in range(n)] + ["final_post"]
    for row, expected in zip(lens.itertuples(), rule, strict=True):
        assert row.answer_logit == pytest.approx(float(expected[3]), abs=1e-5)
        assert row.top_ids == expected.topk(3).indices.tolist()
        assert row.answer_rank == int((expected > expected[3]).sum())
    # negative control: the embeddings' reading is not the final prediction
    assert lens.answer_logit.iloc[0] != pytest.approx(lens.answer_logit.iloc[-1], abs=1e-3)


def test_text_prompts_and_refusals(tiny):
    _, model, tokenizer = tiny
    table = direct_logit_attribution(model, "the cat sat", answer=5, tokenizer=tokenizer)
    assert len(table) > 0
    with pytest.raises(ProbeError, match="is text: give a tokenizer"):
        direct_logit_attribution(model, "the cat sat", answer=5)
    with pytest.raises(ProbeError, match="outside the prompt"):
        logit_lens(model, PROMPT, position=len(PROMPT))
    with pytest.raises(ProbeError, match="same token"):
        direct_logit_attribution(model, PROMPT, answer=3, other=3)
    with pytest.raises(ProbeError, match="not one"):
        direct_logit_attribution(model, PROMPT, answer="the cat sat on", tokenizer=tokenizer)
