"""The findings summary of a label table (probe.heads.findings) and the generated tables in README and docs.

Exact values on a hand-made table (labelled rows only, ranges, medians, sinks, the joint ablation's source,
NaN shown as "—"); the committed pages equal what scripts/label_tables.py writes from the shipped tables; and
the number the README quotes for a negative ablation effect (zoo:implicit-causality's coreference heads) is
what the engine's zeroing and an independent hook on the output projection both give.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

import probe
from probe.heads.ablation import example_loss, set_effects
from probe.heads.findings import findings, findings_markdown
from probe.heads.label.ablation import loss_batch
from probe.heads.label.config import LabelConfig
from probe.heads.label.probes import ProbeSource
from probe.heads.probesets import pad_span_batch

ROOT = Path(__file__).resolve().parents[2]


def _row(name, layer, head, head_type, label, score, **extra):
    return {"model": "m", "layer": layer, "head": head, "head_name": name, "head_type": head_type,
            "probe_set": "natural", "label": label, "score": score, "chance": 0.1, **extra}


def _table():
    return pd.DataFrame([
        _row("L1H0", 1, 0, "induction", True, 0.9, output_share=0.8, role="copying", ablation_effect=0.5,
             type_group_effect=2.0, type_group_z=4.0, type_group_size=2, copying=0.99),
        _row("L0H3", 0, 3, "induction", True, 0.7, output_share=0.6, role="copying", ablation_effect=0.1,
             type_group_effect=2.0, type_group_z=4.0, type_group_size=2, copying=0.95),
        _row("L0H1", 0, 1, "induction", False, 0.2, output_share=0.01, role="", ablation_effect=9.0,
             copying=-1.0),  # not labelled: must not count
        _row("L2H2", 2, 2, "first_token", True, 0.5, output_share=0.05, role="sink", group_effect=-0.3,
             group_z=math.nan, group_size=2),
        _row("L2H3", 2, 3, "first_token", True, 0.6, output_share=0.07, role="sink", group_effect=-0.3,
             group_z=math.nan, group_size=2),
        _row("L0H0", 0, 0, "previous_token", False, 0.1),  # a type with no label: no row
    ])


def test_findings_summarise_only_labelled_heads_exactly():
    rows = findings(_table()).set_index("head_type")
    assert list(rows.index) == ["induction", "first_token"]
    induction = rows.loc["induction"]
    assert induction["heads"] == "L0H3 L1H0"  # ordered by (layer, head), the unlabelled L0H1 left out
    assert (induction["n_heads"], induction["score_min"], induction["score_max"]) == (2, 0.7, 0.9)
    assert induction["share_median"] == pytest.approx(0.7)
    assert (induction["ablation_min"], induction["ablation_max"]) == (0.1, 0.5)
    assert (induction["joint_effect"], induction["joint_z"], induction["joint_size"]) == (2.0, 4.0, 2.0)
    assert (induction["copying_min"], induction["copying_max"]) == (0.95, 0.99)
    assert induction["n_sinks"] == 0
    first = rows.loc["first_token"]
    assert first["n_sinks"] == 2
    assert first["joint_effect"] == -0.3 and math.isnan(first["joint_z"])  # the per-layer group, z unknown
    assert math.isnan(first["ablation_min"]) and math.isnan(first["copying_max"])  # unknown is NaN, not 0


def test_findings_markdown_shows_unknown_as_a_dash_and_counts_sinks():
    text = findings_markdown(findings(_table()))
    lines = text.splitlines()
    assert lines[0].startswith("| model | head type | probes | labelled heads |")
    assert lines[2] == ("| `m` | induction | natural | L0H3 L1H0 | 0.70–0.90 (0.10) | 0.70 (0.60–0.80) | "
                        "+0.100–+0.500 | +2.00 (z 4.0) | +0.95–+0.99 |")
    assert lines[3] == ("| `m` | first_token | natural | L2H2 L2H3 | 0.50–0.60 (0.10) | 0.06 (0.05–0.07), "
                        "2 sinks | — | -0.30 (z —) | — |")
    assert findings(_table().assign(label=False)).empty


def test_the_committed_pages_carry_the_tables_generated_from_the_shipped_labels():
    spec = importlib.util.spec_from_file_location("label_tables", ROOT / "scripts" / "label_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stale = "README/docs findings are stale: run `python scripts/label_tables.py`"
    assert module.main(["--check"]) == 0, stale
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "| `zoo:induction` | induction | repeated | L1H0 L1H1 L1H2 L1H3 |" in readme


def test_a_negative_ablation_effect_is_what_zeroing_the_heads_by_a_hook_gives():
    """zoo:implicit-causality's coreference heads on its causality probes: the probes draw the action after
    the pronoun at random, the organism predicts the one it learnt for the antecedent, so the clean loss is
    large and zeroing layer 1 lowers it. The engine's zeroing equals a forward pre-hook zeroing c_proj's
    input."""
    loaded = probe.models.load("zoo:implicit-causality")
    name, probes = ProbeSource(loaded, LabelConfig()).span_probes()
    assert name == "causality"
    spans = pad_span_batch(probes[:16], loaded.tokenizer.pad_token_id or 0)
    batch = loss_batch(loaded, "coreference", spans.input_ids, spans.attention_mask, spans=spans.examples,
                       seed=0)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    model = loaded.model
    with torch.inference_mode():
        clean = example_loss(model(**inputs).logits, batch["labels"], causal=True)  # [batch]

    def zero(module, args):
        return (torch.zeros_like(args[0]),)

    hook = model.transformer.h[1].attn.c_proj.register_forward_pre_hook(zero)
    try:
        with torch.inference_mode():
            hooked = example_loss(model(**inputs).logits, batch["labels"], causal=True)  # [batch]
    finally:
        hook.remove()
    layer_one = tuple((1, head) for head in range(loaded.n_heads))
    effect = set_effects(loaded, [batch], [layer_one],
                         lambda logits, b: example_loss(logits, b["labels"], causal=True))[layer_one]
    assert effect == pytest.approx(float((hooked - clean).nanmean()), abs=1e-4)
    assert float(clean.nanmean()) > 10 and effect < -5  # the README's numbers: a real, negative effect
