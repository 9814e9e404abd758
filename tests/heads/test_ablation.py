"""Head ablation inside the capture engine, and ablation effects against control heads."""

from __future__ import annotations

import math

import pytest
import torch

from probe import models
from probe.engine import capture
from probe.errors import ProbeError
from probe.heads.ablation import (
    ablation_effects,
    control_groups,
    control_heads,
    example_loss,
    group_effects,
    z_score,
)
from probe.zoo.tiny import build_tiny


def _zero_head_in_weights(model, arch: str, layer: int, head: int) -> None:
    """The reference: zero the head's slice of the output projection's input (model surgery, tests only)."""
    config = model.config
    n_heads = config.num_attention_heads
    width = config.hidden_size // n_heads
    rows = slice(head * width, (head + 1) * width)
    with torch.no_grad():
        if arch == "gpt2":
            model.transformer.h[layer].attn.c_proj.weight[rows, :] = 0  # Conv1D: [in out]
        else:
            model.model.layers[layer].self_attn.o_proj.weight[:, rows] = 0  # Linear: [out in]


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_ablation_equals_zeroed_output_projection(arch):
    model, _ = build_tiny(arch, seed=3)
    reference, _ = build_tiny(arch, seed=3)
    _zero_head_in_weights(reference, arch, layer=1, head=2)
    ids = torch.randint(3, 60, (2, 12), generator=torch.Generator().manual_seed(0))
    ablate = torch.zeros(model.config.num_hidden_layers, model.config.num_attention_heads, dtype=torch.bool)
    ablate[1, 2] = True
    with capture(model, (), ablate=ablate), torch.inference_mode():
        ours = model(input_ids=ids).logits
    with torch.inference_mode():
        expected = reference(input_ids=ids).logits
        clean = model(input_ids=ids).logits
    assert torch.allclose(ours, expected, atol=1e-5)
    assert not torch.allclose(ours, clean, atol=1e-3)  # the ablation changed something
    assert model.config._attn_implementation == "sdpa"  # restored


def test_per_row_ablation_equals_separate_runs():
    model, _ = build_tiny("gpt2", seed=1)
    ids = torch.randint(3, 60, (1, 10), generator=torch.Generator().manual_seed(1))
    rows = ids.repeat(3, 1)  # [copy seq]
    mask = torch.zeros(3, 2, 4, dtype=torch.bool)  # [batch layer head]
    mask[1, 0, 1] = True
    mask[2, 1, 3] = True
    with capture(model, (), ablate=mask), torch.inference_mode():
        batched = model(input_ids=rows).logits
    for row in range(3):
        with capture(model, (), ablate=mask[row]), torch.inference_mode():
            alone = model(input_ids=ids).logits
        assert torch.allclose(batched[row], alone[0], atol=1e-5)


def test_bad_ablate_masks_are_one_line_errors():
    model, _ = build_tiny("gpt2")
    ids = torch.randint(3, 60, (2, 6))
    with pytest.raises(ProbeError, match="bool tensor"):
        with capture(model, (), ablate=torch.zeros(2, 4)):
            pass
    with pytest.raises(ProbeError, match="batch rows"):
        with capture(model, (), ablate=torch.zeros(3, 2, 4, dtype=torch.bool)), torch.inference_mode():
            model(input_ids=ids)
    with pytest.raises(ProbeError, match="heads"):
        with capture(model, (), ablate=torch.zeros(2, 5, dtype=torch.bool)), torch.inference_mode():
            model(input_ids=ids)


def test_example_loss_by_hand():
    # Two positions, vocabulary of 2; logits favour token 0 at every position.
    logits = torch.tensor([[[2.0, 0.0], [2.0, 0.0], [0.0, 0.0]]])  # [batch seq vocab]
    labels = torch.tensor([[-100, 0, 1]])  # causal: position 1 predicted from 0, position 2 from 1
    expected = (math.log(1 + math.exp(-2)) + math.log(1 + math.exp(2))) / 2
    assert example_loss(logits, labels, causal=True).item() == pytest.approx(expected, rel=1e-6)
    # Masked LM: no shift; only position 1 is counted.
    masked = torch.tensor([[-100, 1, -100]])
    assert example_loss(logits, masked,
                        causal=False).item() == pytest.approx(math.log(1 + math.exp(2)), rel=1e-6)
    assert math.isnan(example_loss(logits, torch.full((1, 3), -100), causal=False).item())


def test_z_score_by_hand():
    assert z_score(3.0, torch.tensor([1.0, 2.0, 3.0])) == pytest.approx(1.0)  # mean 2, sd 1
    assert math.isnan(z_score(1.0, torch.tensor([0.5])))
    assert z_score(1.0, torch.tensor([0.0, 0.0])) == math.inf
    assert z_score(0.0, torch.tensor([0.0, 0.0])) == 0.0


def test_control_heads_avoid_tested_and_excluded():
    chosen = control_heads([(0, 1), (1, 0)], n_heads=4, controls=2, exclude=[(0, 2)], seed=0)
    assert set(chosen) == {0, 1}
    assert chosen[0] == [(0, 0), (0, 3)]  # only 0 and 3 are left in layer 0
    assert len(chosen[1]) == 2 and (1, 0) not in chosen[1] and all(layer == 1 for layer, _ in chosen[1])
    assert control_heads([(0, 1)], 4, 2, seed=5) == control_heads([(0, 1)], 4, 2, seed=5)


def test_control_heads_fall_back_to_the_whole_model():
    labelled = [(layer, head) for layer in range(2) for head in range(4)]
    # layer 1 fully labelled, layer 0 has free heads: they are the controls
    free = control_heads([(1, 0)], n_heads=4, controls=8, exclude=labelled[4:], seed=0, n_layers=2)
    assert free[1] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    # every head labelled (zoo:induction): heads of the other layers, labelled or not
    every = control_heads([(1, 0), (1, 2)], n_heads=4, controls=3, exclude=labelled, seed=0, n_layers=2)
    assert len(every[1]) == 3 and all(layer == 0 for layer, _ in every[1])
    # without n_layers the old rule stands: no controls, z NaN
    assert control_heads([(1, 0)], 4, 8, exclude=labelled, seed=0) == {1: []}


def test_control_groups_are_distinct_sized_and_never_the_group():
    # a group of 2 in a layer of 4: its layer makes one other pair only, so the controls come from all other
    # heads
    group = [(1, 0), (1, 1)]
    chosen, overlapping = control_groups(group, n_layers=3, n_heads=4, controls=6, seed=0)
    assert len(chosen) == 6 and len(set(chosen)) == 6
    assert all(len(c) == 2 and c != tuple(group) for c in chosen)
    assert not overlapping and all(not set(c) & set(group) for c in chosen)
    assert any(layer != 1 for c in chosen for layer, _ in c)
    # a layer with room for several disjoint groups: they all stay in it
    wide, overlapping = control_groups(group, n_layers=3, n_heads=8, controls=5, seed=0)
    assert not overlapping and len(wide) == 5 and all(layer == 1 for c in wide for layer, _ in c)
    assert all(not set(c) & set(group) for c in wide)
    # the group fills its layer and the other layer has exactly as many heads: one disjoint group, then
    # overlaps
    full = [(1, head) for head in range(4)]
    chosen, overlapping = control_groups(full, n_layers=2, n_heads=4, controls=8, seed=0)
    assert overlapping and len(chosen) == 8 and tuple(full) not in chosen
    assert ((0, 0), (0, 1), (0, 2), (0, 3)) in chosen  # the disjoint one comes first
    assert chosen[0] == ((0, 0), (0, 1), (0, 2), (0, 3))
    assert control_groups(full, 2, 4, 8, seed=3) == control_groups(full, 2, 4, 8, seed=3)


def test_group_effect_equals_ablating_the_heads_together(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2", seed=2)))
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 60, (3, 10), generator=generator)
    batches = [{"input_ids": ids, "labels": ids.clone()}]
    group = [(1, 0), (1, 3)]
    table = group_effects(loaded, batches, [group], controls=4, max_rows=5, seed=0)
    assert len(table) == 1
    row = table.iloc[0]
    assert row["group"] == tuple(group) and row["group_size"] == 2 and row["n_controls"] == 4

    def joint(heads):
        mask = torch.zeros(2, 4, dtype=torch.bool)
        for layer, head in heads:
            mask[layer, head] = True
        with torch.inference_mode():
            clean = example_loss(loaded.model(input_ids=ids).logits, ids, True)
        with capture(loaded.model, (), ablate=mask), torch.inference_mode():
            ablated = example_loss(loaded.model(input_ids=ids).logits, ids, True)
        return float((ablated - clean).mean())

    assert row["group_effect"] == pytest.approx(joint(group), abs=1e-5)
    chosen, _ = control_groups(group, 2, 4, 4, seed=0)
    control = torch.tensor([joint(c) for c in chosen], dtype=torch.float64)
    assert row["group_z"] == pytest.approx(z_score(joint(group), control), rel=1e-4)


def test_batched_effects_equal_one_head_at_a_time(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2", seed=2)))
    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(2):
        ids = torch.randint(3, 60, (3, 10), generator=generator)
        labels = ids.clone()
        labels[:, :5] = -100  # loss on the second half only
        batches.append({"input_ids": ids, "labels": labels})
    heads = [(0, 1), (1, 3)]
    table = ablation_effects(loaded, batches, heads, controls=2, max_rows=7, seed=0)
    assert list(zip(table["layer"], table["head"], strict=True)) == heads
    controls = control_heads(heads, 4, 2, seed=0, n_layers=2)
    effect = {}
    for layer, head in heads + [head for chosen in controls.values() for head in chosen]:
        mask = torch.zeros(2, 4, dtype=torch.bool)
        mask[layer, head] = True
        deltas = []
        for batch in batches:
            with torch.inference_mode():
                clean = example_loss(loaded.model(input_ids=batch["input_ids"]).logits, batch["labels"], True)
            with capture(loaded.model, (), ablate=mask), torch.inference_mode():
                ablated = example_loss(loaded.model(input_ids=batch["input_ids"]).logits,
                                       batch["labels"], True)
            deltas.append(ablated - clean)
        effect[(layer, head)] = float(torch.cat(deltas).mean())
    for row in table.itertuples():
        assert row.ablation_effect == pytest.approx(effect[(row.layer, row.head)], abs=1e-5)
        control = torch.tensor([effect[head] for head in controls[row.layer]], dtype=torch.float64)
        assert row.ablation_z == pytest.approx(z_score(effect[(row.layer, row.head)], control), rel=1e-4)
        assert row.n_controls == 2


def test_unknown_head_is_a_one_line_error(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")))
    batch = {"input_ids": torch.zeros(1, 4, dtype=torch.long), "labels": torch.zeros(1, 4, dtype=torch.long)}
    with pytest.raises(ProbeError, match="not in this model"):
        ablation_effects(loaded, [batch], [(5, 0)])
