"""Sink rate (Gu et al. 2024): the share of heads whose mean attention on the first token exceeds 0.3, and how
many of those are no-op sinks by output share."""

from __future__ import annotations

import math

import pandas as pd

from probe.heads.label import LabelConfig, label_model, summary_lines
from probe.heads.sink_rate import sink_rate_lines, sink_rates


def _table(scores, shares, head_type="first_token"):
    return pd.DataFrame(
        {"model": "m", "seq_len": 64.0, "head_type": head_type, "score": scores, "output_share": shares}
    )


def test_sink_rate_by_hand():
    # above 0.3: 0.9 (no-op), 0.31 (function); at or below: 0.3, 0.1; the other type's rows do not count
    table = pd.concat([_table([0.9, 0.31, 0.3, 0.1], [0.02, 0.5, 0.01, 0.01]), _table([0.99], [0.0], "self")])
    row = sink_rates(table).iloc[0]
    assert (row["n_heads"], row["n_sinks"], row["n_noop"]) == (4, 2, 1) and row["sink_rate"] == 0.5
    assert sink_rate_lines(table) == [
        "m · sink rate: 2 of 4 heads (50%) put mean α > 0.3 on the first token (Gu et al. "
        "2024); 1 of them no-op sinks (output share < 0.1)"
    ]


def test_unknown_shares_are_not_counted_as_no_op():
    row = sink_rates(_table([0.9, 0.8], [math.nan, math.nan])).iloc[0]
    assert row["n_sinks"] == 2 and math.isnan(row["n_noop"])
    assert sink_rates(_table([0.1], [0.5], "self")).empty  # no first_token rows: no rate


def test_the_induction_organisms_sinks_are_counted():
    """zoo:induction: its first-token heads L0H0 and L0H2 (labelled, the card) are counted; the planted
    previous-token heads of the same model are not first_token rows at all."""
    from probe import models

    table = label_model(
        models.load("zoo:induction"),
        LabelConfig(types=("first_token",), examples=16, n_bootstrap=100, ablate="none"),
    )
    rates = sink_rates(table).iloc[0]
    labelled = set(table.loc[table["label"], "head_name"])
    assert {"L0H0", "L0H2"} <= labelled
    high = set(table.loc[table["score"] > 0.3, "head_name"])
    assert rates["n_sinks"] == len(high) and {"L0H0", "L0H2"} <= high and rates["n_heads"] == 8
    assert any(line.startswith("zoo:induction · sink rate:") for line in summary_lines(table))


def test_a_random_model_has_no_sinks(tiny_dir):
    """Negative control: a random tiny GPT-2 attends almost uniformly, so no head puts 0.3 on the first
    token."""
    from probe import models

    table = label_model(
        models.load(str(tiny_dir("gpt2"))),
        LabelConfig(types=("first_token",), examples=8, seq_len=64, n_bootstrap=100, ablate="none"),
    )
    assert sink_rates(table).iloc[0]["n_sinks"] == 0 and (table["score"] < 0.3).all()
