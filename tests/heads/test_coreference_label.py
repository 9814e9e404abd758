"""Coreference must find the antecedent (issue 39): Clark et al.'s argmax over every word beside the argmax
over the marked mentions, and a label that needs the antecedent's attention above chance as well as the
accuracy gain over the best baseline (intersection–union test), on hand-computed cases."""

from __future__ import annotations

import math

import torch

from probe.engine import AttentionBlock
from probe.heads.label import LabelConfig, Scored, summarise
from probe.heads.registry import REGISTRY
from probe.heads.scores import ScoreSink, TypeScores, WordTargets

# [CLS] w0 w1 w2 w3 w4 [SEP]: the pronoun is w4 (token 5), its antecedent w0 (token 1), the distractor w2
# (token 3); w1 and w3 are ordinary words
N = 7
WORDS = WordTargets(
    word_ids=torch.tensor([[-1, 0, 1, 2, 3, 4, -1]]),
    query_weight=torch.tensor([[0, 0, 0, 0, 0, 1.0, 0]]),
    target_word=torch.tensor([[True, False, False, False, False]]),
    candidate_word=torch.tensor([[True, False, True, False, False]]),  # the marked mentions
    any_word=torch.tensor([[True, True, True, True, False]]),  # every word but the pronoun itself
)


def _pronoun_rows(rows: list[dict[int, float]]) -> torch.Tensor:
    """α `[batch=1 layer=1 head query key]`: the pronoun's row per head as given (keys -> weight, the rest on
    [CLS]); every other row on [CLS]."""
    alpha = torch.zeros(1, 1, len(rows), N, N)
    alpha[..., 0] = 1.0
    for head, weights in enumerate(rows):
        alpha[0, 0, head, 5] = 0.0
        for key, weight in weights.items():
            alpha[0, 0, head, 5, key] = weight
        alpha[0, 0, head, 5, 0] = 1.0 - sum(weights.values())
    return alpha


def test_clark_accuracy_takes_the_argmax_over_every_word_and_ours_over_the_mentions():
    rows = [
        {1: 0.3, 3: 0.1, 2: 0.5},  # the antecedent beats the distractor, but an ordinary word (w1) is on top
        {1: 0.6, 3: 0.1},  # the antecedent is the top word of all
        {1: 0.2, 3: 0.4},  # the distractor wins
        {4: 0.35, 1: 0.3, 5: 0.35},  # w3 is the top word; the pronoun's own piece (key 5) never counts
    ]
    alpha = _pronoun_rows(rows)
    pattern = torch.zeros(1, N, N, dtype=torch.bool)
    pattern[0, 5, 1] = True  # pronoun -> antecedent
    sink = ScoreSink({"coreference": pattern}, torch.tensor([N]), 1, len(rows), words=WORDS)
    sink.update(AttentionBlock(step=0, layer=0, heads=tuple(range(len(rows))), query_start=0, n_query=N,
                               query_offset=0, alpha=alpha[:, 0], n_key=N))
    result = sink.result()["coreference"]
    assert result.correct[0, 0].tolist() == [1.0, 1.0, 0.0, 1.0]  # among the two marked names
    assert result.clark_correct[0, 0].tolist() == [0.0, 1.0, 0.0, 0.0]  # among every word
    assert torch.allclose(result.score[0, 0], torch.tensor([0.3, 0.6, 0.2, 0.3]))  # the antecedent's mass


def _scored(mass: list[float], accurate: float, n: int = 60, chance: float = 0.024) -> Scored:
    """n GAP-like examples (one cluster each) and one head per entry of `mass`: its antecedent mass on every
    example (± a little spread), right among the mentions on the first `accurate` share of examples; the
    nearest-mention baseline is right on every other example."""
    generator = torch.Generator().manual_seed(0)
    score = torch.tensor(mass)[None, None, :] * (1 + 0.2 * torch.randn(n, 1, len(mass), generator=generator))
    correct = (torch.arange(n) < round(accurate * n)).float()[:, None, None].expand(n, 1, len(mass))
    scores = TypeScores("coreference", score, torch.full_like(score, math.nan), correct.clone(),
                        clark_correct=(correct * 0.5).clone())
    nearest = (torch.arange(n) % 2 == 0).float()
    return Scored(REGISTRY["coreference"], "gap", math.nan, [None], {None: scores},
                  {None: torch.full((n,), chance)}, torch.arange(n), {"nearest": nearest}, ["A"] * n)


def test_the_label_needs_the_antecedent_above_chance_as_well_as_the_accuracy_gain():
    """Both heads prefer the antecedent over the distractor on 90 % of pairs (gain 0.4 over nearest mention);
    head 0 puts 0.019 on the antecedent against a chance of 0.024 (the issue's MiniLM L3H2), head 1 0.10.
    Head 0's p is its attention test's (≈ 1): no label; head 1's is small. A head with attention above chance
    but no accuracy gain fails on the gain."""
    result = summarise(_scored([0.019, 0.10], accurate=0.9), LabelConfig(n_bootstrap=300))
    above = result["p_above_chance"][0]
    assert above[0] > 0.99 and above[1] < 1e-6
    assert result["p_value"][0, 0] >= above[0] and result["p_value"][0, 1] < 1e-3
    assert float(result["accuracy"][0, 0]) == float(result["accuracy"][0, 1]) > 0.89
    assert abs(float(result["clark_accuracy"][0, 1]) - 0.45) < 1e-6
    low_gain = summarise(_scored([0.10], accurate=0.5), LabelConfig(n_bootstrap=300))
    assert low_gain["p_above_chance"][0, 0] < 1e-6 and low_gain["p_value"][0, 0] > 0.5
