"""Held-out confirmation of every label (issue 57): each probe set's documents are dealt into a selection half
and a confirmation half (:func:`probe.heads.stats.confirmation_split`), heads are selected on the first, and a
label stands only where the second reproduces it (``selected``, ``confirm_*``, ``replicated``; docs/labels.md,
"Held-out confirmation").

* the split: GAP pairs of one Wikipedia page never fall on both sides (an example-wise split would cut them);
  through :func:`assemble`, the halves partition a probe set's clusters and examples;
* positive control: zoo:induction's planted heads are selected and replicated, with confirmation scores;
* negative control: a head whose effect holds on the selection half's documents only, by construction, is
  selected and not replicated (no label, and the views say why), beside a head that holds everywhere;
* the rule by hand: confirm_q is Benjamini–Hochberg over the selected rows only, the twins' bar applies to the
  confirmation, an unknown confirmation replicates nothing, rows not selected have ``replicated`` NaN;
* the null stays honest: on heads exactly at the null boundary the share of runs with any label stays at or
  below the FDR level (BH's bound under the complete null), and below the selection's own;
* an untrained twin of zoo:induction gets no replicated label where the model keeps its planted ones.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

import probe
from probe.heads import corpus, stats
from probe.heads.label import LabelConfig, Scored, label_model
from probe.heads.label.table import assemble, decide
from probe.heads.registry import REGISTRY
from probe.heads.scores import TypeScores
from probe.naming import head_name
from probe.views.reading import held_out_text, label_reason

FAST = dict(types=("previous_token", "induction"), examples=32, seq_len=48, n_bootstrap=200, ablate="none")


def test_the_split_never_cuts_a_gap_page():
    examples = corpus.gap_examples()  # the development pairs, cluster = the page's URL
    pages = [example.cluster for example in examples]
    cluster = stats.cluster_index(pages)
    assert len(set(pages)) < len(pages)  # pages with several pairs exist: a split could cut them
    select, confirm = stats.confirmation_split(cluster, seed=0)
    chosen = {page for page, kept in zip(pages, select.tolist(), strict=True) if kept}
    held_out = {page for page, kept in zip(pages, confirm.tolist(), strict=True) if kept}
    assert not chosen & held_out and chosen | held_out == set(pages)
    assert len(chosen) == math.ceil(len(set(pages)) / 2)
    assert 0.4 < float(select.double().mean()) < 0.6  # about half the pairs too
    # the negative control of this test: an example-wise split (every other pair) would cut pages
    alternate = {page for index, page in enumerate(pages) if index % 2 == 0}
    assert alternate & {page for index, page in enumerate(pages) if index % 2 == 1}
    again, _ = stats.confirmation_split(cluster, seed=0)
    other, _ = stats.confirmation_split(cluster, seed=1)
    assert torch.equal(again, select) and not torch.equal(other, select)  # seeded


def _loaded(layers: int, heads: int):
    """What assemble() reads of a loaded model."""
    return SimpleNamespace(name="synthetic", revision="none", n_layers=layers, n_heads=heads,
                           attention_layers=tuple(range(layers)), head_name=head_name)


def _scored(score: torch.Tensor, cluster: torch.Tensor, chance: float = 0.05) -> Scored:
    """A previous_token Scored from per-example scores [example layer head]."""
    spec = REGISTRY["previous_token"]
    return Scored(spec, "natural", 64.0, [None],
                  {None: TypeScores(spec.name, score, torch.full_like(score, math.nan))},
                  {None: torch.full((score.shape[0],), chance)}, cluster)


def test_assemble_splits_by_cluster_and_confirms_on_the_other_half():
    cluster = torch.arange(40).repeat_interleave(3)  # 40 documents of 3 examples
    noise = torch.randn(120, 1, 2, generator=torch.Generator().manual_seed(0))
    score = 0.05 + 0.01 * noise  # [example layer head]
    table = assemble(_loaded(1, 2), [_scored(score, cluster)], LabelConfig(n_bootstrap=100))
    assert (table["n_clusters"] + table["confirm_clusters"]).eq(40).all()
    assert table["n_clusters"].eq(20).all() and table["n_examples"].eq(60).all()
    select, confirm = stats.confirmation_split(cluster, 0)
    assert table["score"].tolist() == pytest.approx(score[select].mean(0).flatten().tolist())
    assert table["confirm_score"].tolist() == pytest.approx(score[confirm].mean(0).flatten().tolist())


def test_a_head_significant_only_on_its_selection_half_does_not_replicate():
    """Head 0 attends to its targets on every document; head 1 only on the documents the split gives the
    selection half (chance on the others); heads 2 and 3 sit at chance. Both strong heads are selected;
    only head 0 replicates and keeps its label."""
    generator = torch.Generator().manual_seed(1)
    cluster = torch.arange(64)
    select, confirm = stats.confirmation_split(cluster, seed=0)
    score = 0.05 + 0.02 * torch.randn(64, 1, 4, generator=generator)  # [example layer head]
    score[:, 0, 0] += 0.6
    score[select, 0, 1] += 0.6  # the statistic holds on the selection half's probes only
    config = LabelConfig(n_bootstrap=300)
    table = decide(assemble(_loaded(1, 4), [_scored(score, cluster)], config), config)
    assert table["selected"].tolist() == [True, True, False, False]
    assert table["replicated"].tolist()[:2] == [True, False]
    assert table["replicated"][2:].isna().all()  # not selected: nothing to replicate
    assert table["label"].tolist() == [True, False, False, False]
    assert table["confirm_score"][0] > 0.6 and table["confirm_score"][1] < 0.1
    assert table["confirm_ci_low"][0] <= table["confirm_score"][0] <= table["confirm_ci_high"][0]
    rows = list(table.itertuples())
    assert label_reason(rows[0]) == ""
    assert held_out_text(rows[0]).startswith(f"{table['confirm_score'][0]:.3f} [")
    assert label_reason(rows[1]).startswith("not replicated on the held-out half (score 0.0")
    assert held_out_text(rows[1]).endswith("not replicated") and held_out_text(rows[2]) == ""


def _rule_table(rows: list[dict]) -> pd.DataFrame:
    base = dict(head_type="previous_token", seq_len=64.0, chance=0.05, accuracy=math.nan, effect=0.5,
                layer=0, output_share=math.nan, copying=math.nan, score=0.9, p_value=1e-6)
    return pd.DataFrame([{**base, "head": index, **row} for index, row in enumerate(rows)])


def test_the_replication_rule_by_hand():
    table = _rule_table([
        dict(confirm_p=1e-6, confirm_score=0.8),  # selected, replicated
        dict(confirm_p=0.04, confirm_score=0.8),  # the largest of the 3 known: q = p = 0.04 ≤ 0.05
        dict(confirm_p=1e-6, confirm_score=0.3),  # confirmed by q, but at the twins' bar on the confirmation
        dict(confirm_p=math.nan, confirm_score=math.nan),  # no confirmation half: unknown, not replicated
        dict(p_value=0.9, confirm_p=1e-9, confirm_score=0.9),  # not selected: its confirmation is not read
    ])
    decided = decide(table, LabelConfig(), {("previous_token", 64.0): 0.3})
    assert decided["selected"].tolist() == [True, True, True, True, False]
    # confirm_q: BH of (1e-6, 0.04, 1e-6) over the 3 known of the selected rows; NaN elsewhere
    assert decided["confirm_q"][:3].tolist() == pytest.approx([1.5e-6, 0.04, 1.5e-6])
    assert math.isnan(decided["confirm_q"][3]) and math.isnan(decided["confirm_q"][4])
    assert decided["replicated"].tolist()[:4] == [True, True, False, False]
    assert math.isnan(decided["replicated"][4])
    assert decided["label"].tolist() == [True, True, False, False, False]
    # the family is the selected rows: with two more selected rows of p 0.9, 0.04 no longer passes
    rows = [dict(confirm_p=p_value, confirm_score=0.8) for p_value in (1e-6, 0.04, 0.9, 0.9)]
    more = decide(_rule_table(rows), LabelConfig())
    assert more["confirm_q"][1] == pytest.approx(0.08)
    assert more["label"].tolist() == [True, False, False, False]
    # a table without the confirmation's columns replicates nothing
    bare = decide(_rule_table([{}]), LabelConfig())
    assert bare["selected"].tolist() == [True] and bare["label"].tolist() == [False]


@pytest.mark.slow  # ~30 s alone, more on a busy machine
def test_the_null_stays_at_or_below_nominal():
    """100 seeded runs of 16 heads exactly at the null boundary (score − chance = min_effect in expectation,
    64 one-probe documents): a label (selected and replicated) comes in at most fdr of the runs, BH's bound
    under the complete null — measured 1 of 100. The selection alone runs above it — 12 of 100 on its 32
    documents, 11 of 100 for the old rule on all 64 (the bootstrap's normal approximation on a few dozen
    clusters has thin tails: docs/labels.md, "Held-out confirmation") — which the confirmation corrects."""
    config = LabelConfig(n_bootstrap=200)
    any_selected = any_label = 0
    for run in range(100):
        generator = torch.Generator().manual_seed(run)
        score = 0.05 + config.min_effect + 0.1 * torch.randn(64, 4, 4, generator=generator)
        table = decide(assemble(_loaded(4, 4), [_scored(score, torch.arange(64))],
                                LabelConfig(n_bootstrap=200, seed=run)), config)
        any_selected += bool(table["selected"].any())
        any_label += bool(table["label"].any())
    assert any_label <= 100 * config.fdr
    assert any_label < any_selected


@pytest.fixture(scope="module")
def induction():
    return probe.load("zoo:induction")


def test_planted_heads_replicate_and_an_untrained_twin_has_nothing_to_replicate(induction):
    table = label_model(induction, LabelConfig(**FAST))
    labelled = table[table["label"]]
    assert sorted(zip(labelled["head_name"], labelled["head_type"], strict=True)) == [
        ("L0H1", "previous_token"), ("L1H0", "induction"), ("L1H1", "induction"), ("L1H2", "induction"),
        ("L1H3", "induction")]
    assert labelled["replicated"].eq(True).all() and labelled["selected"].all()
    assert (labelled["confirm_score"] > 0.85).all() and labelled["confirm_clusters"].eq(16).all()
    assert (labelled["confirm_ci_low"] > labelled["chance"] + 0.25).all()
    twin = probe.untrained.untrained_twin(induction, 1)
    random_table = label_model(twin, LabelConfig(**FAST))
    assert not random_table["label"].any()
    assert not random_table["replicated"].eq(True).any()


def test_the_report_table_and_the_apps_labelled_heads_show_the_held_out_score():
    from app.panels import atlas
    from probe.views.tables import COLUMNS, table_html

    table = _rule_table([
        dict(confirm_p=1e-6, confirm_score=0.8123, confirm_ci_low=0.75, confirm_ci_high=0.86),
        dict(confirm_p=0.5, confirm_score=0.06, confirm_ci_low=0.01, confirm_ci_high=0.11)])
    table = decide(table.assign(ci_low=0.85, ci_high=0.95), LabelConfig())
    page = table_html(table)
    assert COLUMNS.index("held-out") == COLUMNS.index("label") + 1
    assert "0.812 [0.750, 0.860]" in page and "0.060 [0.010, 0.110] not replicated" in page
    assert "not replicated on the held-out half (score 0.060, q 0.5 above the FDR 0.05)" in page  # its hover
    rows, columns, _ = atlas.labelled_rows(table, "previous_token")
    assert [row["held_out"] for row in rows] == ["0.812 [0.750, 0.860]"]  # the labelled head only
    assert {"name": "held-out", "id": "held_out"} in columns
