"""`probe capture` writes the documented npz, equal to eager attention, and rejects bad input with exit code 2."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe import models
from probe.cli import main

TEXT = "the cat saw the dog and the dog saw the cat"


def test_capture_npz_equals_eager(tiny_dir, tmp_path):
    directory = tiny_dir("gpt2")
    out = tmp_path / "a.npz"
    assert main(["capture", "--model", str(directory), "--text", TEXT, "--layers", "1", "--heads", "0,2",
                 "--out", str(out)]) == 0
    data = np.load(out)
    assert set(data.files) == {"attention", "layers", "heads", "tokens"}
    assert data["attention"].dtype == np.float32
    assert data["layers"].tolist() == [1] and data["heads"].tolist() == [0, 2]
    assert data["tokens"].tolist() == ["<bos>", *TEXT.split()]

    loaded = models.load(str(directory))
    loaded.model.set_attn_implementation("eager")
    with torch.no_grad():
        eager = loaded.model(**models.tokenize_text(loaded, TEXT), output_attentions=True).attentions
    expected = eager[1][0, [0, 2]].numpy()  # [head query key]
    assert data["attention"].shape == (1, 2, 12, 12)
    assert np.abs(data["attention"][0] - expected).max() <= 1e-5


def test_capture_defaults_to_every_layer_and_head(tiny_dir, tmp_path):
    out = tmp_path / "all.npz"
    assert main(["capture", "--model", str(tiny_dir("esm")), "--sequence", "mktayiak", "--out", str(out)]) == 0
    data = np.load(out)
    assert data["attention"].shape == (2, 4, 10, 10)
    assert data["tokens"].tolist() == ["<cls>", *"MKTAYIAK", "<eos>"]
    assert np.allclose(data["attention"].sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--model", "/missing/dir", "--text", "x"], "does not exist"),
        (["--model", "gpt2", "--text", "x"], "hub is not reachable"),
        (["--model", "{gpt2}", "--text", "the " * 300], "takes at most 128"),
        (["--model", "{gpt2}", "--text", "x", "--layers", "5"], "--layers index 5 is out of range"),
        (["--model", "{gpt2}", "--text", "x", "--heads", "0,4"], "--heads index 4 is out of range"),
        (["--model", "{gpt2}", "--text", "x", "--heads", "a"], "bad --heads value"),
        (["--model", "{esm}", "--sequence", "MKXJ"], "'J' at 4"),
        (["--model", "{esm}", "--text", "hello"], "protein model"),
        (["--model", "{gpt2}", "--text", ""], "text is empty"),
    ],
)
def test_bad_input_exits_2_with_one_line(tiny_dir, tmp_path, capsys, arguments, message):
    arguments = [a.replace("{gpt2}", str(tiny_dir("gpt2"))).replace("{esm}", str(tiny_dir("esm"))) for a in arguments]
    assert main(["capture", *arguments, "--out", str(tmp_path / "x.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "x.npz").exists()


def test_bad_output_extension(tiny_dir, tmp_path, capsys):
    assert main(["capture", "--model", str(tiny_dir("gpt2")), "--text", "x", "--out", str(tmp_path / "a.csv")]) == 2
    assert ".npz" in capsys.readouterr().err
