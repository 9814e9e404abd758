"""Sweeps that notice identical checkpoints: the same weight bytes under two revisions give a one-line warning
and a same_weights_as column (EleutherAI/pythia #205)."""

from __future__ import annotations

import hashlib
import os
import shutil

import pandas as pd

from probe.hashing import weights_identity
from probe.runs.same_weights import mark_same_weights
from probe.zoo.tiny import save_tiny


def test_mark_same_weights_by_hand():
    table = pd.DataFrame(
        {
            "model": "m",
            "checkpoint": ["a", "a", "b", "c", "d", "e"],
            "weights": ["w1", "w1", "w2", "w1", None, "w2"],
        }
    )
    marked, lines = mark_same_weights(table)
    assert marked["same_weights_as"].fillna("-").tolist() == ["-", "-", "-", "a", "-", "b"]
    assert len(lines) == 2 and "2 checkpoints hold the same weights (w1): a, c" in lines[0]
    plain = pd.DataFrame({"model": ["m"], "layer": [0]})  # not a sweep: unchanged, silent
    assert mark_same_weights(plain)[0] is plain and mark_same_weights(plain)[1] == []
    distinct = pd.DataFrame({"model": "m", "checkpoint": ["a", "b"], "weights": ["w1", "w2"]})
    assert (
        mark_same_weights(distinct)[0]["same_weights_as"].isna().all()
        and mark_same_weights(distinct)[1] == []
    )


def test_weights_identity_reads_hub_blob_names_and_agrees_with_the_bytes(tmp_path):
    """A Hugging Face cache snapshot links each weight file to a blob named by its sha256: the identity is
    taken from the name, and equals the identity of a plain copy of the same bytes; a different file
    differs."""
    data = b"weights" * 1000
    digest = hashlib.sha256(data).hexdigest()
    (tmp_path / "blobs").mkdir()
    (tmp_path / "blobs" / digest).write_bytes(data)
    snapshot, plain, other = tmp_path / "snapshot", tmp_path / "plain", tmp_path / "other"
    for folder in (snapshot, plain, other):
        folder.mkdir()
    os.symlink(tmp_path / "blobs" / digest, snapshot / "model.safetensors")
    (plain / "model.safetensors").write_bytes(data)
    (other / "model.safetensors").write_bytes(data + b"!")
    assert weights_identity(snapshot) == weights_identity(plain) != weights_identity(other)


def test_a_sweep_with_a_repeated_checkpoint_warns_once_and_marks_it(tmp_path, capsys):
    from probe.cli import main

    run = tmp_path / "run"
    save_tiny("gpt2", run / "step-0", seed=0)
    shutil.copytree(run / "step-0", run / "step-1")  # the same weights under another revision
    save_tiny("gpt2", run / "step-2", seed=1)
    out = tmp_path / "sweep.csv"
    code = main(
        [
            "label",
            "--model",
            str(run),
            "--revisions",
            "step-0,step-1,step-2",
            "--types",
            "previous_token",
            "--examples",
            "4",
            "--bootstrap",
            "50",
            "--ablate",
            "none",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "hold the same weights" in line]
    assert len(warnings) == 1 and "step-0, step-1" in warnings[0] and "step-2" not in warnings[0]
    table = pd.read_csv(out)
    same = table.drop_duplicates("checkpoint").set_index("checkpoint")["same_weights_as"]
    assert same["step-1"] == "step-0" and pd.isna(same["step-0"]) and pd.isna(same["step-2"])
