"""Hybrid models (softmax attention in some layers, linear attention / state-space / convolution in the
others) and StableLM: their attention modules call ALL_ATTENTION_FUNCTIONS although their classes do not set
`_supports_attention_backend`. The engine captures the softmax layers under the model's own layer numbers,
equal to eager `output_attentions`, and leaves the logits as the model's own."""

from __future__ import annotations

import pytest
import torch

from probe import models
from probe.engine import DenseSink, capture, capture_attention
from probe.layers import attention_plan
from tests.tiny_archs import HYBRIDS, build, eager_reference, masked_diff, padded_inputs, save

TOL = 1e-5
# model type -> the layers with softmax attention in tests/tiny_archs.py's configs
ATTENTION_LAYERS = {"qwen3_next": (1, 3), "jamba": (1, 3), "zamba2": (1, 3), "nemotron_h": (1, 3),
                    "lfm2": (1, 3), "olmo_hybrid": (3,), "kimi_linear": (1, 3), "granitemoehybrid": (1, 3),
                    "qwen3_5_text": (1, 3), "stablelm": (0, 1), "falcon_h1": (0, 1)}


@pytest.mark.parametrize("model_type", [*HYBRIDS, "stablelm", "falcon_h1"])
def test_softmax_layers_equal_eager_and_logits_unchanged(model_type):
    model, tokenizer = build(model_type)
    assert not getattr(model, "_supports_attention_backend", False) or model_type in ("lfm2",
                                                                                      "granitemoehybrid")
    plan = attention_plan(model)
    assert plan.engine == "fused"
    assert plan.attention_layers == ATTENTION_LAYERS[model_type]
    assert set(plan.no_alpha_layers) == set(range(plan.n_layers)) - set(plan.attention_layers)
    inputs = padded_inputs(tokenizer)
    mask = inputs["attention_mask"]
    assert mask[1].sum() < mask[0].sum()  # a padded row
    reference = eager_reference(model, inputs)  # [batch attention_layer head query key]
    alpha = capture_attention(model, inputs)
    assert alpha.shape == reference.shape
    assert masked_diff(alpha, reference, mask) <= TOL
    assert reference[0, 0, 0, 3].max() > 0.3  # peaked, not uniform: a wrong mask or scale would show
    with torch.no_grad():
        plain = model(**inputs).logits
    sink = DenseSink()
    with capture(model, sink), torch.no_grad():
        under = model(**inputs).logits
    valid = mask.bool()[..., None]
    assert float(((under - plain).abs() * valid).max()) <= TOL
    assert sink.captured_layers == list(plan.attention_layers)  # the model's own numbers, no α for the others


def test_a_subset_of_heads_of_one_hybrid_layer_through_the_kernel_equals_eager():
    model, tokenizer = build("qwen3_next")
    inputs = padded_inputs(tokenizer)
    reference = eager_reference(model, inputs)  # layers 1 and 3
    alpha = capture_attention(model, inputs, layers=[3], heads=[2, 0])
    assert masked_diff(alpha, reference[:, 1:, [2, 0]], inputs["attention_mask"]) <= TOL


def test_the_no_alpha_note_names_the_layers():
    plan = attention_plan(build("jamba")[0])
    assert plan.no_alpha_note() == ("2 of 4 layers have softmax attention (1, 3); no attention weights in "
                                    "linear_attention layers 0, 2")
    assert attention_plan(build("stablelm")[0]).no_alpha_note() is None


def test_load_keeps_the_hybrid_plan_and_lists_only_real_heads(tmp_path, caplog):
    directory = save("qwen3_next", tmp_path / "qwen3-next")
    with caplog.at_level("WARNING", logger="probe"):
        loaded = models.load(directory)
    assert loaded.n_layers == 4 and loaded.attention_layers == (1, 3)
    assert loaded.heads == [(1, 0), (1, 1), (1, 2), (1, 3), (3, 0), (3, 1), (3, 2), (3, 3)]
    assert [record.getMessage() for record in caplog.records] == [
        f"{directory}: 2 of 4 layers have softmax attention (1, 3); no attention weights in linear_attention "
        "layers 0, 2"]
    assert models.model_card(loaded)["attention_layers"] == [1, 3]


def test_stablelm_loads(tmp_path):
    loaded = models.load(save("stablelm", tmp_path / "stablelm"))
    assert loaded.engine == "fused" and loaded.attention_layers == (0, 1) and not loaded.notes


def test_the_card_names_the_layers_with_alpha_and_a_plain_model_gets_no_such_note():
    from probe.card import architecture_card

    note = [n for n in architecture_card(build("nemotron_h")[0].config).notes if n.startswith("hybrid")]
    assert note == ["hybrid: softmax attention (heads with α) in 2 of 4 layers (1, 3); the others "
                    "(linear_attention) have no attention weights"]
    assert not [n for n in architecture_card(build("stablelm")[0].config).notes if n.startswith("hybrid")]


def test_probe_label_and_profile_list_only_the_softmax_layers(tmp_path):
    import pandas as pd

    from probe.cli import main

    directory = save("qwen3_next", tmp_path / "qwen3-next")
    table_path, profile_path = tmp_path / "labels.csv", tmp_path / "profile.csv"
    assert main(["label", "--model", directory, "--types", "previous_token,induction", "--examples", "8",
                 "--seq-len", "16", "--bootstrap", "50", "--out", str(table_path)]) == 0
    assert main(["profile", "--model", directory, "--random", "2", "--seq-len", "16", "--out",
                 str(profile_path)]) == 0
    expected = {f"L{layer}H{head}" for layer in (1, 3) for head in range(4)}
    for path in (table_path, profile_path):
        table = pd.read_csv(path)
        assert set(table["head_name"]) == expected
        assert table.filter(like="score").notna().all().all()


def test_ablation_controls_never_fall_in_a_layer_without_alpha():
    from probe.heads.ablation import control_groups, control_heads

    n_layers, n_heads, real = 4, 4, (1, 3)
    no_alpha = [(layer, head) for layer in (0, 2) for head in range(n_heads)]
    # a group filling layer 1: its own layer has no other heads, so controls come from the rest of the model
    groups, _ = control_groups([(1, h) for h in range(4)], n_layers, n_heads, 8, 0, attention_layers=real)
    assert groups and all(layer in real for group in groups for layer, _ in group)
    unrestricted, _ = control_groups([(1, h) for h in range(4)], n_layers, n_heads, 8, 0)
    assert any(layer not in real for group in unrestricted for layer, _ in group)  # negative control
    heads = control_heads([(1, 0), (1, 1), (1, 2)], n_heads, 4, no_alpha, 0, n_layers=n_layers)
    assert all(layer in real for chosen in heads.values() for layer, _ in chosen)
