"""`probe contacts` end to end on a tiny local ESM model."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probe import models
from probe.cli import main
from probe.proteins.contacts import head_attention_map, predict_contacts
from probe.proteins.features import ResidueFeatures
from probe.proteins.precision import precision_by_range, precision_columns
from probe.proteins.structure import contact_map, read_structure, secondary_structure
from tests.proteins.test_structure import SEQ, line_chain, write


@pytest.fixture()
def esm(tiny_dir):
    return str(tiny_dir("esm", seed=1))


@pytest.fixture()
def line_pdb(tmp_path):
    return write(tmp_path, "line.pdb", line_chain(SEQ * 3, first_id=5))


def test_sequence_to_npz(esm, tmp_path, capsys):
    out = tmp_path / "c.npz"
    assert main(["contacts", "--model", esm, "--sequence", SEQ.lower(), "--out", str(out)]) == 0
    with np.load(out) as data:
        assert list(data["ids"]) == ["sequence"] and list(data["sequences"]) == [SEQ]
        expected = predict_contacts(models.load(esm), SEQ).contacts
        np.testing.assert_allclose(data["contacts_0"], expected, atol=1e-7)
        assert "true_contacts_0" not in data
    captured = capsys.readouterr()
    assert str(out) in captured.err and "sequence (12 residues)" in captured.out


def test_structure_alone_reads_the_sequence_and_reports_precision(esm, line_pdb, tmp_path, capsys):
    out, heads = tmp_path / "c.npz", tmp_path / "h.parquet"
    assert main(["contacts", "--model", esm, "--structure", line_pdb, "--out", str(out),
                 "--heads-out", str(heads)]) == 0
    structure = read_structure(line_pdb)
    assert not structure.ligands  # no ligand: binding is unknown (None -> NaN), not "no site"
    features = ResidueFeatures(contacts=contact_map(structure), binding=None,
                               secondary=secondary_structure(structure))
    with np.load(out) as data:
        assert list(data["sequences"]) == [SEQ * 3] and list(data["ids"]) == ["line_A"]
        np.testing.assert_array_equal(data["true_contacts_0"], contact_map(structure))
        result = predict_contacts(models.load(esm), SEQ * 3, true_map=contact_map(structure),
                                  features=features)
        expected = [[result.precision[f"p_at_{f}_{r}"] for f in ("L", "L2", "L5")]
                    for r in ("short", "medium", "long")]
        np.testing.assert_allclose(data["precision_0"], expected)
    table = pd.read_parquet(heads)
    assert len(table) == 2 * 4 and {"record", "id", "name", "weight", "logit_share", "far_contact_share",
                                     "far_background", "contact_share", "n_high", "contact_background",
                                     *precision_columns()} <= set(table.columns)
    pd.testing.assert_frame_equal(table.drop(columns=["record", "id"]), result.heads, check_dtype=False)
    assert "short: P@L" in capsys.readouterr().out


def test_fasta_batch_with_structure_aligns_every_record(esm, line_pdb, tmp_path, capsys):
    fasta = tmp_path / "in.fasta"
    fasta.write_text(f">construct tagged\nGSHM{SEQ * 3}\n>exact\n{SEQ}\n{SEQ}\n{SEQ}\n")
    out = tmp_path / "c.npz"
    assert main(
        ["contacts", "--model", esm, "--fasta", str(fasta), "--structure", line_pdb, "--out", str(out)]) == 0
    with np.load(out) as data:
        assert list(data["ids"]) == ["construct", "exact"] and list(data["lengths"]) == [40, 36]
        assert (data["true_contacts_0"][:4] == -1).all()
        np.testing.assert_array_equal(data["true_contacts_0"][4:, 4:], data["true_contacts_1"])
    captured = capsys.readouterr()
    assert "contacts" in captured.err  # tqdm progress bar on stderr
    assert captured.out.count("P@L/5") == 2 * 3


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--sequence", "MKXJ1"], "'J' at 4, '1' at 5"),
        (["--structure", "STRUCT", "--chain", "Q"], "no protein chain 'Q'"),
        (["--fasta", "EMPTY"], "no FASTA records"),
        (["--structure", "WATER"], "no protein chain"),
        (["--sequence", "M" * 1030], "takes at most 1022; shorten it or use --window"),
        (["--sequence", SEQ, "--out", "x.csv"], "extension"),
        (["--chain", "A", "--sequence", SEQ], "pass --structure"),
        ([], "give the input"),
        (["--sequence", SEQ, "--control", "untrained:x"], "--control 'untrained:x': K must be a whole"),
    ],
)
def test_bad_input_is_one_line_exit_2(esm, line_pdb, tmp_path, capsys, extra, message):
    (tmp_path / "empty.fasta").write_text("\n\n")
    water = write(tmp_path, "water.pdb",
                  ["HETATM    1  O   HOH W   1       0.000   0.000   0.000  1.00 10.00           O"])
    replace = {"STRUCT": line_pdb, "EMPTY": str(tmp_path / "empty.fasta"), "WATER": water}
    extra = [replace.get(item, item) for item in extra]
    assert main(["contacts", "--model", esm, *extra]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1 and "Traceback" not in error


def test_window_mode_for_a_too_long_sequence(tiny_dir, tmp_path):
    model = str(tiny_dir("esm", max_position_embeddings=22))  # 18 residues at most
    out = tmp_path / "w.npz"
    sequence = (SEQ * 3)[:30]
    assert main(["contacts", "--model", model, "--sequence", sequence]) == 2
    assert main(
        ["contacts", "--model", model, "--sequence", sequence, "--window", "18", "--out", str(out)]) == 0
    with np.load(out) as data:
        contacts = data["contacts_0"]
        assert contacts.shape == (30, 30) and np.isnan(contacts[0, 29]) and np.isfinite(contacts[0, 17])


def test_output_is_atomic_on_failure(esm, tmp_path):
    out = tmp_path / "c.npz"
    assert main(["contacts", "--model", esm, "--sequence", SEQ, "--out", str(out)]) == 0
    previous = out.read_bytes()
    assert main(["contacts", "--model", esm, "--sequence", "MKJ", "--out", str(out)]) == 2
    assert out.read_bytes() == previous and sorted(os.listdir(tmp_path)) == [".c.npz.parts", "c.npz"]


@pytest.mark.parametrize(("flag", "name", "content"), [("--out", "x.npz", b"PK\x03\x04 a zip, not an npz"),
                                                       ("--heads-out", "h.parquet", b"PAR1 nonsense"),
                                                       ("--chains-out", "c.parquet", None)])
def test_a_foreign_existing_output_is_not_overwritten(esm, tmp_path, capsys, flag, name, content):
    path = tmp_path / name
    if content is None:
        pd.DataFrame({"name": ["ann"], "age": [3]}).to_parquet(path)  # a real parquet, someone else's
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    assert main(["contacts", "--model", esm, "--sequence", SEQ, flag, str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert "exists but is not a probe contacts output; pass --force" in error and len(error.splitlines()) == 1
    assert path.read_bytes() == before
    assert main(["contacts", "--model", esm, "--sequence", SEQ, flag, str(path), "--force"]) == 0


def test_tables_as_csv_by_the_extension_equal_the_parquet_ones(esm, line_pdb, tmp_path, capsys):
    """--heads-out / --chains-out F.csv write the same table as .parquet (issue 44: only parquet was taken); a
    rerun overwrites its own csv, a foreign csv is refused, and a wrong extension is answered in one line."""
    arguments = ["contacts", "--model", esm, "--structure", line_pdb]
    assert main([*arguments, "--heads-out", str(tmp_path / "h.parquet"),
                 "--chains-out", str(tmp_path / "c.parquet")]) == 0
    assert main([*arguments, "--heads-out", str(tmp_path / "h.csv"),
                 "--chains-out", str(tmp_path / "c.csv")]) == 0
    for name in ("h", "c"):
        parquet, csv = pd.read_parquet(tmp_path / f"{name}.parquet"), pd.read_csv(tmp_path / f"{name}.csv")
        assert list(csv.columns) == list(parquet.columns) and len(csv) == len(parquet) > 0
        numeric = parquet.select_dtypes("number").columns
        np.testing.assert_allclose(csv[numeric].to_numpy(float), parquet[numeric].to_numpy(float), rtol=1e-6)
    assert main([*arguments, "--heads-out", str(tmp_path / "h.csv")]) == 0  # its own earlier output
    foreign = tmp_path / "mine.csv"
    foreign.write_text("name,age\nann,3\n")
    capsys.readouterr()
    assert main([*arguments, "--heads-out", str(foreign)]) == 2
    assert "exists but is not a probe contacts output" in capsys.readouterr().err
    assert foreign.read_text() == "name,age\nann,3\n"
    assert main([*arguments, "--heads-out", str(tmp_path / "h.tsv")]) == 2
    assert "the extension must be one of .parquet, .csv" in capsys.readouterr().err


def test_interrupted_fasta_batch_keeps_finished_records_and_resumes(esm, line_pdb, tmp_path, monkeypatch):
    """Ctrl-C after the first record: it is written; the rerun computes only the other two; the result equals
    an uninterrupted run's."""
    import probe.proteins.sets as contact_sets

    fasta = tmp_path / "in.fasta"
    fasta.write_text(f">a\n{SEQ * 3}\n>b\n{SEQ * 2}\n>c\n{SEQ}\n")
    arguments = ["contacts", "--model", esm, "--fasta", str(fasta), "--structure", line_pdb]
    full_out, full_heads = tmp_path / "full.npz", tmp_path / "full.parquet"
    assert main([*arguments, "--out", str(full_out), "--heads-out", str(full_heads)]) == 0

    calls = []
    real = contact_sets.analyse_unit

    def interrupted(loaded, spec, options):
        calls.append(spec.sequence)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(loaded, spec, options)

    out, heads = tmp_path / "c.npz", tmp_path / "h.parquet"
    monkeypatch.setattr(contact_sets, "analyse_unit", interrupted)
    assert main([*arguments, "--out", str(out), "--heads-out", str(heads)]) == 130
    with np.load(out) as data:
        assert list(data["ids"]) == ["a"] and "contacts_1" not in data
    assert set(pd.read_parquet(heads)["id"]) == {"a"}

    calls.clear()
    monkeypatch.setattr(contact_sets, "analyse_unit", lambda loaded, spec,
                        options: calls.append(spec.sequence)
                        or real(loaded, spec, options))
    assert main([*arguments, "--out", str(out), "--heads-out", str(heads)]) == 0
    assert calls == [SEQ * 2, SEQ]  # the first record was not recomputed
    with np.load(out) as data, np.load(full_out) as full:
        assert sorted(data.files) == sorted(full.files)
        for key in full.files:
            np.testing.assert_array_equal(data[key], full[key])
    pd.testing.assert_frame_equal(pd.read_parquet(heads), pd.read_parquet(full_heads))

    calls.clear()
    assert main([*arguments, "--out", str(out), "--heads-out", str(heads), "--force"]) == 0
    assert len(calls) == 3


# ------------------------------------------------------------------------------------------------------------
# Protein models without a contact regression; structure sets; run identity; SIGKILL; bad input
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture()
def protbert(tiny_dir):
    return str(tiny_dir("protbert", sharpness=17.0))


def test_protbert_structure_writes_per_head_precision_and_shares(protbert, structures_dir, tmp_path, capsys):
    ubiquitin = os.path.join(structures_dir, "pdb1ubi.pdb")
    out, heads = tmp_path / "c.npz", tmp_path / "h.parquet"
    assert main(["contacts", "--model", protbert, "--structure", ubiquitin, "--out", str(out),
                 "--heads-out", str(heads), "--min-count", "10", "--min-total", "10"]) == 0
    table = pd.read_parquet(heads)
    assert len(table) == 2 * 4 and table["p_at_L_long"].notna().all() and table["weight"].isna().all()
    assert table["contact_share"].notna().any() and table["n_high"].gt(0).all()
    # no ligand: unknown
    assert table["contact_count_share"].notna().any() and table["binding_share"].isna().all()
    loaded = models.load(protbert)
    structure = read_structure(ubiquitin)
    for row in table.itertuples():
        expected = precision_by_range(head_attention_map(loaded, structure.sequence, row.layer, row.head),
                                      contact_map(structure))
        assert row.p_at_L_long == pytest.approx(expected["p_at_L_long"])
    with np.load(out) as data:
        assert "contacts_0" not in data and "true_contacts_0" in data and "precision_0" not in data
    # random
    assert "no contact regression; no significant contact head (long range" in capsys.readouterr().out


def test_prott5_sequence_without_structure(tiny_dir, capsys):
    assert main(["contacts", "--model", str(tiny_dir("prott5")), "--sequence", SEQ]) == 0
    assert "per-head statistics need a structure" in capsys.readouterr().out


def _run_set(model, structures, directory, *extra):
    summary, chains = directory / "summary.parquet", directory / "chains.parquet"
    code = main(["contacts", "--model", model, "--structures", str(structures), "--heads-summary",
                 str(summary), "--chains-out", str(chains), "--min-count", "50", *extra])
    return code, summary, chains


def test_structure_set_writes_chain_table_and_head_summary(protbert, structures_dir, tmp_path):
    from probe.proteins.sets import HEAD_SUMMARY_COLUMNS, read_heads_summary

    code, summary_path, chains_path = _run_set(protbert, structures_dir, tmp_path)
    assert code == 0
    chains = pd.read_parquet(chains_path)
    assert chains["id"].tolist() == ["1aki_A", "pdb1ejg_A", "pdb1ubi_A"]
    assert chains["length"].tolist() == [129, 46, 76] and (chains["n_true_long"] > 0).all()
    assert chains["n_known_long"].tolist() == [sum(n - s for s in range(24, n)) for n in (129, 46, 76)]
    summary = read_heads_summary(summary_path)
    assert list(summary.columns) == list(HEAD_SUMMARY_COLUMNS) and len(summary) == 8
    assert summary.attrs["proteins"] == ["1aki_A", "pdb1ejg_A",
                                         "pdb1ubi_A"] and summary.attrs["min_count"] == 50
    assert (summary["n_proteins"] == 3).all()
    assert (summary["p_at_L_long_low"] <= summary["p_at_L_long"]).all()
    assert (summary["p_at_L_long"] <= summary["p_at_L_long_high"]).all()
    # provis' contact background (report_top_heads): over the known pairs 6 or more apart; ours over all L²
    # pairs
    background = chains["n_contact_pairs"].sum() / chains["n_known_pairs"].sum()
    assert summary["contact_background"].eq(background).all()
    background = chains["n_contact_pairs"].sum() / chains["n_pairs"].sum()
    assert summary["contact_background_all_pairs"].eq(background).all()
    # a list file gives the same set
    listing = tmp_path / "set.txt"
    listing.write_text("\n".join(os.path.join(structures_dir, name) for name in
                                 ("1aki.pdb", "pdb1ejg.pdb", "pdb1ubi.pdb")) + "\n# a comment\n")
    other = tmp_path / "list"
    other.mkdir()
    assert _run_set(protbert, listing, other)[0] == 0
    pd.testing.assert_frame_equal(read_heads_summary(other / "summary.parquet"), summary)
    # the untrained control (on by default) sets the bar; --control none leaves it unknown, the test the same
    assert summary["untrained_p99_L_long"].notna().all() and summary.attrs["control"] == 3
    bare = tmp_path / "bare"
    bare.mkdir()
    assert _run_set(protbert, structures_dir, bare, "--control", "none")[0] == 0
    without = read_heads_summary(bare / "summary.parquet")
    assert without["untrained_p99_L_long"].isna().all() and without.attrs["control"] == 0
    pd.testing.assert_series_equal(without["p_fwer_L_long"], summary["p_fwer_L_long"])


def test_chains_option_and_unreadable_files_in_a_set(protbert, structures_dir, tmp_path, capsys):
    import shutil

    folder = tmp_path / "set"
    folder.mkdir()
    shutil.copy(os.path.join(structures_dir, "pdb1ubi.pdb"), folder)
    (folder / "broken.pdb").write_text("not a structure\n")
    code, summary, chains = _run_set(protbert, folder, tmp_path)
    assert code == 2  # the broken file is reported, the good one is analysed
    assert "skipped" in capsys.readouterr().err and pd.read_parquet(chains)["id"].tolist() == ["pdb1ubi_A"]
    (folder / "broken.pdb").unlink()
    assert _run_set(protbert, folder, tmp_path, "--chains", "B")[0] == 2
    assert "none of the chains B" in capsys.readouterr().err


def test_rerun_reuses_only_identical_units(esm, line_pdb, tmp_path, capsys):
    """A rerun with another threshold, or a changed structure file, recomputes; the same command reuses."""
    import shutil

    structure = tmp_path / "s.pdb"
    shutil.copy(line_pdb, structure)
    out = tmp_path / "c.npz"
    arguments = ["contacts", "--model", esm, "--sequence", SEQ * 3, "--structure", str(structure),
                 "--out", str(out)]
    assert main(arguments) == 0
    capsys.readouterr()
    assert main(arguments) == 0
    assert "1 of 1 unit(s) already done" in capsys.readouterr().err
    assert main([*arguments, "--threshold", "9.5"]) == 0
    assert "recomputing 0:sequence: 1 unit(s) whose options" in capsys.readouterr().err
    with np.load(out) as data:
        np.testing.assert_array_equal(data["true_contacts_0"], contact_map(read_structure(line_pdb), 9.5))
    moved = read_structure(line_pdb)
    # the same residues, now 3 Å apart: the structure's hash changes and its contacts must be recomputed
    structure.write_text("\n".join(line_chain(SEQ * 3, first_id=5, spacing=3.0)) + "\nEND\n")
    assert main([*arguments, "--threshold", "9.5"]) == 0
    assert "recomputing 0:sequence: 1 unit(s) whose options" in capsys.readouterr().err
    with np.load(out) as data:
        expected = contact_map(read_structure(str(structure)), 9.5)
        np.testing.assert_array_equal(data["true_contacts_0"], expected)
        assert not np.array_equal(expected, contact_map(moved, 9.5))


def _subprocess_env():
    return dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), PYTHONUNBUFFERED="1")


def _kill_after_first_unit(command: list[str], parts: Path, total: int) -> int:
    """Start `probe` in a subprocess, SIGKILL it once the journal holds a finished unit; returns the units
    kept."""
    import signal
    import subprocess
    import sys
    import time

    process = subprocess.Popen([sys.executable, "-m", "probe.cli", *command], env=_subprocess_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def finished() -> int:  # unit files (a unit being written is a hidden .tmp- file until it is renamed)
        return len([p for p in parts.glob("*.npz") if not p.name.startswith(".")]) if parts.exists() else 0

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not finished() and process.poll() is None:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL, "the run ended before it could be killed"
    kept = finished()
    assert 1 <= kept < total
    return kept


def test_sigkill_mid_structure_set_then_rerun_equals_a_fresh_run(tiny_dir, structures_dir, tmp_path, capsys):
    from probe.proteins.sets import read_heads_summary

    # slower units: the kill lands mid-run
    model = str(tiny_dir("protbert", sharpness=17.0, num_hidden_layers=6))
    killed, fresh = tmp_path / "killed", tmp_path / "fresh"
    killed.mkdir(), fresh.mkdir()
    command = ["contacts", "--model", model, "--structures", structures_dir, "--min-count", "50",
               "--heads-summary", str(killed / "summary.parquet"), "--chains-out",
               str(killed / "chains.parquet")]
    # --chains-out comes first
    kept = _kill_after_first_unit(command, killed / ".chains.parquet.parts", total=3)
    assert not (killed / "summary.parquet").exists()
    assert main(command) == 0
    assert f"{kept} of 3 unit(s) already done" in capsys.readouterr().err
    assert _run_set(model, structures_dir, fresh)[0] == 0
    pd.testing.assert_frame_equal(read_heads_summary(killed / "summary.parquet"),
                                  read_heads_summary(fresh / "summary.parquet"))
    pd.testing.assert_frame_equal(pd.read_parquet(killed / "chains.parquet"),
                                  pd.read_parquet(fresh / "chains.parquet"))


def test_sigkill_mid_fasta_batch_keeps_finished_records(esm, tmp_path, capsys):
    fasta = tmp_path / "in.fasta"
    rng = np.random.default_rng(0)
    records = ["".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), size=60)) for _ in range(40)]
    fasta.write_text("".join(f">r{i}\n{sequence}\n" for i, sequence in enumerate(records)))
    out, full = tmp_path / "c.npz", tmp_path / "full.npz"
    command = ["contacts", "--model", esm, "--fasta", str(fasta), "--out", str(out)]
    kept = _kill_after_first_unit(command, tmp_path / ".c.npz.parts", total=40)
    assert main(command) == 0
    assert f"{kept} of 40 unit(s) already done" in capsys.readouterr().err
    assert main(["contacts", "--model", esm, "--fasta", str(fasta), "--out", str(full)]) == 0
    with np.load(out) as data, np.load(full) as expected:
        assert sorted(data.files) == sorted(expected.files)
        for key in expected.files:
            np.testing.assert_array_equal(data[key], expected[key])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--sequence", SEQ, "--threshold", "nan"], "--threshold nan must be a finite distance"),
        (["--sequence", SEQ, "--threshold", "inf"], "--threshold inf must be a finite distance"),
        (["--sequence", SEQ, "--threshold", "-3"], "must be a finite distance"),
        (["--sequence", SEQ, "--min-attention", "nan"], "--min-attention nan"),
        (["--sequence", SEQ, "--min-attention", "1.5"], "--min-attention 1.5"),
        (["--sequence", SEQ, "--min-count", "0"], "--min-count 0"),
        (["--sequence", SEQ, "--binding-distance", "nan"], "--binding-distance nan"),
        (["--sequence", SEQ, "--window", "0"], "--window 0 must be a positive"),
        (["--sequence", SEQ, "--window", "-10"], "--window -10 must be a positive"),
        (["--sequence", SEQ, "--window", "5000"], "--window 5000 must be between 1 and 1022"),
        (["--sequence", SEQ, "--device", "meta"], "meta holds no weights"),
        (["--sequence", SEQ, "--device", "mps"], "--device mps"),
        (["--fasta", "LATIN1"], "is not UTF-8 text"),
        (["--fasta", "BINARY"], "is a binary file"),
        (["--structures", "NOWHERE"], "does not exist"),
        (["--structures", "STRUCTS", "--chain", "A"], "use --chains"),
        (["--structure", "STRUCT", "--chains", "A"], "--chains selects chains of --structures"),
        (["--sequence", SEQ, "--out", "DIR.npz"], "is a folder"),
    ],
)
def test_more_bad_input_is_one_line_exit_2(esm, line_pdb, structures_dir, tmp_path, capsys, extra, message):
    (tmp_path / "latin1.fasta").write_bytes(b">r\nMKT\n>caf\xe9\nMKT\n")
    (tmp_path / "binary.fasta").write_bytes(b">r\x00\x01\nMKT\n")
    (tmp_path / "dir.npz").mkdir()
    replace = {"LATIN1": str(tmp_path / "latin1.fasta"), "BINARY": str(tmp_path / "binary.fasta"),
               "NOWHERE": str(tmp_path / "nowhere"), "STRUCTS": structures_dir, "STRUCT": line_pdb,
               "DIR.npz": str(tmp_path / "dir.npz")}
    extra = [replace.get(item, item) for item in extra]
    assert main(["contacts", "--model", esm, *extra]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1 and "Traceback" not in error
    assert "rerun" not in error


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_weights_are_one_line_exit_2(esm, tmp_path, capsys, damage):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(esm, model)
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 3] if damage == "truncate" else b"\x00garbage" * 10)
    assert main(["contacts", "--model", str(model), "--sequence", SEQ]) == 2
    error = capsys.readouterr().err.strip()
    assert "cannot load the weights" in error and len(error.splitlines()) == 1


@pytest.mark.ray
def test_structure_set_on_ray_equals_in_process(protbert, structures_dir, tmp_path):
    from probe.proteins.sets import read_heads_summary

    pytest.importorskip("ray")
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    local.mkdir(), on_ray.mkdir()
    assert _run_set(protbert, structures_dir, local)[0] == 0
    assert _run_set(protbert, structures_dir, on_ray, "--ray", "auto", "--ray-workers", "1")[0] == 0
    pd.testing.assert_frame_equal(read_heads_summary(on_ray / "summary.parquet"),
                                  read_heads_summary(local / "summary.parquet"))
    pd.testing.assert_frame_equal(pd.read_parquet(on_ray / "chains.parquet"),
                                  pd.read_parquet(local / "chains.parquet"))


def test_the_command_module_and_its_parser_import_nothing_heavy():
    """`probe contacts --help` pays for argparse only: the command imports torch, numpy and pandas inside
    run()."""
    import subprocess
    import sys

    code = ("import argparse, sys; import probe.commands.contacts as c; "
            "c.add_parser(argparse.ArgumentParser().add_subparsers()); "
            "print(sorted(m for m in ('torch', 'numpy', 'pandas', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.stdout.strip() == "[]"
