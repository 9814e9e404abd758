"""The eager fallback (probe/engine/eager.py): models whose attention does not go through AttentionInterface
(Bloom, DeBERTa-v2) stream their own output_attentions into the sinks through forward hooks, one layer at a
time; ALBERT (one shared layer applied N times) gets one entry per application; --engine fused refuses,
--engine eager forces."""

from __future__ import annotations

import pytest
import torch

from probe import models
from probe.engine import DenseSink, SinkNeeds, capture, capture_attention
from probe.errors import ProbeError
from probe.layers import attention_plan
from tests.tiny_archs import build, eager_reference, masked_diff, padded_inputs, save

TOL = 1e-5


@pytest.mark.parametrize("model_type, engine",
                         [("bloom", "eager"), ("deberta-v2", "eager"), ("albert", "fused")])
def test_sinks_receive_the_models_own_attention(model_type, engine):
    model, tokenizer = build(model_type)
    plan = attention_plan(model)
    assert plan.engine == engine
    inputs = padded_inputs(tokenizer)
    reference = eager_reference(model, inputs)  # [batch layer head query key]
    assert plan.n_layers == reference.shape[1]  # ALBERT: 3 applications of its one shared layer
    alpha = capture_attention(model, inputs)
    assert alpha.shape == reference.shape
    assert masked_diff(alpha, reference, inputs["attention_mask"]) <= TOL
    assert reference[0, 0, 0, 2].max() > 2 / reference.shape[-1]  # peaked: twice the uniform weight
    with torch.no_grad():
        plain = model(**inputs).logits
        with capture(model, DenseSink(layers=[1], heads=[3, 0])):
            under = model(**inputs).logits
    assert float(((under - plain).abs() * inputs["attention_mask"][..., None]).max()) <= TOL


def test_albert_applications_are_distinct_layers():
    model, tokenizer = build("albert")
    inputs = padded_inputs(tokenizer)
    alpha = capture_attention(model, inputs)  # [batch layer head query key]
    assert alpha.shape[1] == 3
    # the same weights, different inputs per depth
    assert float((alpha[:, 0] - alpha[:, 1]).abs().max()) > 1e-3


def test_the_eager_model_drops_the_weights_it_was_asked_for():
    """The hooks hand α to the sinks and take it out of the module's output: the model accumulates nothing."""
    model, tokenizer = build("bloom")
    inputs = padded_inputs(tokenizer)
    with capture(model, DenseSink()), torch.no_grad():
        out = model(**inputs, output_attentions=True)
    assert all(weights is None for weights in out.attentions)


def test_gathered_and_sampled_rows_equal_the_dense_weights():
    model, tokenizer = build("deberta-v2")
    inputs = padded_inputs(tokenizer)
    reference = eager_reference(model, inputs)
    n_query = inputs["input_ids"].shape[1]
    # prev, first
    slots = torch.stack([torch.arange(n_query) - 1, torch.zeros(n_query, dtype=torch.long)], -1)
    slots = slots[None].expand(2, -1, -1).clone()

    class Gather:
        got: dict = {}

        def needs(self, layer, n_heads, n_query):
            return SinkNeeds(gather=([1, 2], slots))

        def update_gathered(self, layer, heads, alpha):
            self.got[layer] = alpha.clone()

    class Rows:
        def __init__(self):
            self.blocks = []

        def needs(self, layer, n_heads, n_query):
            return SinkNeeds(heads=(0,), rows=torch.tensor([0, 3, 5]))

        def update(self, block):
            self.blocks.append((block.layer, block.rows.tolist(), block.alpha.clone()))

    gather, rows = Gather(), Rows()
    with capture(model, [gather, rows]), torch.no_grad():
        model(**inputs)
    for layer in (0, 1):
        index = slots.clamp(min=0)[:, None].expand(-1, 2, -1, -1)
        expected = reference[:, layer, [1, 2]].gather(-1, index) * (slots >= 0)[:, None]
        assert torch.allclose(gather.got[layer], expected, atol=TOL)
    for layer, chosen, alpha in rows.blocks:
        assert chosen == [0, 3, 5]
        assert torch.allclose(alpha, reference[:, layer, [0]][:, :, chosen], atol=TOL)


def test_ablation_equals_zeroing_the_heads_output_columns():
    """Positive control: ablating head 2 of layer 0 under the fallback equals zeroing its slice of the output
    projection's input weights; negative control: no ablation leaves the logits as they are."""
    model, tokenizer = build("bloom")
    inputs = padded_inputs(tokenizer)
    ablate = torch.zeros(2, 4, dtype=torch.bool)
    ablate[0, 2] = True
    with torch.no_grad():
        plain = model(**inputs).logits
        with capture(model, (), ablate=ablate):
            ablated = model(**inputs).logits
        with capture(model, (), ablate=torch.zeros_like(ablate)):
            untouched = model(**inputs).logits
        dense = model.transformer.h[0].self_attention.dense
        dim = dense.weight.shape[1] // 4
        dense.weight[:, 2 * dim:3 * dim] = 0.0
        expected = model(**inputs).logits
    valid = inputs["attention_mask"][..., None]
    assert float(((ablated - expected).abs() * valid).max()) <= 1e-4
    assert float(((ablated - plain).abs() * valid).max()) > 1e-2
    assert float(((untouched - plain).abs() * valid).max()) == 0.0


def test_engine_choice(tmp_path, caplog):
    bloom = save("bloom", tmp_path / "bloom")
    with pytest.raises(ProbeError, match="--engine eager"):
        models.load(bloom, engine="fused")
    with caplog.at_level("WARNING", logger="probe"):
        loaded = models.load(bloom)
    assert loaded.engine == "eager"
    assert any("O(N²)" in record.getMessage() for record in caplog.records)
    with pytest.raises(ProbeError, match="auto, fused, eager"):
        models.load(bloom, engine="kernel")


def test_engine_eager_forced_on_an_interface_model_equals_the_fused_engine(tmp_path):
    directory = save("stablelm", tmp_path / "stablelm")
    fused, forced = models.load(directory), models.load(directory, engine="eager")
    assert (fused.engine, forced.engine) == ("fused", "eager")
    tokenizer = fused.tokenizer
    inputs = padded_inputs(tokenizer)
    a = capture_attention(fused.model, inputs)
    b = capture_attention(forced.model, inputs)  # load recorded the choice: capture(engine="auto") follows it
    assert masked_diff(a, b, inputs["attention_mask"]) <= TOL
    assert forced.model.config._attn_implementation == "sdpa"  # restored after the capture
