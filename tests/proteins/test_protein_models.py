"""Protein language models of every tokenizer convention: `probe capture --sequence` equals eager
attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe import models
from probe.cli import main

SEQUENCE = "mktayiakqrqisfvk"


@pytest.mark.parametrize(("arch", "tokens"), [
    ("esm", ["<cls>", *SEQUENCE.upper(), "<eos>"]),
    ("protbert", ["[CLS]", *SEQUENCE.upper(), "[SEP]"]),
    ("prott5", [f"▁{letter}" for letter in SEQUENCE.upper()] + ["</s>"]),
])
def test_capture_sequence_equals_eager(tiny_dir, tmp_path, arch, tokens):
    directory = tiny_dir(arch)
    out = tmp_path / "a.npz"
    assert main(["capture", "--model", str(directory), "--sequence", SEQUENCE, "--out", str(out)]) == 0
    data = np.load(out)
    assert data["tokens"].tolist() == tokens

    loaded = models.load(str(directory))
    loaded.model.set_attn_implementation("eager")
    with torch.no_grad():
        eager = loaded.model(**models.tokenize_protein(loaded, SEQUENCE), output_attentions=True).attentions
    expected = torch.stack(eager, dim=1)[0].numpy()  # [layer head query key]
    assert data["attention"].shape == expected.shape == (2, 4, len(tokens), len(tokens))
    assert np.abs(data["attention"] - expected).max() <= 1e-5


def test_text_is_refused_for_a_spaced_protein_model(tiny_dir, tmp_path, capsys):
    code = main(["capture", "--model", str(tiny_dir("protbert")), "--text", "the cat", "--out",
                 str(tmp_path / "a.npz")])
    assert code == 2
    assert "protein model: pass --sequence" in capsys.readouterr().err
