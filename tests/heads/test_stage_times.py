"""Per-stage wall-clock seconds of a labelling run (issue 31): label_model fills a StageTimes, probe label
says one line per model."""

from __future__ import annotations

from probe import models
from probe.heads.label import LabelConfig, label_model
from probe.heads.stage_times import StageTimes


def test_label_model_times_each_stage_it_runs():
    timings = StageTimes()
    config = LabelConfig(
        types=("previous_token", "induction"),
        examples=8,
        n_bootstrap=50,
        ablation_examples=8,
        ablation_controls=2,
    )
    label_model(models.load("zoo:induction"), config, timings=timings)
    assert {"probe sets", "forwards", "bootstrap", "copying", "per-head ablation", "group ablation"} <= set(
        timings.seconds
    )
    assert (
        "GAP pairs" not in timings.seconds and "retrieval ablation" not in timings.seconds
    )  # not run: not timed
    assert all(value >= 0 for value in timings.seconds.values())
    line = timings.line("zoo:induction")
    assert line.startswith("zoo:induction · time by stage: probe sets ") and line.endswith(" s)")
    none = StageTimes()
    label_model(
        models.load("zoo:induction"),
        LabelConfig(types=("previous_token",), examples=4, n_bootstrap=20, ablate="none"),
        timings=none,
    )
    assert "per-head ablation" not in none.seconds  # --ablate none: no ablation stage


def test_probe_label_prints_the_stage_line(capsys):
    from probe.cli import main

    assert (
        main(
            [
                "label",
                "--model",
                "zoo:induction",
                "--types",
                "previous_token",
                "--examples",
                "4",
                "--bootstrap",
                "20",
                "--ablate",
                "none",
            ]
        )
        == 0
    )
    assert "zoo:induction · time by stage: probe sets" in capsys.readouterr().err
