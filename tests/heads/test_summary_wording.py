"""What the label summary says about a group's z and its control groups (issue 44, item 10): a z below
Z_SIGNIFICANT says it is not significant, an unknown z says why, and "0 control groups" is never printed."""

from __future__ import annotations

import math

import pandas as pd

from probe.heads.label import summary_lines
from probe.heads.label.ablation import controls_note
from probe.heads.label.table import Z_SIGNIFICANT, z_text


def _table(group_z: float, type_z: float) -> pd.DataFrame:
    rows = []
    for layer, head in ((0, 1), (1, 0), (1, 1)):
        rows.append({"model": "m", "seq_len": 32, "head_type": "induction", "layer": layer, "head": head,
                     "head_name": f"L{layer}H{head}", "label": True, "offset": math.nan, "stable": True,
                     "role": "function", "group_heads": "L1H0 L1H1" if layer == 1 else None,
                     "group_effect": 6.39 if layer == 1 else math.nan,
                     "group_z": group_z if layer == 1 else math.nan,
                     "type_group_effect": 8.7, "type_group_z": type_z})
    return pd.DataFrame(rows)


def test_a_z_below_the_bar_says_it_is_not_significant_and_one_above_does_not():
    line, *_ = summary_lines(_table(1.2, 5.4))  # then the line saying the untrained twins were not run
    assert "together L1H0 L1H1: +6.39 nats (z 1.2: not significant, within the random groups' spread)" in line
    assert "all 3 across layers: +8.70 nats (z 5.4)" in line
    line, *_ = summary_lines(_table(math.nan, -0.3))
    assert "(z unknown: too few control groups)" in line
    assert "(z -0.3: not significant" in line


def test_z_text_at_the_bar():
    assert z_text(Z_SIGNIFICANT) == "z 2.0" and z_text(-Z_SIGNIFICANT) == "z -2.0"
    assert z_text(1.99).endswith("not significant, within the random groups' spread")


def test_the_control_note_never_counts_zero_groups_and_agrees_in_number():
    assert controls_note(0, "layer-matched ", "them", "type_group_z") == \
        "so no layer-matched control group could be drawn: type_group_z is unknown"
    assert controls_note(1, "", "it", "group_z") == \
        "so its 1 control group may share heads with it (group_z is conservative)"
    assert controls_note(8, "layer-matched ", "them", "type_group_z") == \
        "so its 8 layer-matched control groups may share heads with them (type_group_z is conservative)"
