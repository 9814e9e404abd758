"""`probe label` end to end: the hand-set GPT-2 gets exactly its planted labels; several models go into one
table, written per model so an interrupted run resumes with the unfinished models only; bad input exits 2 in
one line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

import probe.runs.tasks as label_command  # the label task calls label_model from here
from probe.cli import main
from probe.heads.tables import COLUMNS
from probe.zoo.planted import PLANTED_HEADS

FAST = ["--examples", "8", "--bootstrap", "100", "--ablate", "none"]


def run_cli(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_label_finds_exactly_the_planted_heads(planted_dir, tmp_path, capsys):
    out = tmp_path / "labels.csv"
    code, _, err = run_cli(["label", "--model", planted_dir, "--examples", "16", "--out", str(out)], capsys)
    assert code == 0, err
    table = pd.read_csv(out)
    assert list(table.columns) == COLUMNS
    labelled = {(row.layer, row.head): row.head_type for row in table[table["label"]].itertuples()}
    assert labelled == PLANTED_HEADS
    assert "previous_token: 1 of 8 heads (L0H0)" in err and "first_token: 1 of 8 heads (L1H2)" in err
    assert "fixed_offset: 0 of 8 heads" in err
    assert "induction: 0 of 8 heads" in err


def test_two_models_one_table_and_resume_after_an_interrupt(planted_dir, tiny_dir, tmp_path,
                                                            capsys, monkeypatch):
    second = str(tiny_dir("gpt2", seed=5))
    out = tmp_path / "labels.parquet"
    argv = ["label", "--model", planted_dir, "--model", second, "--types", "previous_token,induction",
            "--out", str(out), *FAST]
    real = label_command.label_model
    calls = []

    def interrupted(loaded, config, progress=None, note=None, **keywords):
        calls.append(loaded.name)
        if loaded.name == second:
            raise KeyboardInterrupt  # Ctrl-C while the second model runs
        return real(loaded, config, progress, note, **keywords)

    monkeypatch.setattr(label_command, "label_model", interrupted)
    code, _, err = run_cli(argv, capsys)
    assert code == 130 and "interrupted" in err
    assert calls == [planted_dir, second]
    first = pd.read_parquet(out)
    assert set(first["model"]) == {planted_dir} and len(first) == 2 * 4 * 2

    calls.clear()

    def counted(loaded, config, progress=None, note=None, **keywords):
        calls.append(loaded.name)
        return real(loaded, config, progress, note, **keywords)

    monkeypatch.setattr(label_command, "label_model", counted)
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    assert calls == [second]  # the finished model is not redone
    assert f"reused {planted_dir} from" in err
    table = pd.read_parquet(out)
    assert list(table["model"].unique()) == [planted_dir, second] and len(table) == 2 * 16
    pd.testing.assert_frame_equal(table[table["model"] == planted_dir], first)

    calls.clear()
    code, _, err = run_cli([*argv, "--force"], capsys)
    assert code == 0 and calls == [planted_dir, second]
    assert len(pd.read_parquet(out)) == 2 * 16  # replaced, not appended

    # another seed: nothing is reused, and a line says why
    calls.clear()
    code, _, err = run_cli([*argv, "--seed", "3"], capsys)
    assert code == 0 and calls == [planted_dir, second]
    assert (f"recomputing {planted_dir}, {second}: 2 model(s) whose options, model revision or input files "
            "differ") in err
    assert set(pd.read_parquet(out)["seed"]) == {3}


def test_rerun_with_other_types_recomputes_instead_of_skipping(planted_dir, tmp_path, capsys):
    out = tmp_path / "r.csv"
    code, _, err = run_cli(["label", "--model", planted_dir, "--types", "previous_token", "--out", str(out),
                            *FAST],
                           capsys)
    assert code == 0
    code, _, err = run_cli(["label", "--model", planted_dir, "--types", "induction", "--out", str(out),
                            *FAST],
                           capsys)
    assert code == 0 and "recomputing" in err
    assert set(pd.read_csv(out)["head_type"]) == {"induction"}
    code, _, err = run_cli(["label", "--model", planted_dir, "--types", "induction", "--out", str(out),
                            *FAST],
                           capsys)
    assert code == 0 and "nothing to do" in err and f"reused {planted_dir}" in err


def test_a_crash_keeps_the_finished_models(planted_dir, tiny_dir, tmp_path, capsys, monkeypatch):
    second = str(tiny_dir("gpt2", seed=6))
    out = tmp_path / "labels.json"
    real = label_command.label_model

    def crash(loaded, config, progress=None, note=None, **keywords):
        if loaded.name == second:
            raise RuntimeError("disk on fire")
        return real(loaded, config, progress, note, **keywords)

    monkeypatch.setattr(label_command, "label_model", crash)
    code, _, err = run_cli(["label", "--model", planted_dir, "--model", second, "--types", "self",
                            "--out", str(out), *FAST], capsys)
    assert code == 1 and "disk on fire" in err
    records = json.loads(out.read_text())
    assert {record["model"] for record in records} == {planted_dir}


def test_without_out_the_table_goes_to_stdout(planted_dir, capsys):
    code, out, err = run_cli(["label", "--model", planted_dir, "--types", "first_token", *FAST], capsys)
    assert code == 0, err
    table = pd.read_csv(io.StringIO(out))
    assert list(table.columns) == COLUMNS and len(table) == 8
    assert table.loc[table["label"], "head_name"].tolist() == ["L1H2"]


def test_probe_file_is_scored_as_coreference(planted_dir, tmp_path, capsys):
    probe_file = tmp_path / "mine.jsonl"
    text = "mary saw john because she left"
    probe_file.write_text(json.dumps(
        {"text": text, "query": [22, 25], "target": [0, 4], "distractors": [[9, 13]]})
                          + "\n")
    code, out, err = run_cli(["label", "--model", planted_dir, "--types", "coreference", "--probe-file",
                              str(probe_file), *FAST], capsys)
    assert code == 0, err
    table = pd.read_csv(io.StringIO(out))
    assert table["n_examples"].eq(1).all() and table["probe_set"].eq("file").all()
    # "john" is nearer (the nearest baseline is wrong), "mary" first (the first-mention one is right): best =
    # first
    assert table["baseline"].eq("first").all() and table["baseline_accuracy"].eq(1.0).all()


@pytest.mark.parametrize("extra, message", [
    (["--types", "previous_token,inducton"], "unknown head type 'inducton'"),
    (["--seq-len", "4096"], "--seq-len 4096 is beyond"),
    (["--out", "labels.xlsx"], "the extension must be one of .parquet, .csv, .json"),
    (["--examples", "0"], "--examples must be at least 1"),
    (["--seq-len", "64,x"], "bad --seq-len '64,x'"),
    (["--fdr", "nan"], "--fdr nan must be between 0 and 1"),
    (["--min-effect", "nan"], "--min-effect nan must be between -1 and 1"),
])
def test_bad_input_exits_2_with_one_line(planted_dir, tmp_path, capsys, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["label", "--model", planted_dir, *extra], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


@pytest.mark.parametrize("content, message", [
    ("\n\n", "is empty"),
    ('{"text": "a b", "query": [2, 3], "target": [0, 1]}\n{"text": "a b", "query": [2, 3]}\n',
     "line 2: missing target"),
    ('{"text": "a b", "query": [2, 3], "target": [0, 1]}\nnot json\n', "line 2: not valid JSON"),
    ('{"text": "a b", "query": [2, 3], "target": [0, 1]}\n{"text": "a b", "target": [0, 1]}\n',
     "line 2: missing query"),
])
def test_bad_probe_files_exit_2_with_the_line(planted_dir, tmp_path, capsys, content, message):
    probe_file = tmp_path / "p.jsonl"
    probe_file.write_text(content)
    code, _, err = run_cli(["label", "--model", planted_dir, "--probe-file", str(probe_file)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err


def test_non_utf8_probe_file_is_one_line_naming_the_line(planted_dir, tmp_path, capsys):
    probe_file = tmp_path / "p.jsonl"
    probe_file.write_bytes(b'{"text": "a b", "query": [2, 3], "target": [0, 1]}\n{"text": "caf\xe9 b"}\n')
    code, _, err = run_cli(["label", "--model", planted_dir, "--probe-file", str(probe_file)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "line 2: not UTF-8" in err


def test_probe_file_needs_the_coreference_type(planted_dir, tmp_path, capsys):
    probe_file = tmp_path / "p.jsonl"
    probe_file.write_text('{"text": "a b", "query": [2, 3], "target": [0, 1]}\n')
    code, _, err = run_cli(["label", "--model", planted_dir, "--types", "induction", "--probe-file",
                            str(probe_file)], capsys)
    assert code == 2 and "add coreference to --types" in err


def test_an_existing_out_that_is_not_a_label_table(planted_dir, tmp_path, capsys):
    header = tmp_path / "people.csv"
    header.write_text("name,age\n")  # a foreign CSV with only a header is refused too, never overwritten
    code, _, err = run_cli(["label", "--model", planted_dir, "--out", str(header), *FAST], capsys)
    assert code == 2 and "not a probe label table" in err and header.read_text() == "name,age\n"
    assert "--force to overwrite" in err  # an output: the fix is another --out or --force
    out = tmp_path / "other.csv"
    out.write_text("x,y\n1,2\n")
    code, _, err = run_cli(["label", "--model", planted_dir, "--out", str(out), *FAST], capsys)
    assert code == 2 and "not a probe label table" in err
    code, _, err = run_cli(["label", "--model", planted_dir, "--types", "self", "--out", str(out), "--force",
                            *FAST], capsys)
    assert code == 0 and set(pd.read_csv(out)["head_type"]) == {"self"}


def test_sigkill_after_the_first_model_then_rerun_equals_an_uninterrupted_run(planted_dir,
                                                                              tiny_dir, tmp_path):
    """A real `probe label` subprocess killed with SIGKILL once the first model is in the journal; the rerun
    reuses it, computes the second, and ends with the same table as a run that was never interrupted."""
    import os
    import signal
    import subprocess
    import sys
    import time

    second = str(tiny_dir("gpt2", seed=7))
    base = [sys.executable, "-m", "probe.cli", "label", "--model", planted_dir, "--model", second,
            "--types", "previous_token,self", "--examples", "64", "--bootstrap", "100", "--ablate", "none",
            "--batch-size", "1"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    killed = tmp_path / "killed.parquet"
    process = subprocess.Popen([*base, "--out", str(killed)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    parts = tmp_path / ".killed.parquet.parts"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if killed.exists() and parts.is_dir() and any(p.suffix == ".npz" and not p.name.startswith(".")
                                                      for p in parts.iterdir()):
            break
        time.sleep(0.02)
    assert process.poll() is None, "the run finished before it could be killed: make it longer"
    process.send_signal(signal.SIGKILL)
    process.wait()
    interrupted = pd.read_parquet(killed)
    assert set(interrupted["model"]) == {planted_dir}  # the finished model survived the kill
    rerun = subprocess.run([*base, "--out", str(killed)], env=env, capture_output=True,
                           text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert f"reused {planted_dir}" in rerun.stderr
    fresh = tmp_path / "fresh.parquet"
    once = subprocess.run([*base, "--out", str(fresh)], env=env, capture_output=True, text=True, timeout=600)
    assert once.returncode == 0, once.stderr
    pd.testing.assert_frame_equal(pd.read_parquet(killed), pd.read_parquet(fresh))


def test_two_label_runs_started_together_into_one_out_keep_both_models(planted_dir, tiny_dir, tmp_path):
    """Issue 44, escape 2: two `probe label` processes on different models into one --out, started at once
    (the second overwrote the first's rows): both models' rows are in the table. Each process runs the
    command into three outputs in turn (three races for one interpreter start each)."""
    import os
    import subprocess
    import sys

    other = str(tiny_dir("gpt2", seed=3))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    outs = [str(tmp_path / f"both{attempt}.csv") for attempt in range(3)]
    # each process, once imported, waits for the other: the runs start together
    script = ("import os, sys, time\nfrom probe.cli import main\nready = sys.argv[2] + '.ready'\n"
              "open(ready + str(os.getpid()), 'w').close()\nend = time.time() + 120\n"
              "while len([p for p in os.listdir(os.path.dirname(ready)) if '.ready' in p]) < 2 "
              "and time.time() < end:\n    time.sleep(0.01)\n"
              "for out in sys.argv[2:]:\n"
              "    code = main(['label', '--model', sys.argv[1], '--out', out, '--types', 'previous_token', "
              "'--examples', '2', '--bootstrap', '20', '--ablate', 'none', '--seq-len', '8'])\n"
              "    assert code == 0, code\n")
    runs = [subprocess.Popen([sys.executable, "-c", script, model, *outs], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for model in (planted_dir, other)]
    for process in runs:
        _, err = process.communicate(timeout=180)
        assert process.returncode == 0, err
    for out in outs:
        assert set(pd.read_csv(out)["model"]) == {planted_dir, other}, out
