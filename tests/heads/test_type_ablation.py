"""Joint ablation per head type across layers: a type's labelled heads zeroed together, against random groups
with the same layer histogram (probe.heads.ablation.layer_matched_groups, the type_group_* columns)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch

from probe import models
from probe.heads.ablation import _default_loss, group_effects, layer_matched_groups, set_effects, z_score
from probe.heads.label import LabelConfig, label_model
from probe.heads.label.ablation import loss_batch
from probe.heads.probesets import repeated_blocks
from probe.zoo.planted import build_planted_gpt2


def test_layer_matched_groups_keep_the_histogram_and_avoid_the_group():
    group = ((0, 1), (1, 0), (1, 1), (3, 5))
    chosen, overlapping = layer_matched_groups(group, 8, 6, seed=1)
    assert not overlapping and len(chosen) == 6 and len(set(chosen)) == 6
    histogram = Counter(layer for layer, _ in group)
    for control in chosen:
        assert Counter(layer for layer, _ in control) == histogram
        assert not set(control) & set(group)
    assert layer_matched_groups(group, 8, 6, seed=1) == (chosen, overlapping)


def test_layer_matched_groups_overlap_only_when_a_layer_is_full():
    full = ((1, 0), (1, 1), (1, 2), (1, 3), (0, 0))
    chosen, overlapping = layer_matched_groups(full, 4, 8, seed=0)
    assert overlapping and chosen and full not in chosen
    assert all(Counter(layer for layer, _ in c) == Counter({1: 4, 0: 1}) for c in chosen)


def _induction_batches(loaded):
    blocks = repeated_blocks(loaded.tokenizer, 16, 64, 0)
    return [
        loss_batch(
            loaded,
            "induction",
            blocks.input_ids[i : i + 8],
            None,
            blocks.offset[i : i + 8],
            blocks.block_len[i : i + 8],
        )
        for i in (0, 8)
    ]


def test_a_circuit_across_layers_costs_more_than_every_matched_control():
    """Positive control, zoo:induction: its previous-token head L0H1 and two induction heads of layer 1 form
    the circuit; zeroing them together costs more than every random group of one layer-0 and two layer-1
    heads."""
    loaded = models.load("zoo:induction")
    batches = _induction_batches(loaded)
    circuit = ((0, 1), (1, 0), (1, 1))
    row = group_effects(loaded, batches, [circuit], controls=8, seed=0, layer_matched=True).iloc[0]
    chosen, overlapping = layer_matched_groups(circuit, 4, 8, seed=0)
    controls = set_effects(loaded, batches, chosen, _default_loss(loaded, None, None))
    assert not overlapping and row["n_controls"] == len(chosen) >= 2
    assert row["group_effect"] > 2.0 and row["group_effect"] > max(controls.values()) + 1.0
    expected = z_score(row["group_effect"], torch.tensor(list(controls.values()), dtype=torch.float64))
    assert row["group_z"] == pytest.approx(expected, rel=1e-6)
    assert row["group_z"] > 3


def test_heads_that_write_nothing_have_no_joint_effect():
    """Negative control, the planted GPT-2: its labelled heads (L0H0 previous token, L1H2 first token) attend
    by design but every attention output is zeroed, so zeroing them together changes nothing (effect 0, z
    0)."""
    model, tokenizer = build_planted_gpt2()
    loaded = models.load("zoo:induction")
    planted = dataclasses.replace(loaded, model=model, tokenizer=tokenizer, name="planted")
    blocks = repeated_blocks(tokenizer, 8, 32, 0)
    batches = [loss_batch(planted, "induction", blocks.input_ids, None, blocks.offset, blocks.block_len)]
    row = group_effects(planted, batches, [((0, 0), (1, 2))], controls=6, seed=0, layer_matched=True).iloc[0]
    assert row["group_effect"] == pytest.approx(0.0, abs=1e-6) and row["group_z"] == 0.0


def test_label_table_carries_the_type_group_columns():
    """On zoo:induction the four induction heads share layer 1: the type group is the layer group (same heads,
    same probes: the same effect); the single previous-token head gets no type group."""
    loaded = models.load("zoo:induction")
    config = LabelConfig(
        types=("previous_token", "induction"),
        examples=16,
        n_bootstrap=200,
        ablation_examples=8,
        ablation_controls=4,
    )
    table = label_model(loaded, config)
    induction = table[(table["head_type"] == "induction") & table["label"]]
    assert len(induction) == 4 and (induction["type_group_size"] == 4).all()
    assert induction["type_group_effect"].to_numpy() == pytest.approx(
        induction["group_effect"].to_numpy(), abs=1e-9
    )
    assert table.loc[table["head_type"] == "previous_token", "type_group_effect"].isna().all()
