"""probe.runs.runner: every batch path is one runner, so they agree (issue 17's measured disagreements, as
tests).

* the identity of a model is the same on every path: `probe label --model A`, then `--models-file F(A)` reuses
  A and says so in one line;
* rows of models a run does not name are kept through every path (plain, several models, --models-file,
  --revisions, and Ray in test_distributed);
* a failing unit is listed in OUT.errors.csv by every path (label plain, models file, revisions, contacts)
  while the others are done;
* every file written has the mode a plain open() gives (0o666 minus the umask), the journal's too;
* a same-size weight swap that keeps the timestamp (`cp -p`) recomputes (issue 22).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import probe.runs.tasks as tasks
from probe.cli import main
from probe.errors import ProbeError
from probe.runs.runner import InProcess, Out, Unit, UnitOutput, errors_path, run

FAST = ["--types", "previous_token", "--examples", "4", "--bootstrap", "20", "--ablate", "none",
        "--seq-len", "16"]


@pytest.fixture(scope="module")
def models_dir(tiny_dir):
    """Three tiny GPT-2 directories (A, B, C: same shapes, other seeds) and a corrupt copy of A."""
    a, b, c = (str(tiny_dir("gpt2", seed=seed)) for seed in (11, 12, 13))
    return {"A": a, "B": b, "C": c}


@pytest.fixture
def counted(monkeypatch):
    """The models label_model was called on, in order (the task's computation, in-process)."""
    calls: list[str] = []
    real = tasks.label_model

    def label_model(loaded, config, progress=None, note=None, **keywords):
        calls.append(loaded.name)
        return real(loaded, config, progress, note, **keywords)

    monkeypatch.setattr(tasks, "label_model", label_model)
    return calls


def label(argv, capsys):
    code = main(["label", *argv, *FAST])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def corrupt_copy(source: str, target: Path) -> str:
    shutil.copytree(source, target)
    weights = target / "model.safetensors"
    weights.write_bytes(b"\0" * weights.stat().st_size)
    return str(target)


def test_identity_is_the_same_on_every_path(models_dir, tmp_path, capsys, counted):
    a = models_dir["A"]
    out = tmp_path / "t.csv"
    code, _, err = label(["--model", a, "--out", str(out)], capsys)
    assert code == 0 and counted == [a], err
    listing = tmp_path / "models.txt"
    listing.write_text(f"# the same model\n{a}\n")
    counted.clear()
    code, _, err = label(["--models-file", str(listing), "--out", str(out)], capsys)
    assert code == 0 and counted == [], err  # nothing recomputed
    lines = [line for line in err.splitlines() if "reused" in line]
    assert len(lines) == 1 and f"reused {a} from {out}" in lines[0] and "recomputing" not in err
    # and back: the plain path reuses what the models-file path recorded
    code, _, err = label(["--model", a, "--out", str(out)], capsys)
    assert code == 0 and counted == [] and f"reused {a}" in err


def test_other_models_rows_are_kept_through_every_path(models_dir, tmp_path, capsys, counted):
    a, b, c = models_dir["A"], models_dir["B"], models_dir["C"]
    out = tmp_path / "t.parquet"
    assert label(["--model", b, "--out", str(out)], capsys)[0] == 0
    rows_b = pd.read_parquet(out)
    assert set(rows_b["model"]) == {b} and len(rows_b) == 8

    def rows_of(model):
        table = pd.read_parquet(out)
        return table[table["model"] == model]

    assert label(["--model", a, "--out", str(out)], capsys)[0] == 0  # plain
    assert set(pd.read_parquet(out)["model"]) == {a, b} and len(rows_of(b)) == 8
    assert label(["--model", a, "--model", c, "--out", str(out)], capsys)[0] == 0  # several
    assert set(pd.read_parquet(out)["model"]) == {a, b, c} and len(pd.read_parquet(out)) == 24
    listing = tmp_path / "models.txt"
    listing.write_text(f"{c}\n")
    assert label(["--models-file", str(listing), "--out", str(out)], capsys)[0] == 0  # a models file
    table = pd.read_parquet(out)
    assert set(table["model"]) == {a, b, c} and len(table) == 24
    pd.testing.assert_frame_equal(rows_of(b).reset_index(drop=True)[rows_b.columns], rows_b)
    assert table.loc[table["model"] == c, "checkpoint"].eq(Path(c).name).all()


def test_revisions_keep_other_checkpoints_and_models(models_dir, tmp_path, capsys):
    """--revisions of a folder of checkpoints: a later run of one revision keeps the other revisions' rows."""
    base = tmp_path / "run"
    base.mkdir()
    for name, source in (("step-0", models_dir["A"]), ("step-5", models_dir["B"])):
        shutil.copytree(source, base / name)
    out = tmp_path / "sweep.csv"
    assert label(["--model", str(base), "--revisions", "step-0,step-5", "--out", str(out)], capsys)[0] == 0
    first = pd.read_csv(out)
    assert list(first["checkpoint"].unique()) == ["step-0",
                                                  "step-5"] and list(first["step"].unique()) == [0, 5]
    code, _, err = label(
        ["--model", str(base), "--revisions", "step-5", "--out", str(out), "--seed", "1"], capsys)
    assert code == 0, err
    table = pd.read_csv(out)
    assert len(table) == 16 and set(table.loc[table["checkpoint"] == "step-0", "seed"]) == {0}
    assert set(table.loc[table["checkpoint"] == "step-5", "seed"]) == {1}


@pytest.mark.parametrize("path", ["plain", "models-file", "revisions"])
def test_every_label_path_lists_a_failing_unit_and_goes_on(path, models_dir, tmp_path, capsys):
    good = models_dir["A"]
    out = tmp_path / "t.csv"
    if path == "revisions":
        base = tmp_path / "run"
        base.mkdir()
        shutil.copytree(good, base / "step-0")
        corrupt_copy(good, base / "step-1")
        argv, failing = ["--model", str(base), "--revisions", "step-1,step-0"], f"{base}@step-1"
    else:
        bad = corrupt_copy(good, tmp_path / "corrupt")
        if path == "plain":
            argv = ["--model", bad, "--model", good]
        else:
            listing = tmp_path / "models.txt"
            listing.write_text(f"{bad}\n{good}\n")
            argv = ["--models-file", str(listing)]
        failing = bad
    code, _, err = label([*argv, "--out", str(out)], capsys)
    assert code == 2, err
    errors = pd.read_csv(errors_path(out))
    assert list(errors["unit"]) == [failing] and list(errors["kind"]) == ["input"]
    assert "cannot load the weights" in errors["error"].iloc[0]
    assert f"{failing}: failed: cannot load the weights" in err and f"listed in {errors_path(out)}" in err
    assert len(pd.read_csv(out)) == 8  # the good unit, labelled after the failing one
    # fixed: the rerun computes the failed unit only, and the errors file goes away
    fixed = Path(failing.split("@")[0]) / "step-1" if path == "revisions" else Path(failing)
    shutil.copy(Path(good) / "model.safetensors", fixed / "model.safetensors")
    code, _, err = label([*argv, "--out", str(out)], capsys)
    assert code == 0 and not errors_path(out).exists() and len(pd.read_csv(out)) == 16


def test_contacts_lists_a_failing_unit_and_goes_on(tiny_dir, tmp_path, capsys, monkeypatch):
    import probe.proteins.sets as contact_sets

    fasta = tmp_path / "set.fa"
    fasta.write_text(">a\nMKTAYIAKQRQISFVKSHFSRQ\n>b\nMKTAYIAKQRQISFVKSHFSRQLEERLGL\n>c\nMKTAYIAKQRQ\n")
    real = contact_sets.analyse_unit

    def analyse(loaded, spec, options):
        if spec.id == "b":
            raise ProbeError("b: an unreadable record")
        return real(loaded, spec, options)

    monkeypatch.setattr(contact_sets, "analyse_unit", analyse)
    heads = tmp_path / "heads.parquet"
    code = main(
        ["contacts", "--model", str(tiny_dir("esm")), "--fasta", str(fasta), "--heads-out", str(heads)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert set(pd.read_parquet(heads)["id"]) == {"a", "c"}
    errors = pd.read_csv(errors_path(heads))
    assert list(errors["unit"]) == ["1:b"] and list(errors["error"]) == ["b: an unreadable record"]


def test_files_get_the_mode_of_a_plain_open(models_dir, tmp_path, capsys):
    old = os.umask(0o027)
    try:
        out = tmp_path / "t.csv"
        bad = corrupt_copy(models_dir["A"], tmp_path / "corrupt")
        assert label(["--model", bad, "--model", models_dir["A"], "--out", str(out)], capsys)[0] == 2
        parts = [p for p in (tmp_path / ".t.csv.parts").iterdir()]
        assert parts and not [p for p in parts if p.name.startswith(".")]  # no temporary file left
        for path in [out, errors_path(out), *parts]:
            assert path.stat().st_mode & 0o777 == 0o640, path
    finally:
        os.umask(old)


def test_same_size_weight_swap_keeping_the_timestamp_recomputes(models_dir, tmp_path, capsys, counted):
    """Issue 22: `cp -p` of another checkpoint of the same size over the weights, timestamp kept: recomputed,
    in the same process too (the in-process hash cache is keyed by the change time and inode as well)."""
    model = tmp_path / "model"
    shutil.copytree(models_dir["A"], model)
    weights = model / "model.safetensors"
    other = Path(models_dir["B"]) / "model.safetensors"
    assert weights.stat().st_size == other.stat().st_size
    out = tmp_path / "t.csv"
    assert label(["--model", str(model), "--out", str(out)], capsys)[0] == 0
    before = pd.read_csv(out)
    stamp = weights.stat()
    with open(other, "rb") as source, open(weights, "r+b") as target:  # cp -p: in place, then the old times
        target.write(source.read())
    os.utime(weights, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert weights.stat().st_mtime_ns == stamp.st_mtime_ns and weights.stat().st_size == stamp.st_size
    counted.clear()
    code, _, err = label(["--model", str(model), "--out", str(out)], capsys)
    assert code == 0 and counted == [str(model)] and "recomputing" in err, err
    after = pd.read_csv(out)
    assert after["revision"].iloc[0] != before["revision"].iloc[0]
    fresh = tmp_path / "fresh.csv"
    assert label(["--model", models_dir["B"], "--out", str(fresh)], capsys)[0] == 0
    expected = pd.read_csv(fresh)
    pd.testing.assert_frame_equal(after.drop(columns=["model"]), expected.drop(columns=["model"]))


class Doubler:
    """A task without a model: the unit's payload times the group, one row per unit."""

    def identity(self, unit):
        return f"v1-{unit.payload}"

    def load(self, group):
        return group

    def compute(self, state, unit):
        if unit.payload < 0:
            raise ValueError("negative")
        return UnitOutput(table=pd.DataFrame({"unit": [unit.key], "value": [state * unit.payload]}))

    def rows(self, unit, result):
        return result.table

    def owners(self, table):
        return table["unit"]


def table_out(path: Path, **kwargs) -> Out:
    return Out(path=path, write=lambda table, finished: {path: lambda tmp: table.to_csv(tmp, index=False)},
               read=lambda: pd.read_csv(path), **kwargs)


def test_runner_reuses_keeps_and_reports(tmp_path, capsys):
    out = tmp_path / "v.csv"
    pd.DataFrame({"unit": ["other"], "value": [7]}).to_csv(out, index=False)  # a row of a unit not in the run
    units = [Unit("a", 2, 1), Unit("b", 2, -1), Unit("c", 3, 5)]
    report = run(units, Doubler(), table_out(out), progress=False)
    assert report.code == 1 and [r.key for r in report.results if not r.ok] == ["b"]
    assert pd.read_csv(out).to_dict("list") == {"unit": ["other", "a", "c"], "value": [7, 2, 15]}
    assert list(pd.read_csv(errors_path(out))["kind"]) == ["internal"]
    again = run(units[::2], Doubler(), table_out(out), progress=False)
    assert again.reused == ["a", "c"] and again.computed == [] and again.code == 0
    assert "nothing to do" in capsys.readouterr().err


def test_a_single_failing_unit_is_the_runs_error(tmp_path):
    out = tmp_path / "v.csv"
    with pytest.raises(ValueError, match="negative"):
        run([Unit("b", 2, -1)], Doubler(), table_out(out), progress=False)
    assert list(tmp_path.iterdir()) == []  # nothing written, not even errors.csv


def test_duplicate_unit_keys_are_refused():
    with pytest.raises(ProbeError, match="given twice"):
        run([Unit("a", 1, 1), Unit("a", 1, 2)], Doubler(), executor=InProcess(), progress=False)


def test_atomic_writer_leaves_the_old_file_on_error(tmp_path):
    from probe.runs.atomic import write_atomically

    path = tmp_path / "x.csv"
    path.write_text("old\n")

    def fail(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, fail)
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["x.csv"]


class Together(Doubler):
    """Doubler whose units wait for each other: both runs have read the earlier table before either
    writes (the race of issue 44, escape 2, made certain)."""

    def __init__(self, barrier):
        self.barrier = barrier

    def compute(self, state, unit):
        self.barrier.wait(timeout=30)
        return super().compute(state, unit)


def test_two_runs_into_one_output_keep_each_others_rows(tmp_path):
    """Two runs started together into one output (issue 44, escape 2: the second overwrote the first's rows):
    the writer lock and the re-read at every rewrite keep both; ten times in a row."""
    import threading

    for attempt in range(10):
        out = tmp_path / f"v{attempt}.csv"
        pd.DataFrame({"unit": ["other"], "value": [7]}).to_csv(out, index=False)
        barrier = threading.Barrier(2)
        reports = {}

        def go(key, payload, barrier=barrier, out=out, reports=reports):
            reports[key] = run([Unit(key, 2, payload)], Together(barrier), table_out(out), progress=False)

        threads = [threading.Thread(target=go, args=(key, payload)) for key, payload in (("a", 1), ("b", 5))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert {key: report.code for key, report in reports.items()} == {"a": 0, "b": 0}
        table = pd.read_csv(out).sort_values("unit")
        assert table.to_dict("list") == {"unit": ["a", "b", "other"], "value": [2, 10, 7]}, attempt
