"""`probe profile --control untrained[:K]` (issue 39): the same inputs and rows through K untrained twins
(probe.untrained), each measure's twin distribution beside every head, and the one claim of the table — a
head's span, local or retrieval — checked against it.

* the columns by hand: twins built with :func:`probe.untrained.untrained_twin`, profiled on their own with the
  same config, ``np.quantile`` of each measure over all their heads; the model's own columns unchanged;
* positive control: zoo:induction's previous-token head L0H1 is local (window 2) and beats the twins;
* negative control: a sliding-window model (Mistral, window 8) is all local, and so are its twins: no head's
  span beats them (a span the architecture makes);
* the pure rule on a hand-made table, the summary line, and the CLI flag (one line before torch for a bad
  value, off by default, the columns in the written table).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import probe
from probe import models
from probe.cli import build_parser, main
from probe.heads.profile import (
    MEASURES,
    ProfileConfig,
    head_profiles,
    random_inputs,
    span_summary,
    untrained_columns,
)
from probe.untrained import UNTRAINED_QUANTILE, twin_seeds, untrained_twin

ROOT = Path(__file__).resolve().parents[2]
# previous-token attention is local at window 2 (self and the previous token), sink not counted
SMALL = dict(seq_len=48, window=2, sink_tokens=0, max_offset=4, threshold=0.5, n_bootstrap=50)


@pytest.fixture(scope="module")
def induction():
    return probe.load("zoo:induction")


@pytest.fixture(scope="module")
def with_twins(induction):
    return head_profiles(induction, random_inputs(induction, 4, 48), ProfileConfig(twins=2, **SMALL))


def test_the_twin_columns_are_the_twins_quantiles_by_hand(induction, with_twins):
    config = ProfileConfig(**SMALL)  # no twins: each twin profiled on its own, on the same inputs and rows
    twins = [head_profiles(untrained_twin(induction, seed), random_inputs(induction, 4, 48), config)
             for seed in twin_seeds(2)]
    pooled = pd.concat(twins, ignore_index=True)
    assert len(pooled) == 2 * 8
    for measure in MEASURES:
        values = pooled[measure].to_numpy(dtype=float)
        low, high = np.quantile(values, 1 - UNTRAINED_QUANTILE), np.quantile(values, UNTRAINED_QUANTILE)
        assert with_twins[f"untrained_p01_{measure}"].unique().tolist() == [pytest.approx(low, abs=1e-12)]
        assert with_twins[f"untrained_p99_{measure}"].unique().tolist() == [pytest.approx(high, abs=1e-12)]
    twin_local = float((pooled["span"] == "local").mean())
    expected = np.where(with_twins["span"] == "local", twin_local, 1 - twin_local)
    np.testing.assert_allclose(with_twins["span_untrained_share"], expected)
    # the twins only add columns: the model's own are those of a run without them
    plain = head_profiles(induction, random_inputs(induction, 4, 48), config)
    assert plain["untrained_twins"].eq(0).all() and not any(c.startswith("untrained_p") for c in plain)
    pd.testing.assert_frame_equal(with_twins[list(plain.columns.drop("untrained_twins"))],
                                  plain.drop(columns="untrained_twins"))
    assert with_twins["untrained_twins"].eq(2).all()


def test_a_learnt_previous_token_head_beats_the_twins(with_twins):
    """Positive control: L0H1 (zoo:induction's previous-token head) is local at window 2, far above any twin
    head; the twins, near-uniform over ~24 keys, are retrieval heads at this window."""
    row = with_twins.set_index("head_name").loc["L0H1"]
    assert row["span"] == "local" and bool(row["span_beats_untrained"])
    assert row["streaming_mass"] > 0.9 > 0.5 > row["untrained_p99_streaming_mass"]
    assert row["span_untrained_share"] == 0.0  # no twin head is local


def test_a_span_the_architecture_makes_does_not_beat_the_twins(tiny_dir):
    """Negative control: a sliding-window-8 Mistral attends only within 8 tokens, trained or not: every head
    is local, every twin head too, and no head's span beats the twins."""
    windowed = models.load(str(tiny_dir("mistral", max_position_embeddings=512)))
    config = ProfileConfig(seq_len=128, sink_tokens=0, window=8, max_offset=4, threshold=0.9, n_bootstrap=20,
                           twins=2)
    table = head_profiles(windowed, random_inputs(windowed, 2, 128), config)
    assert (table["span"] == "local").all()
    assert (table["span_untrained_share"] == 1.0).all() and not table["span_beats_untrained"].any()
    assert "0 beyond 2 untrained twins" in span_summary(table)


def test_the_rule_on_a_hand_made_table():
    mine = pd.DataFrame({"streaming_mass": [0.95, 0.35, 0.1, 0.39], "span": ["local", "local", "retrieval",
                                                                              "retrieval"]})
    twins = [pd.DataFrame({"streaming_mass": [0.2, 0.3]}), pd.DataFrame({"streaming_mass": [0.4]})]
    out = untrained_columns(mine, twins, threshold=0.3)  # twins: 2 of 3 heads local at 0.3
    assert out["untrained_p99_streaming_mass"].iloc[0] == pytest.approx(np.quantile([0.2, 0.3, 0.4], 0.99))
    assert out["span_beats_untrained"].tolist() == [True, False, True, False]
    np.testing.assert_allclose(out["span_untrained_share"], [2 / 3, 2 / 3, 1 / 3, 1 / 3])
    assert "untrained_p99_entropy" not in out  # a measure the tables lack is left out, not invented
    with pytest.raises(probe.errors.ProbeError, match="at least one twin"):
        untrained_columns(mine, [], threshold=0.3)
    with pytest.raises(probe.errors.ProbeError, match="untrained twins"):
        ProfileConfig(twins=-1).check()


def test_the_summary_says_when_the_twins_were_not_run(induction):
    plain = head_profiles(induction, random_inputs(induction, 2, 48), ProfileConfig(**SMALL))
    assert "untrained twins not run" in span_summary(plain)


def test_the_control_flag_is_off_by_default_and_reaches_the_table(tmp_path, capsys):
    parser = build_parser()
    assert parser.parse_args(["profile", "--model", "m", "--random", "1", "--out", "p.csv"]).control == "none"
    out = tmp_path / "p.csv"
    assert main(["profile", "--model", "zoo:induction", "--random", "2", "--seq-len", "48", "--window", "2",
                 "--sink-tokens", "0", "--threshold", "0.5", "--bootstrap", "20", "--control", "untrained:1",
                 "--out", str(out)]) == 0
    table = pd.read_csv(out)
    assert table["untrained_twins"].eq(1).all() and "span_beats_untrained" in table
    assert "beyond 1 untrained twins" in capsys.readouterr().err


def test_a_bad_control_is_one_line_before_torch(tmp_path):
    script = ("import sys; from probe.cli import main; rc = main(['profile', '--model', 'zoo:induction', "
              f"'--random', '2', '--control', 'untrained:0', '--out', {str(tmp_path / 'p.csv')!r}]); "
              "assert 'torch' not in sys.modules; sys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "K must be a whole number of twins" in result.stderr
