"""`probe contacts` end to end on a tiny local ESM model."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from probe import models
from probe.cli import main
from probe.contacts import precision_columns, predict_contacts
from probe.structure import contact_map, read_structure
from tests.test_structure import SEQ, line_chain, write


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
    with np.load(out) as data:
        assert list(data["sequences"]) == [SEQ * 3] and list(data["ids"]) == ["line_A"]
        np.testing.assert_array_equal(data["true_contacts_0"], contact_map(structure))
        result = predict_contacts(models.load(esm), SEQ * 3, true_map=contact_map(structure))
        expected = [[result.precision[f"p_at_{f}_{r}"] for f in ("L", "L2", "L5")] for r in ("short", "medium", "long")]
        np.testing.assert_allclose(data["precision_0"], expected)
    table = pd.read_parquet(heads)
    assert len(table) == 2 * 4 and {"record", "id", "name", "weight", "logit_share", "provis_share",
                                     "background", *precision_columns()} <= set(table.columns)
    pd.testing.assert_frame_equal(table.drop(columns=["record", "id"]), result.heads, check_dtype=False)
    assert "short: P@L" in capsys.readouterr().out


def test_fasta_batch_with_structure_aligns_every_record(esm, line_pdb, tmp_path, capsys):
    fasta = tmp_path / "in.fasta"
    fasta.write_text(f">construct tagged\nGSHM{SEQ * 3}\n>exact\n{SEQ}\n{SEQ}\n{SEQ}\n")
    out = tmp_path / "c.npz"
    assert main(["contacts", "--model", esm, "--fasta", str(fasta), "--structure", line_pdb, "--out", str(out)]) == 0
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
    ],
)
def test_bad_input_is_one_line_exit_2(esm, line_pdb, tmp_path, capsys, extra, message):
    (tmp_path / "empty.fasta").write_text("\n\n")
    water = write(tmp_path, "water.pdb", ["HETATM    1  O   HOH W   1       0.000   0.000   0.000  1.00 10.00           O"])
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
    assert main(["contacts", "--model", model, "--sequence", sequence, "--window", "18", "--out", str(out)]) == 0
    with np.load(out) as data:
        contacts = data["contacts_0"]
        assert contacts.shape == (30, 30) and np.isnan(contacts[0, 29]) and np.isfinite(contacts[0, 17])


def test_output_is_atomic_on_failure(esm, tmp_path):
    out = tmp_path / "c.npz"
    out.write_bytes(b"previous")
    assert main(["contacts", "--model", esm, "--sequence", "MKJ", "--out", str(out)]) == 2
    assert out.read_bytes() == b"previous" and os.listdir(tmp_path) == ["c.npz"]


def test_interrupted_fasta_batch_keeps_finished_records_and_resumes(esm, line_pdb, tmp_path, monkeypatch):
    """Ctrl-C after the first record: it is written; the rerun computes only the other two; the result equals an
    uninterrupted run's."""
    import probe.commands.contacts as command

    fasta = tmp_path / "in.fasta"
    fasta.write_text(f">a\n{SEQ * 3}\n>b\n{SEQ * 2}\n>c\n{SEQ}\n")
    arguments = ["contacts", "--model", esm, "--fasta", str(fasta), "--structure", line_pdb]
    full_out, full_heads = tmp_path / "full.npz", tmp_path / "full.parquet"
    assert main([*arguments, "--out", str(full_out), "--heads-out", str(full_heads)]) == 0

    calls = []
    real = command.predict_contacts

    def interrupted(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    out, heads = tmp_path / "c.npz", tmp_path / "h.parquet"
    monkeypatch.setattr(command, "predict_contacts", interrupted)
    assert main([*arguments, "--out", str(out), "--heads-out", str(heads)]) == 130
    with np.load(out) as data:
        assert list(data["ids"]) == ["a"] and "contacts_1" not in data
    assert set(pd.read_parquet(heads)["id"]) == {"a"}

    calls.clear()
    monkeypatch.setattr(command, "predict_contacts", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
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
