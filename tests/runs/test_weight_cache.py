"""The weight-only stages kept across runs (probe/runs/weight_cache.py, issue 45): a second labelling run on
the same weights reads the copying scores back instead of computing them, equal to a fresh computation;
other weights, an unknown revision or a damaged file are computed again."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from probe import models
from probe.heads.copying import copying_scores
from probe.heads.label import LabelConfig, label_model
from probe.runs import weight_cache as weight_stages


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """PROBE_CACHE in a fresh folder and a count of the copying computations."""
    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    calls = []

    def counting(loaded):
        calls.append(loaded.revision)
        return copying_scores(loaded)

    monkeypatch.setattr(weight_stages, "copying_scores", counting)
    return calls


def test_the_cached_rerun_skips_the_copying_stage_and_equals_a_fresh_one(counted, tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")))
    config = LabelConfig(types=("previous_token", "induction"), examples=4, n_bootstrap=20, ablate="none")
    first = label_model(loaded, config, copying_of=weight_stages.cached_copying_scores)
    second = label_model(loaded, config, copying_of=weight_stages.cached_copying_scores)
    assert len(counted) == 1  # the second run read the scores back
    np.testing.assert_array_equal(first["copying"].to_numpy(), second["copying"].to_numpy())
    fresh = copying_scores(loaded).scores  # [layer head]
    kept = weight_stages.cached_copying_scores(loaded)
    assert torch.equal(kept.scores, fresh) and kept.unembedding == "lm_head" and len(counted) == 1


def test_other_weights_and_unknown_revisions_are_computed_again(counted, tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")))
    other = models.load(str(tiny_dir("gpt2", seed=1)))
    weight_stages.cached_copying_scores(loaded)
    weight_stages.cached_copying_scores(other)  # other weights: another revision
    assert counted == [loaded.revision, other.revision] and loaded.revision != other.revision
    unknown = dataclasses.replace(loaded, revision="unknown")
    assert weight_stages.stage_path(unknown, "copying") is None
    weight_stages.cached_copying_scores(unknown)
    weight_stages.cached_copying_scores(unknown)
    assert len(counted) == 4  # never kept


def test_a_damaged_file_is_computed_again_and_replaced(counted, tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")))
    weight_stages.cached_copying_scores(loaded)
    path = weight_stages.stage_path(loaded, "copying")
    path.write_bytes(b"not an npz")
    again = weight_stages.cached_copying_scores(loaded)
    assert len(counted) == 2 and torch.equal(again.scores, copying_scores(loaded).scores)
    assert weight_stages.is_cached(loaded)
    weight_stages.cached_copying_scores(loaded)
    assert len(counted) == 2  # the replaced file is read


def test_probe_label_keeps_the_copying_stage_for_the_next_run(counted, tiny_dir, tmp_path):
    """The CLI path (probe.runs.tasks.LabelTask): a second `probe label` on the same weights, into another
    table, does not compute the copying scores again."""
    from probe.cli import main

    model = str(tiny_dir("gpt2"))
    argv = ["label", "--model", model, "--types", "previous_token", "--examples", "4", "--bootstrap", "20",
            "--ablate", "none"]
    assert main([*argv, "--out", str(tmp_path / "a.csv")]) == 0
    assert main([*argv, "--out", str(tmp_path / "b.csv")]) == 0
    assert len(counted) == 1
