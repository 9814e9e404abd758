"""Loading: local directories, zoo specs, kinds, and one-line errors naming the fix."""

from __future__ import annotations

import pytest
import torch

from probe import models
from probe.errors import ProbeError


@pytest.mark.parametrize(("arch", "kind"), [("gpt2", "causal_lm"), ("bert", "masked_lm"), ("esm", "protein_mlm"),
                                            ("llama", "causal_lm")])
def test_load_local_directory(tiny_dir, arch, kind):
    loaded = models.load(str(tiny_dir(arch)))
    assert loaded.kind == kind
    assert not loaded.model.training
    assert loaded.model.config._attn_implementation == "sdpa"
    assert loaded.n_layers == 2 and loaded.n_heads == 4
    assert loaded.revision.startswith("sha256:")


def test_revision_is_a_content_hash(tiny_dir):
    first = models.load(str(tiny_dir("gpt2", seed=0))).revision
    assert models.load(str(tiny_dir("gpt2", seed=0))).revision == first
    assert models.load(str(tiny_dir("gpt2", seed=1))).revision != first


def test_dtype_option(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")), dtype="bfloat16")
    assert next(loaded.model.parameters()).dtype == torch.bfloat16


def test_esm_length_limit_is_1024_tokens(tiny_dir):
    loaded = models.load(str(tiny_dir("esm")))
    assert loaded.max_tokens == 1024
    with pytest.raises(ProbeError, match="at most 1024"):
        models.tokenize_protein(loaded, "A" * 1023)
    assert models.tokenize_protein(loaded, "a" * 1022)["input_ids"].shape[1] == 1024


def test_protein_letters_rejected_with_positions():
    with pytest.raises(ProbeError, match=r"'J' at 3, '1' at 5"):
        models.clean_protein("MKJA1")
    assert models.clean_protein("mk ta\nY") == "MKTAY"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("./no/such/dir", "does not exist"),
        ("/definitely/missing/model", "does not exist"),
        ("gpt2", "hub is not reachable"),
        ("some-org/some-model", "hub is not reachable"),
    ],
)
def test_load_errors_are_one_line(spec, message):
    with pytest.raises(ProbeError, match=message) as info:
        models.load(spec)
    assert "\n" not in str(info.value)


def test_directory_without_config(tmp_path):
    with pytest.raises(ProbeError, match="no config.json"):
        models.load(str(tmp_path))


def test_unknown_device(tiny_dir):
    with pytest.raises(ProbeError, match="unknown device"):
        models.load(str(tiny_dir("gpt2")), device="tpu9")


def test_text_too_long(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")))
    with pytest.raises(ProbeError, match="at most 128"):
        models.tokenize_text(loaded, "the " * 200)
