"""`probe label` end to end: the hand-set GPT-2 gets exactly its planted labels; several models go into one table,
written per model so an interrupted run resumes with the unfinished models only; bad input exits 2 in one line."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

import probe.commands.label as label_command
from probe.classify import COLUMNS
from probe.cli import main
from probe.planted import PLANTED_HEADS, save_planted_gpt2

FAST = ["--examples", "8", "--bootstrap", "100"]


@pytest.fixture(scope="module")
def planted_dir(tmp_path_factory):
    return str(save_planted_gpt2(tmp_path_factory.mktemp("planted")))


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
    assert "induction: 0 of 8 heads" in err


def test_two_models_one_table_and_resume_after_an_interrupt(planted_dir, tiny_dir, tmp_path, capsys, monkeypatch):
    second = str(tiny_dir("gpt2", seed=5))
    out = tmp_path / "labels.parquet"
    argv = ["label", "--model", planted_dir, "--model", second, "--types", "previous_token,induction",
            "--out", str(out), *FAST]
    real = label_command.label_model
    calls = []

    def interrupted(loaded, config, progress=None):
        calls.append(loaded.name)
        if loaded.name == second:
            raise KeyboardInterrupt  # Ctrl-C while the second model runs
        return real(loaded, config, progress)

    monkeypatch.setattr(label_command, "label_model", interrupted)
    code, _, err = run_cli(argv, capsys)
    assert code == 130 and "interrupted" in err
    assert calls == [planted_dir, second]
    first = pd.read_parquet(out)
    assert set(first["model"]) == {planted_dir} and len(first) == 2 * 4 * 2

    calls.clear()

    def counted(loaded, config, progress=None):
        calls.append(loaded.name)
        return real(loaded, config, progress)

    monkeypatch.setattr(label_command, "label_model", counted)
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    assert calls == [second]  # the finished model is not redone
    assert f"{planted_dir} is already in" in err
    table = pd.read_parquet(out)
    assert list(table["model"].unique()) == [planted_dir, second] and len(table) == 2 * 16
    pd.testing.assert_frame_equal(table[table["model"] == planted_dir], first)

    calls.clear()
    code, _, err = run_cli([*argv, "--force"], capsys)
    assert code == 0 and calls == [planted_dir, second]
    assert len(pd.read_parquet(out)) == 2 * 16  # replaced, not appended


def test_a_crash_keeps_the_finished_models(planted_dir, tiny_dir, tmp_path, capsys, monkeypatch):
    second = str(tiny_dir("gpt2", seed=6))
    out = tmp_path / "labels.json"
    real = label_command.label_model

    def crash(loaded, config, progress=None):
        if loaded.name == second:
            raise RuntimeError("disk on fire")
        return real(loaded, config, progress)

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
    probe_file.write_text(json.dumps({"text": text, "query": [22, 25], "target": [0, 4], "distractors": [[9, 13]]})
                          + "\n")
    code, out, err = run_cli(["label", "--model", planted_dir, "--types", "coreference", "--probe-file",
                              str(probe_file), *FAST], capsys)
    assert code == 0, err
    table = pd.read_csv(io.StringIO(out))
    assert table["n_examples"].eq(1).all() and table["baseline_accuracy"].eq(0.0).all()  # "john" is nearer


@pytest.mark.parametrize("extra, message", [
    (["--types", "previous_token,inducton"], "unknown head type 'inducton'"),
    (["--seq-len", "4096"], "--seq-len 4096 is beyond"),
    (["--out", "labels.xlsx"], "the extension must be one of .parquet, .csv, .json"),
    (["--examples", "0"], "--examples must be at least 1"),
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
])
def test_bad_probe_files_exit_2_with_the_line(planted_dir, tmp_path, capsys, content, message):
    probe_file = tmp_path / "p.jsonl"
    probe_file.write_text(content)
    code, _, err = run_cli(["label", "--model", planted_dir, "--probe-file", str(probe_file)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err


def test_probe_file_needs_the_coreference_type(planted_dir, tmp_path, capsys):
    probe_file = tmp_path / "p.jsonl"
    probe_file.write_text('{"text": "a b", "query": [2, 3], "target": [0, 1]}\n')
    code, _, err = run_cli(["label", "--model", planted_dir, "--types", "induction", "--probe-file",
                            str(probe_file)], capsys)
    assert code == 2 and "add coreference to --types" in err


def test_an_existing_out_that_is_not_a_label_table(planted_dir, tmp_path, capsys):
    out = tmp_path / "other.csv"
    out.write_text("x,y\n1,2\n")
    code, _, err = run_cli(["label", "--model", planted_dir, "--out", str(out), *FAST], capsys)
    assert code == 2 and "not a probe label table" in err
    code, _, err = run_cli(["label", "--model", planted_dir, "--types", "self", "--out", str(out), "--force",
                            *FAST], capsys)
    assert code == 0 and set(pd.read_csv(out)["head_type"]) == {"self"}
