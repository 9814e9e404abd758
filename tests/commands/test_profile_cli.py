"""`probe profile` at its edges (issue 32, items 3 and 5): a stated maximum of --random inputs, inputs
streamed, a foreign --out never overwritten without --force, --window 0 refused, --bootstrap errors naming
--bootstrap."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch

from probe import models
from probe.cli import main
from probe.commands.profile import MAX_RANDOM
from probe.heads.probesets import content_token_ids, special_frame
from probe.heads.profile import ProfileConfig, RandomInputs, head_profiles, random_inputs

ROOT = Path(__file__).resolve().parents[2]


def test_a_huge_random_count_is_refused_at_once_in_one_line(tmp_path):
    """The old command materialised 10^12 inputs in a list (no output, memory growing ~24 MiB/s)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "probe.cli", "profile", "--model", "zoo:induction",
                             "--random", "1000000000000", "--seq-len", "32",
                             "--out", str(tmp_path / "p.csv")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and f"give 1 to {MAX_RANDOM:,} inputs" in result.stderr
    assert not list(tmp_path.iterdir())


def test_the_maximum_itself_is_accepted_by_the_check(tmp_path, capsys):
    """Positive control of the bound: MAX_RANDOM passes the --random check (and fails later on --window 0)."""
    out = str(tmp_path / "p.csv")
    assert main(["profile", "--model", "zoo:induction", "--random", str(MAX_RANDOM), "--window", "0",
                 "--out", out]) == 2
    assert "--window 0" in capsys.readouterr().err
    assert main(["profile", "--model", "zoo:induction", "--random", str(MAX_RANDOM + 1), "--out", out]) == 2
    assert "--random" in capsys.readouterr().err


def test_random_inputs_are_streamed_and_equal_the_recipe_written_out():
    loaded = models.load("zoo:induction")
    inputs = random_inputs(loaded, 3, 20, seed=4)
    assert isinstance(inputs, RandomInputs) and not isinstance(inputs, list) and len(inputs) == 3
    iterator = iter(inputs)
    first = next(iterator)  # made on demand: one input, not three
    assert first.shape == (1, 20)
    # the recipe: BOS frame, then 19 ids drawn uniformly from the content tokens by one seeded generator
    prefix, suffix = special_frame(loaded.tokenizer)
    vocab = content_token_ids(loaded.tokenizer)
    generator = torch.Generator().manual_seed(4)
    expected = [torch.tensor([*prefix, *vocab[torch.randint(0, len(vocab), (20 - len(prefix) - len(suffix),),
                                                            generator=generator)].tolist(), *suffix])[None]
                for _ in range(3)]
    made = [first, *iterator]
    assert all(torch.equal(a, b) for a, b in zip(made, expected, strict=True))
    # re-iterable: the same inputs again
    assert all(torch.equal(a, b) for a, b in zip(inputs, expected, strict=True))


def test_a_streamed_profile_equals_the_profile_of_the_same_inputs_as_a_list():
    loaded = models.load("zoo:induction")
    config = ProfileConfig(seq_len=24, window=4, max_offset=4, n_bootstrap=20)
    streamed = head_profiles(loaded, random_inputs(loaded, 3, 24, seed=1), config)
    listed = head_profiles(loaded, list(random_inputs(loaded, 3, 24, seed=1)), config)
    pd.testing.assert_frame_equal(streamed, listed)
    assert (streamed["n_inputs"] == 3).all() and (streamed["seq_len"] == 24).all()


def profile(out: Path, *extra: str) -> int:
    return main(["profile", "--model", "zoo:induction", "--random", "2", "--seq-len", "24", "--window", "4",
                 "--max-offset", "4", "--bootstrap", "10", "--out", str(out), *extra])


def test_an_unrelated_csv_is_not_overwritten_without_force(tmp_path, capsys):
    out = tmp_path / "mine.csv"
    out.write_text("name,amount\nrent,900\n")
    assert profile(out) == 2
    err = capsys.readouterr().err
    assert "is not a probe profile table" in err and "--force" in err and err.count("\n") == 1
    assert out.read_text() == "name,amount\nrent,900\n"
    assert profile(out, "--force") == 0
    assert "streaming_mass" in pd.read_csv(out).columns


def test_a_label_table_is_not_a_profile_table(tmp_path, capsys):
    """Another command's table is foreign too: the shipped label table of zoo:induction, copied."""
    out = tmp_path / "labels.csv"
    out.write_bytes((ROOT / "probe" / "zoo" / "induction" / "labels.csv").read_bytes())
    assert profile(out) == 2
    assert "not a probe profile table" in capsys.readouterr().err


def test_an_earlier_profile_table_is_rewritten_without_force(tmp_path):
    out = tmp_path / "profile.csv"
    assert profile(out) == 0
    first = pd.read_csv(out)
    assert profile(out) == 0  # its own table: no --force needed
    pd.testing.assert_frame_equal(pd.read_csv(out), first)


def test_window_zero_and_bootstrap_zero_name_their_flags(tmp_path, capsys):
    out = tmp_path / "p.csv"
    assert profile(out, "--window", "0") == 2
    assert "--window 0 must be at least 1" in capsys.readouterr().err
    assert profile(out, "--bootstrap", "0") == 2
    err = capsys.readouterr().err
    assert "--bootstrap 0 must be at least 1" in err and "--n-bootstrap" not in err
    assert not out.exists()
