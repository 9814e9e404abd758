"""Which natural text the label probes read (``LabelConfig.text``, ``probe label --text``; issue 54): a model
trained on Python source is probed on the standard library's held-out modules — its natural-text probes cut
from them, its repeated-block tokens drawn by their token frequencies — and GAP's development split stays the
default, with the identity of the runs before the option existed.

The model is the shipped zoo:stdlib-code (its 512-token BPE reads both English and Python); nothing here
depends on its weights."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from probe.errors import ProbeError
from probe.heads import corpus
from probe.heads.label import LabelConfig, config_identity
from probe.heads.label.probes import ProbeSource

CODE = corpus.CODE_HELD_OUT_SPLIT


@pytest.fixture(scope="module")
def loaded():
    from probe import models

    return models.load("zoo:stdlib-code")


def token_frequencies(tokenizer, split: str) -> torch.Tensor:
    """The share of each token id in `split`'s first SAMPLE_PASSAGES passages, by hand (special tokens 0)."""
    counts = Counter(i for text in corpus.passages(split)[:corpus.SAMPLE_PASSAGES]
                     for i in tokenizer(text, add_special_tokens=False)["input_ids"])
    weights = torch.zeros(len(tokenizer), dtype=torch.float64)
    for token, count in counts.items():
        weights[token] = count
    weights[list(tokenizer.all_special_ids)] = 0.0
    return weights / weights.sum()


def test_the_default_identity_is_that_of_the_runs_before_the_option_and_another_text_is_another_run():
    assert LabelConfig().text == corpus.PROBE_SPLIT == "development"
    assert "text" not in config_identity(LabelConfig())
    assert config_identity(LabelConfig(text=CODE))["text"] == CODE


def test_held_out_code_probes_are_cut_from_the_held_out_modules_and_drawn_by_their_frequencies(loaded):
    tokenizer = loaded.tokenizer
    code, gap = ProbeSource(loaded, LabelConfig(text=CODE)), ProbeSource(loaded, LabelConfig())
    assert code.natural and gap.natural  # the BPE reads both texts
    held_out = "".join(corpus.passages(CODE))
    probes = code.token_probes("natural", 64).input_ids  # [example seq]
    assert probes.shape == (LabelConfig().examples, 64)
    for row in probes[:8]:
        lines = [line for line in tokenizer.decode(row[1:]).split("\n")[:-1] if line.strip()]  # whole lines
        assert lines and all(line in held_out for line in lines)
    # the negative control: the default draws GAP's English, which is in no module
    english = tokenizer.decode(gap.token_probes("natural", 64).input_ids[0, 1:])
    assert english.split(". ")[0] in "".join(corpus.passages("development"))
    assert english.split(". ")[0] not in held_out
    # the repeated blocks' tokens: each text's own frequencies, computed by hand
    assert torch.allclose(code.weights, token_frequencies(tokenizer, CODE), atol=1e-12)
    assert torch.allclose(gap.weights, token_frequencies(tokenizer, "development"), atol=1e-12)
    assert not torch.allclose(code.weights, gap.weights, atol=1e-3)


def test_an_unknown_text_is_one_line_naming_the_texts(loaded):
    with pytest.raises(ProbeError, match="unknown text 'test': choose from development, validation, stdlib, "
                                         "stdlib-held-out") as error:
        ProbeSource(loaded, LabelConfig(text="test"))
    assert "\n" not in str(error.value)


def test_the_command_takes_text_and_refuses_another_before_loading(capsys):
    import argparse

    from probe.commands import label

    parser = argparse.ArgumentParser()
    label.add_parser(parser.add_subparsers())
    args = parser.parse_args(["label", "--model", "zoo:stdlib-code", "--text", CODE])
    assert label.config_from_args(args).text == CODE
    assert label.config_from_args(parser.parse_args(["label", "--model", "m"])).text == "development"
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["label", "--model", "zoo:stdlib-code", "--text", "test"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--text: invalid choice: 'test'" in err and "stdlib-held-out" in err
