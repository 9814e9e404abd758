"""The reading rules every view shares (probe.views.reading): grey = not labelled, and why, on hand-made rows;
the rule's numbers equal LabelConfig's defaults."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from probe.heads.label import LabelConfig
from probe.views import reading


def row(**values):
    base = {"layer": 0, "head": 0, "head_type": "previous_token", "score": 0.5, "chance": 0.01,
            "effect": 0.49, "p_value": 1e-9, "q_value": 1e-8, "label": False}
    base.update(values)
    return next(pd.DataFrame([base]).itertuples(index=False))


def test_the_reading_rule_numbers_are_label_configs_defaults():
    config = LabelConfig()
    assert (reading.FDR_LEVEL, reading.MIN_EFFECT, reading.MIN_ACCURACY_GAIN) == (
        config.fdr, config.min_effect, config.min_accuracy_gain)


@pytest.mark.parametrize(("values", "reason"), [
    ({"label": True}, ""),
    ({"score": math.nan}, "no score (no probe had a target)"),
    ({"untrained_p99": 0.6}, "below the untrained twins (score 0.500 ≤ their 99th percentile 0.600)"),
    ({"q_value": math.nan, "p_value": math.nan}, "untestable (its examples come from one bootstrap cluster)"),
    # the MiniLM L3H2: prefers the antecedent, but attends to it less than chance
    ({"head_type": "coreference", "score": 0.019, "chance": 0.024, "accuracy": 0.64, "effect": 0.15,
      "p_value": 0.97, "p_above_chance": 0.97, "q_value": 1.0},
     "attention to the targets not above chance (0.019 vs chance 0.024)"),
    # the MiniLM L0H5: far above chance, below the minimum effect
    ({"score": 0.257, "chance": 0.008, "effect": 0.249, "p_value": 0.6, "q_value": 0.7},
     "below the minimum effect (score − chance 0.249 ≤ 0.25)"),
    ({"head_type": "coreference", "accuracy": 0.55, "effect": 0.05, "p_value": 0.9, "p_above_chance": 1e-6,
      "q_value": 0.95}, "below the minimum effect (accuracy gain over the best baseline 0.050 ≤ 0.1)"),
    ({"effect": 0.27, "p_value": 0.04, "q_value": 0.08},
     "q 0.08 above the FDR 0.05 (effect not clearly above the minimum)"),
])
def test_label_reason_by_hand(values, reason):
    assert reading.label_reason(row(**values)) == reason
    assert reading.is_grey(row(**values)) == (reason not in ("", "no score (no probe had a target)"))


def test_a_table_without_labels_greys_what_is_not_clearly_above_chance():
    above = next(pd.DataFrame([{"score": 0.5, "ci_low": 0.4, "chance": 0.1}]).itertuples(index=False))
    near = next(pd.DataFrame([{"score": 0.12, "ci_low": 0.05, "chance": 0.1}]).itertuples(index=False))
    assert not reading.is_grey(above) and reading.label_reason(above) == ""
    assert reading.is_grey(near) and reading.label_reason(near) == "not clearly above chance"
