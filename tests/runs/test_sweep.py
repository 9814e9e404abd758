"""Sweeps over training checkpoints: zoo training writes step-N/ checkpoints, `probe label --revisions` labels
them into one table (checkpoint, step columns), resumes, records a bad checkpoint, plots; on Ray the table is
the same."""

from __future__ import annotations

import sys

import pandas as pd
import pytest
import torch

from probe import models
from probe.errors import ProbeError
from probe.heads.label import LabelConfig, label_model
from probe.runs.checkpoints import checkpoint_step, sweep_checkpoints
from probe.runs.plot import sweep_figure
from probe.runs.tasks import SWEEP_COLUMNS

# two types, small probe sets, no ablation: the runner is under test here, not the classifier
CONFIG = LabelConfig(**{name: value for name, value in dict(
    types=("previous_token", "induction"), examples=8, batch_size=8, n_bootstrap=100, ablate="none",
).items() if name in LabelConfig.__dataclass_fields__})
STEPS = (0, 3, 6)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A 6-step run of the induction organism (batch 4) with checkpoints after 0, 3 and 6 steps (~1 s)."""
    from probe.training.train import train

    out = tmp_path_factory.mktemp("induction-run")
    train("induction", 0, out, overrides={"steps": 6, "batch": 4, "warmup": 2}, label=False,
          checkpoint_steps=STEPS)
    return out


FLAGS = ["--types", "previous_token,induction", "--examples", "8", "--batch-size", "8", "--bootstrap", "100",
         "--ablate", "none", "--control", "none"]  # = CONFIG (twins: 0, the CLI's default is 3)


def label_command(argv: list[str]) -> int:
    """`probe label ARGV` with CONFIG's flags, in this process."""
    from probe.cli import main

    return main(["label", *argv, *FLAGS])


def test_training_writes_loadable_checkpoints_without_changing_the_run(checkpoints, tmp_path):
    import json

    from safetensors.torch import load_file

    from probe.training.train import train

    # no checkpoints
    train("induction", 0, tmp_path, overrides={"steps": 6, "batch": 4, "warmup": 2}, label=False)
    plain = load_file(tmp_path / "model.safetensors")
    assert not list(tmp_path.glob("step-*"))

    for step in STEPS:
        directory = checkpoints / f"step-{step}"
        assert json.loads((directory / "card.json").read_text())["step"] == step
        assert models.load(str(directory)).n_layers == 2
    final, last = load_file(checkpoints / "model.safetensors"), load_file(
        checkpoints / "step-6" / "model.safetensors")
    assert all(torch.equal(final[name], last[name]) and torch.equal(final[name], plain[name])
               for name in final)
    first = load_file(checkpoints / "step-0" / "model.safetensors")
    assert not all(torch.equal(first[name], last[name]) for name in first)  # the weights did train


def test_checkpoint_step_from_card_or_name(tmp_path):
    assert checkpoint_step("step-50") == 50 and checkpoint_step("step143000") == 143000
    assert checkpoint_step("out/checkpoint-500") == 500 and checkpoint_step("main") is None
    assert checkpoint_step("gpt2") is None and checkpoint_step("v2-step") is None
    (tmp_path / "card.json").write_text('{"step": 7}')
    assert checkpoint_step("anything", tmp_path) == 7
    with pytest.raises(ProbeError, match="needs --model"):
        sweep_checkpoints(None, "step-0", None)


def test_sweep_table_resume_errors_and_plot(checkpoints, tmp_path, capsys):
    out, plot = tmp_path / "sweep.parquet", tmp_path / "sweep.html"
    revisions = ",".join(f"step-{s}" for s in STEPS)
    assert label_command(["--model", str(checkpoints), "--revisions", revisions, "--out", str(out),
                          "--plot", str(plot)]) == 0
    table = pd.read_parquet(out)
    assert list(table["checkpoint"].unique()) == [f"step-{s}" for s in STEPS]
    assert list(table["step"].unique()) == list(STEPS) and set(table["model"]) == {str(checkpoints)}
    for step in STEPS:
        expected = label_model(models.load(str(checkpoints / f"step-{step}")), CONFIG)
        mine = table[table["step"] == step].drop(columns=[*SWEEP_COLUMNS, "model"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, expected.drop(columns=["model"]), check_exact=True,
                                      check_dtype=False)
    if table["label"].any():
        assert plot.exists() and "plotly" in plot.read_text()[:5000]
        if (tmp_path / "sweep.png").exists():  # kaleido or a Chromium was available
            assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    else:  # a 6-step run may label nothing yet
        assert not plot.exists() and "no head is labelled at any checkpoint" in capsys.readouterr().err

    # a rerun with one more (missing) revision: the three done are reused, the missing one is an error row
    capsys.readouterr()
    assert label_command(["--model", str(checkpoints), "--revisions", revisions + ",step-99",
                          "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "3 of 4 model(s) already done" in err and "no checkpoint directory 'step-99'" in err
    pd.testing.assert_frame_equal(pd.read_parquet(out), table)
    errors = pd.read_csv(tmp_path / "sweep.errors.csv")
    assert list(errors["unit"]) == [f"{checkpoints}@step-99"] and list(errors["kind"]) == ["input"]


SWEEP = [sys.executable, "-m", "probe.cli", "label", "--types", "previous_token,induction", "--examples",
         "32", "--batch-size", "8", "--bootstrap", "100", "--ablate", "none"]


def test_killed_driver_resumes_after_the_finished_checkpoints(checkpoints, tmp_path):
    """SIGKILL the driver as soon as its first checkpoint is journalled; the rerun computes only the rest and
    the table equals an uninterrupted run's."""
    import os
    import signal
    import subprocess
    import time

    flags = ["--model", str(checkpoints), "--revisions", "step-0,step-3,step-6"]
    out = tmp_path / "killed.parquet"
    parts = tmp_path / ".killed.parquet.parts"
    process = subprocess.Popen([*SWEEP, *flags, "--out", str(out)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if parts.is_dir() and any(p.suffix == ".npz" and not p.name.startswith(".") for p in parts.iterdir()):
            os.kill(process.pid, signal.SIGKILL)
            break
        time.sleep(0.01)
    assert process.wait(timeout=60) == -signal.SIGKILL, "the run finished before it could be killed"
    rerun = subprocess.run([*SWEEP, *flags, "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    reused = int(rerun.stderr.split(" of 3 model(s) already done")[0].rsplit(" ", 1)[-1])
    assert 1 <= reused < 3
    whole = subprocess.run([*SWEEP, *flags, "--out", str(tmp_path / "whole.parquet")], capture_output=True,
                           text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-2000:]
    pd.testing.assert_frame_equal(pd.read_parquet(out), pd.read_parquet(tmp_path / "whole.parquet"),
                                  check_exact=True)


def test_out_that_is_not_a_label_table_is_refused(checkpoints, tmp_path, capsys):
    out = tmp_path / "notes.csv"
    out.write_text("a,b\n1,2\n")
    assert label_command(["--model", str(checkpoints), "--revisions", "step-0", "--out", str(out)]) == 2
    assert out.read_text() == "a,b\n1,2\n" and "is not a probe label table" in capsys.readouterr().err


def test_models_file_equals_revisions(checkpoints, tmp_path):
    listing = tmp_path / "checkpoints.txt"
    listing.write_text("# one per line\n" + "".join(f"{checkpoints}/step-{s}\n" for s in STEPS))
    results = {}
    for name, flags in (("file", ["--models-file", str(listing)]),
                        ("revisions", ["--model", str(checkpoints), "--revisions", "step-0,step-3,step-6"])):
        assert label_command([*flags, "--out", str(tmp_path / f"{name}.parquet")]) == 0
        results[name] = pd.read_parquet(tmp_path / f"{name}.parquet")
    columns = ["checkpoint", "step", "revision", "head_name", "head_type", "score", "ci_low", "label"]
    pd.testing.assert_frame_equal(results["file"][columns], results["revisions"][columns])


def test_figure_has_one_line_per_labelled_head(checkpoints):
    table = pd.DataFrame({
        "checkpoint": ["step-0", "step-0", "step-9", "step-9"], "step": [0, 0, 9, 9],
        "head_name": ["L1H0", "L1H1", "L1H0", "L1H1"], "head_type": ["induction"] * 4,
        "score": [0.1, 0.2, 0.9, 0.3], "ci_low": [0.05, 0.1, 0.8, 0.2], "ci_high": [0.15, 0.3, 0.95, 0.4],
        "chance": [0.05, 0.05, 0.05, 0.05], "label": [False, False, True, False],
    })
    figure = sweep_figure(table)
    lines = {trace.name: trace for trace in figure.data}
    assert set(lines) == {"L1H0", "chance (uniform)"}  # L1H1 is never labelled
    assert list(lines["L1H0"].x) == [0, 9] and list(lines["L1H0"].y) == [0.1, 0.9]
    assert list(lines["L1H0"].error_y.arrayminus) == pytest.approx([0.05, 0.1])
    with pytest.raises(ProbeError, match="no head is labelled"):
        sweep_figure(table.assign(label=False))


@pytest.mark.ray
def test_sweep_on_ray_auto_equals_in_process(checkpoints, tmp_path):
    pytest.importorskip("ray")
    revisions = "step-0,step-3,step-6"
    assert label_command(["--model", str(checkpoints), "--revisions", revisions,
                          "--out", str(tmp_path / "local.parquet")]) == 0
    assert label_command(["--model", str(checkpoints), "--revisions", revisions, "--ray", "auto",
                          "--ray-workers", "2", "--out", str(tmp_path / "ray.parquet")]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "ray.parquet"),
                                  pd.read_parquet(tmp_path / "local.parquet"), check_exact=True)


def test_probe_label_flags_wired(checkpoints, tmp_path):
    """End to end through `probe label` with its own defaults (the sweep flags are the command's)."""
    from probe.cli import main

    out = tmp_path / "cli.parquet"
    assert main(["label", "--model", str(checkpoints), "--revisions", "step-0,step-6", "--examples", "8",
                 "--out", str(out)]) == 0
    assert list(pd.read_parquet(out)["step"].unique()) == [0, 6]


@pytest.mark.browser
def test_png_without_kaleido_is_a_chromium_screenshot(tmp_path, monkeypatch):
    import shutil
    import sys

    if not (shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")):
        pytest.skip("no Chromium on PATH")
    monkeypatch.setitem(sys.modules, "kaleido", None)  # as if kaleido were not installed
    table = pd.DataFrame({"checkpoint": ["a", "b"], "step": [0, 5], "head_name": ["L0H0"] * 2,
                          "head_type": ["previous_token"] * 2, "score": [0.1, 0.9], "ci_low": [0.0, 0.8],
                          "ci_high": [0.2, 1.0], "chance": [0.1, 0.1], "label": [False, True]})
    from probe.runs.export import save_figure

    written = save_figure(sweep_figure(table), tmp_path / "f.png")
    assert written == [tmp_path / "f.html", tmp_path / "f.png"]
    assert ((tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
            and (tmp_path / "f.png").stat().st_size > 10_000)
