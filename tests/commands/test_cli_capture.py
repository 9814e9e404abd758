"""`probe capture` writes the documented npz, equal to eager attention, and rejects bad input with exit code
2."""

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
    assert main(
        ["capture", "--model", str(tiny_dir("esm")), "--sequence", "mktayiak", "--out", str(out)]) == 0
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
        (["--model", "{gpt2}", "--text", "x", "--layers", "1-0"], "--layers range 1-0 is empty"),
        (["--model", "{gpt2}", "--text", "x", "--heads", "0-999999999999"],
         "--heads index 999999999999 is out"),
    ],
)
def test_bad_input_exits_2_with_one_line(tiny_dir, tmp_path, capsys, arguments, message):
    arguments = [a.replace("{gpt2}", str(tiny_dir("gpt2"))).replace("{esm}", str(tiny_dir("esm")))
                 for a in arguments]
    assert main(["capture", *arguments, "--out", str(tmp_path / "x.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "x.npz").exists()


def test_bad_output_extension(tiny_dir, tmp_path, capsys):
    assert main(
        ["capture", "--model", str(tiny_dir("gpt2")), "--text", "x", "--out", str(tmp_path / "a.csv")]) == 2
    assert ".npz" in capsys.readouterr().err


def test_a_range_is_bounds_checked_before_it_is_expanded():
    """`0-999999999999` must fail at once, never build a list of 10^12 indices (that was a MemoryError;
    `0-20000000` cost 775 MB): the check allocates next to nothing."""
    import tracemalloc

    from probe.errors import ProbeError
    from probe.naming import parse_index_list

    tracemalloc.start()
    try:
        for text, index in (("0-999999999999", 999999999999), ("0-20000000", 20000000)):
            with pytest.raises(ProbeError, match=f"index {index} is out of range"):
                parse_index_list(text, 12, "heads")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20
    assert parse_index_list("0-3,2,7", 12, "heads") == [0, 1, 2, 3, 7]
    assert parse_index_list("5-5", 12, "heads") == [5]
    assert parse_index_list(None, 3, "heads") == [0, 1, 2] == parse_index_list("all", 3, "heads")
    for empty in ("", " ", ","):  # issue 44, escape 9: "" meant all layers while "," was refused
        with pytest.raises(ProbeError, match="--heads"):
            parse_index_list(empty, 3, "heads")
    with pytest.raises(ProbeError,
                       match=r"range 1-0 is empty \(it runs backwards\): write it low-high, e.g. 0-1"):
        parse_index_list("1-0", 12, "layers")


@pytest.mark.parametrize("make", ["folder", "foreign"])
def test_out_is_checked_before_the_model_is_loaded(tmp_path, capsys, make):
    """A bad --out fails first, even with a model that does not exist (so no computing happens before it)."""
    out = tmp_path / "a.npz"
    if make == "folder":
        out.mkdir()
    else:
        out.write_text("not an archive")
    assert main(["capture", "--model", str(tmp_path / "no-model"), "--text", "x", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--out {out}" in err
    assert ("is a folder" in err) if make == "folder" else ("is not a .npz file" in err)
    assert make == "folder" or out.read_text() == "not an archive"


def test_out_in_a_folder_that_cannot_be_written(tmp_path, capsys):
    """Permission bits do not stop root, so the check creates a file; /sys stands in for a read-only mount."""
    import os
    import tempfile

    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        tempfile.NamedTemporaryFile(dir=folder).close()
        folder = "/sys"  # root writes anywhere but on read-only file systems
    except OSError:
        pass
    assert main(["capture", "--model", str(tmp_path / "no-model"), "--text", "x",
                 "--out", os.path.join(folder, "a.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot write in" in err and "choose a writable folder" in err
    (tmp_path / "ro").chmod(0o755)


def test_an_existing_npz_is_overwritten_atomically(tiny_dir, tmp_path):
    out = tmp_path / "a.npz"
    assert main(
        ["capture", "--model", str(tiny_dir("gpt2")), "--text", TEXT, "--layers", "0", "--out",
         str(out)]) == 0
    assert main(
        ["capture", "--model", str(tiny_dir("gpt2")), "--text", TEXT, "--layers", "1", "--out",
         str(out)]) == 0
    assert np.load(out)["layers"].tolist() == [1]
    assert [p.name for p in tmp_path.iterdir()] == ["a.npz"]  # no temporary file left
