"""Labels in bfloat16 equal the float32 labels on every model organism (issue 31, "Precision").

The float32 reference is each organism's shipped ``labels.csv``: tests/models/test_zoo.py
(``test_shipped_label_table_equals_a_fresh_relabel``) proves it equal to a fresh float32 relabel with the
card's LabelConfig — names, labels and roles exactly, numbers within 1e-5. Here the same weights, loaded with
``dtype=torch.bfloat16``, are labelled with the same LabelConfig: the label column, the test's pass/fail (q ≤
fdr) and the role must be equal; the scores move by at most SCORE_TOL (GENERATED_TOL for the retrieval
organism, whose scores count decoding steps). Measured (docs/engine.md, "Reduced precision"): max |score
diff| 1.4e-7 (esm-random) to 3.8e-3 (brackets) for attention-mass scores, one decoding step (1.25e-2) for
retrieval; max |effect diff| of mass types ≤ 7.9e-4, while the nearest labelled effect is 0.050 from its H0
bound (brackets) and the nearest of any row 0.004 (induction, unlabelled). A label that flips reports its
row's fp32 / bf16 score, effect and q (the margin), so a borderline head is seen as one rather than hidden
by a looser test.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from probe import zoo
from probe.heads.label import label_model
from probe.heads.registry import REGISTRY
from probe.heads.tables import load_table
from probe.models import load
from probe.training import cards

ALL = ["brackets", "coreference", "esm-random", "implicit-causality", "induction", "positional", "retrieval",
       "sentences"]
DEFAULT = "induction"  # the one organism in the default suite (~12 s); the others are slow
SCORE_TOL = 1e-2  # attention-mass scores: the largest measured |score diff| is 3.8e-3
# Generation-scored types count decoding steps: retrieval's score is the share of 80 needle steps (10 probes
# × 8 tokens) a head copied, and bf16 moved L1H0's by one step (0.9625 → 0.95); two steps are allowed.
GENERATED_TOL = 2 / 80


def bf16_table(name: str) -> pd.DataFrame:
    """The organism labelled in bfloat16 with the LabelConfig its card records."""
    loaded = load(str(zoo.path(name)), dtype=torch.bfloat16)
    assert next(loaded.model.parameters()).dtype == torch.bfloat16
    return label_model(loaded, cards.card_label_config(zoo.card(name), None)).reset_index(drop=True)


def decisions(table: pd.DataFrame, fdr: float) -> pd.DataFrame:
    """label, the test's pass/fail (q ≤ fdr) and the role of every row."""
    return pd.DataFrame({"label": table["label"].astype(bool),
                         "passes": table["q_value"].astype(float).le(fdr),
                         "role": table["role"].astype(object).where(table["role"].notna(), "")})


def differences(reference: pd.DataFrame, table: pd.DataFrame, fdr: float) -> tuple[pd.DataFrame, float]:
    """(the rows whose decisions differ, both tables' score / effect / q side by side; max |score diff|)."""
    assert list(reference["head_name"]) == list(table["head_name"])
    assert list(reference["head_type"]) == list(table["head_type"])
    left, right = decisions(reference, fdr), decisions(table, fdr)
    differ = (left != right).any(axis=1).to_numpy()
    shown = ["head_name", "head_type", "score", "effect", "q_value", "label", "role"]
    rows = pd.concat([reference.loc[differ, shown].add_prefix("fp32_"),
                      table.loc[differ, shown].add_prefix("bf16_")], axis=1)
    diff = (reference["score"].astype(float) - table["score"].astype(float)).abs()
    return rows, float(diff.max(skipna=True)) if diff.notna().any() else 0.0


def tolerance(table: pd.DataFrame) -> float:
    """SCORE_TOL, or GENERATED_TOL where a generation-scored type (a spec with a scorer) is in the table."""
    generated = any(REGISTRY[name].scorer is not None for name in table["head_type"].unique())
    return GENERATED_TOL if generated else SCORE_TOL


def check(name: str) -> None:
    fdr = cards.card_label_config(zoo.card(name), None).fdr
    reference = load_table(zoo.labels_path(name))
    rows, max_diff = differences(reference, bf16_table(name), fdr)
    assert rows.empty, f"{name}: bf16 changes these decisions (margins):\n{rows.to_string()}"
    assert max_diff <= tolerance(reference), f"{name}: max |score diff| {max_diff:.2e}"
    assert name == "esm-random" or max_diff > 0, f"{name}: bf16 gave float32's scores exactly (not bf16?)"


def test_bf16_labels_equal_fp32_on_the_induction_organism():
    check(DEFAULT)


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in ALL if name != DEFAULT])
def test_bf16_labels_equal_fp32_on_every_organism(name):
    check(name)


def test_the_comparison_sees_a_flipped_label_a_failed_test_and_a_changed_role():
    """Negative controls: one label flipped, one q moved over fdr, one role changed — each is a difference."""
    reference = load_table(zoo.labels_path(DEFAULT))
    assert differences(reference, reference.copy(), 0.05)[0].empty
    labelled = int(np.flatnonzero(reference["label"].astype(bool))[0])
    flipped = reference.copy()
    flipped.loc[labelled, "label"] = False
    moved = reference.copy()
    moved.loc[labelled, "q_value"] = 0.2
    role = reference.copy()
    role.loc[labelled, "role"] = "sink"
    for changed in (flipped, moved, role):
        rows, _ = differences(reference, changed, 0.05)
        assert list(rows["fp32_head_name"]) == [reference.loc[labelled, "head_name"]]
