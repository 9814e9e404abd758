"""Chance levels, bootstrap intervals, the label rule, and label_model on models whose answer is known."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
import torch

from probe import models
from probe.capture import AttentionBlock
from probe.classify import (
    COLUMNS,
    LabelConfig,
    apply_rule,
    bootstrap_ci,
    label_model,
    load_table,
    save_table,
    uniform_chance,
)
from probe.errors import ProbeError
from probe.patterns import batch_pattern
from probe.planted import PLANTED_HEADS, save_planted_gpt2
from probe.probesets import repeated_blocks
from probe.scores import ScoreSink
from probe.tiny import word_tokenizer


def stream(sink: ScoreSink, alpha: torch.Tensor, rows_per_block: int) -> None:
    """Feed α [batch layer head query key] to the sink in blocks of query rows, as the capture engine does."""
    n = alpha.shape[3]
    names = {field.name for field in dataclasses.fields(AttentionBlock)}
    for layer in range(alpha.shape[1]):
        for start in range(0, n, rows_per_block):
            values = dict(step=0, layer=layer, heads=tuple(range(alpha.shape[2])), query_start=start, n_query=n,
                          query_offset=0, alpha=alpha[:, layer, :, start:start + rows_per_block])
            if "n_key" in names:
                values["n_key"] = n
            sink.update(AttentionBlock(**values))


@pytest.fixture(scope="module")
def planted_dir(tmp_path_factory):
    return save_planted_gpt2(tmp_path_factory.mktemp("planted"))


# ---- chance ----------------------------------------------------------------------------------------------------


def test_uniform_chance_hand_computed():
    ids = torch.tensor([[1, 2, 3, 4]])
    lengths = torch.tensor([4])
    pattern = batch_pattern("previous_token", ids)
    # causal rows 1..3 see 2, 3, 4 keys, one target each
    assert uniform_chance(pattern, lengths, causal=True).item() == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    assert uniform_chance(pattern, lengths, causal=False).item() == pytest.approx(1 / 4)
    duplicate = batch_pattern("duplicate_token", torch.tensor([[7, 7, 7]]))  # row 1: 1 of 2 ; row 2: 2 of 3
    assert uniform_chance(duplicate, torch.tensor([3]), causal=True).item() == pytest.approx((1 / 2 + 2 / 3) / 2)
    # padding: a length-3 example in a 5-wide batch counts its own 3 keys only
    padded = batch_pattern("previous_token", torch.tensor([[1, 2, 3, 0, 0]]))
    assert uniform_chance(padded, torch.tensor([3]), causal=False).item() == pytest.approx(1 / 3)


# ---- bootstrap -------------------------------------------------------------------------------------------------


def test_bootstrap_ci_is_seeded_and_sensible():
    values = torch.rand(50, 2, 3, generator=torch.Generator().manual_seed(0))
    low, high = bootstrap_ci(values, 500, 0.95, seed=1)
    assert low.shape == high.shape == (2, 3)
    mean = values.mean(0)
    assert (low < mean).all() and (mean < high).all()
    again = bootstrap_ci(values, 500, 0.95, seed=1)
    assert torch.equal(low, again[0]) and torch.equal(high, again[1])
    # ~ mean ± 1.96 σ/√n for uniform(0,1) values: half-width ≈ 0.08
    assert ((high - low) / 2).mean().item() == pytest.approx(1.96 * (1 / 12) ** 0.5 / 50**0.5, rel=0.25)
    constant = torch.full((10, 1), 0.25)
    c_low, c_high = bootstrap_ci(constant, 100, 0.9, seed=0)
    assert c_low.item() == pytest.approx(0.25) and c_high.item() == pytest.approx(0.25)


# ---- the rule --------------------------------------------------------------------------------------------------


def test_label_rule():
    config = LabelConfig(margin=0.1, min_score=0.3, min_accuracy_gain=0.1)
    nan = float("nan")
    table = pd.DataFrame({
        "head_type": ["induction", "induction", "induction", "coreference", "coreference", "coreference"],
        "score": [0.9, 0.25, 0.5, 0.8, 0.8, 0.8],
        "ci_low": [0.85, 0.24, 0.15, 0.7, 0.7, 0.7],
        "chance": [0.05, 0.05, 0.05, 0.1, 0.1, 0.1],
        "accuracy_ci_low": [nan, nan, nan, 0.9, 0.6, 0.2],
        "baseline_accuracy": [nan, nan, nan, 0.5, 0.5, nan],
    })
    # 0: yes ; 1: score below min_score ; 2: ci_low not above chance + margin ; 3: beats the baseline ;
    # 4: accuracy not above baseline + gain ; 5: no baseline (probe file without distractors): mass rule only
    assert apply_rule(table, config).tolist() == [True, False, False, True, False, True]


# ---- the positional shortcut -----------------------------------------------------------------------------------


def _fixed_offset_scores(block_len: int | None, period: int = 9) -> pd.DataFrame:
    """A head attending to i − period + 1 by position alone, scored as induction; labelled by the default rule."""
    from probe.classify import _summarise

    tokenizer = word_tokenizer([f"w{i}" for i in range(5000)], bos_token="<bos>")  # few accidental repeats
    probes = repeated_blocks(tokenizer, 48, 64, seed=0, block_len=block_len)
    n = probes.input_ids.shape[1]
    targets = [max(i - period + 1, 0) for i in range(n)]
    alpha = torch.zeros(n, n)
    alpha[torch.arange(n), torch.tensor(targets)] = 1.0  # [query key]
    pattern = batch_pattern("induction", probes.input_ids)
    lengths = torch.full((48,), n)
    sink = ScoreSink({"induction": pattern}, lengths, 1, 1)
    stream(sink, alpha.expand(48, 1, 1, n, n), rows_per_block=16)
    summary = _summarise(sink.result()["induction"], uniform_chance(pattern, lengths, True), None, LabelConfig())
    row = {key: (value.item() if isinstance(value, torch.Tensor) else value) for key, value in summary.items()}
    table = pd.DataFrame([{**row, "head_type": "induction"}])
    table["label"] = apply_rule(table, LabelConfig())
    return table


def test_fixed_offset_head_is_not_induction_on_random_block_lengths():
    random_lengths = _fixed_offset_scores(block_len=None)
    assert random_lengths["score"].item() < 0.15
    assert not random_lengths["label"].item()
    # the control: on a fixed period equal to its offset the same head looks like a perfect induction head,
    # which is why the probes draw block lengths at random
    fixed = _fixed_offset_scores(block_len=9)
    assert fixed["score"].item() > 0.95 and fixed["label"].item()


# ---- label_model -----------------------------------------------------------------------------------------------


def test_label_model_finds_exactly_the_planted_heads(planted_dir):
    loaded = models.load(str(planted_dir))
    calls = []
    table = label_model(loaded, LabelConfig(examples=24), progress=lambda done, total: calls.append((done, total)))
    assert list(table.columns) == COLUMNS
    assert len(table) == 2 * 4 * 6  # layers × heads × types
    labelled = {(row.layer, row.head): row.head_type for row in table[table["label"]].itertuples()}
    assert labelled == PLANTED_HEADS
    planted = table.set_index(["layer", "head", "head_type"])
    assert planted.loc[(0, 0, "previous_token"), "score"] == pytest.approx(1.0, abs=1e-3)
    assert planted.loc[(1, 2, "first_token"), "ci_low"] == pytest.approx(1.0, abs=1e-3)
    # the uniform heads score their chance
    uniform = table[(table["layer"] == 0) & (table["head"] == 3) & (table["head_type"] != "coreference")]
    assert (uniform["score"] - uniform["chance"]).abs().max() < 1e-4
    assert table["seed"].eq(0).all() and table["n_examples"].eq(24).all()
    assert table["revision"].iloc[0].startswith("sha256:")
    coref = table[table["head_type"] == "coreference"]
    assert coref["accuracy"].notna().all() and coref["baseline_accuracy"].between(0, 1).all()
    assert table.loc[table["head_type"] != "coreference", "accuracy"].isna().all()
    assert calls[-1][0] == calls[-1][1] == 3 + 3  # 24 examples / 8 per batch, token and coreference probes


def test_label_model_types_and_seq_len(planted_dir, tiny_dir):
    loaded = models.load(str(planted_dir))
    table = label_model(loaded, LabelConfig(types=("induction",), examples=4, seq_len=20))
    assert set(table["head_type"]) == {"induction"} and len(table) == 8
    with pytest.raises(ProbeError, match="--seq-len 500 is beyond"):
        label_model(loaded, LabelConfig(examples=2, seq_len=500))
    assert dataclasses.replace(LabelConfig(), seq_len=None).seq_len is None
    esm = models.load(str(tiny_dir("esm")))
    table = label_model(esm, LabelConfig(examples=2, seq_len=16, n_bootstrap=10))
    assert "coreference" not in set(table["head_type"])
    with pytest.raises(ProbeError, match="protein model"):
        label_model(esm, LabelConfig(types=("coreference",), examples=2))


def test_masked_lm_chance_is_bidirectional(tiny_dir):
    bert = models.load(str(tiny_dir("bert")))  # the tiny BERT tokenizer adds no special tokens
    table = label_model(bert, LabelConfig(types=("previous_token", "first_token"), examples=4, seq_len=30,
                                          n_bootstrap=10))
    assert table["chance"].unique().tolist() == pytest.approx([1 / 30])


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".json"])
def test_table_files_round_trip(tmp_path, planted_dir, suffix):
    table = label_model(models.load(str(planted_dir)), LabelConfig(types=("self", "coreference"), examples=4,
                                                                     n_bootstrap=20))
    save_table(table, tmp_path / f"t{suffix}")
    back = load_table(tmp_path / f"t{suffix}")
    pd.testing.assert_frame_equal(back, table, check_dtype=False, check_exact=False, rtol=1e-6)
    (tmp_path / "junk.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ProbeError, match="not a probe label table"):
        load_table(tmp_path / "junk.csv")
