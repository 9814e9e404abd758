"""The label statistics as pure functions: chance, clustered bootstrap, the one-sided test,
Benjamini–Hochberg."""

from __future__ import annotations

import math

import pytest
import torch

from probe.heads.registry import batch_pattern
from probe.heads.stats import (
    benjamini_hochberg,
    bootstrap_means,
    choose_candidate,
    cluster_index,
    p_greater,
    percentile_interval,
    resample_weights,
    selection_split,
    uniform_chance,
)


def test_uniform_chance_hand_computed():
    ids = torch.tensor([[1, 2, 3, 4]])
    lengths = torch.tensor([4])
    pattern = batch_pattern("previous_token", ids)
    # causal rows 1..3 see 2, 3, 4 keys, one target each
    assert uniform_chance(pattern, lengths, causal=True).item() == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    assert uniform_chance(pattern, lengths, causal=False).item() == pytest.approx(1 / 4)
    duplicate = batch_pattern("duplicate_token", torch.tensor([[7, 7, 7]]))  # row 1: 1 of 2 ; row 2: 2 of 3
    assert uniform_chance(duplicate, torch.tensor([3]),
                          causal=True).item() == pytest.approx((1 / 2 + 2 / 3) / 2)
    padded = batch_pattern("previous_token", torch.tensor([[1, 2, 3, 0, 0]]))
    assert uniform_chance(padded, torch.tensor([3]), causal=False).item() == pytest.approx(1 / 3)
    # next-token targets under a causal mask: rows with a target count, the uniform head puts 0 there
    following = batch_pattern("next_token", ids)
    assert uniform_chance(following, lengths, causal=True).item() == 0.0


@pytest.mark.parametrize("causal", [True, False])
def test_uniform_chance_from_key_slots_equals_the_pattern(causal):
    """The label run hands the chance level each type's key slots (a few per row), not its [query key]
    pattern: the same numbers, padding included; rows whose targets lie after them (causal) count with 0."""
    from probe.heads.registry import target_slots
    from probe.heads.targets import without_padding

    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([12, 9, 5])
    for density in (0.05, 0.3):
        pattern = torch.rand(3, 12, 12, generator=generator) < density  # [batch query key], some above i
        pattern[2] = False  # an example without a target: NaN both ways
        slots = target_slots(without_padding(pattern, lengths))  # [batch query slot]
        dense = uniform_chance(pattern, lengths, causal)
        sparse = uniform_chance(slots, lengths, causal)
        assert torch.isnan(dense[2]) and torch.isnan(sparse[2])
        assert torch.equal(dense[:2], sparse[:2])
    ids = torch.tensor([[1, 2, 3, 4]])
    previous = target_slots(batch_pattern("previous_token", ids))
    assert uniform_chance(previous, torch.tensor([4]), causal=True).item() == pytest.approx(
        (1 / 2 + 1 / 3 + 1 / 4) / 3)


def test_cluster_index_and_clustered_resamples_move_whole_clusters():
    clusters = cluster_index(["a", "a", "b", "c", "c", "c"])
    assert clusters.tolist() == [0, 0, 1, 2, 2, 2]
    weights = resample_weights(clusters, 200, seed=0)  # [resample example]
    assert weights.shape == (200, 6)
    # examples of one cluster always carry the same weight; each resample draws 3 clusters
    assert torch.equal(weights[:, 0], weights[:, 1]) and torch.equal(weights[:, 3], weights[:, 5])
    draws = weights[:, [0, 2, 3]].sum(-1)
    assert torch.equal(draws, torch.full((200,), 3.0, dtype=torch.float64))
    assert torch.equal(weights, resample_weights(clusters, 200, seed=0))  # seeded


def test_bootstrap_means_weight_examples_and_skip_nan():
    values = torch.tensor([[1.0], [3.0], [math.nan]])
    weights = torch.tensor([[1.0, 1.0, 1.0], [2.0, 0.0, 5.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    means = bootstrap_means(values, weights)[:, 0]
    assert means[0].item() == pytest.approx(2.0) and means[1].item() == pytest.approx(1.0)
    assert math.isnan(means[2].item())  # drew only the NaN example


def test_clustered_interval_is_wider_than_the_naive_one_for_correlated_examples():
    generator = torch.Generator().manual_seed(0)
    cluster_effect = torch.randn(10, generator=generator)  # 10 pages, 8 examples each, strongly correlated
    values = (cluster_effect.repeat_interleave(8) + 0.1 * torch.randn(80, generator=generator))[:, None]
    clusters = torch.arange(10).repeat_interleave(8)
    low_c, high_c = percentile_interval(bootstrap_means(values, resample_weights(clusters, 1000, 1)), 0.95)
    low_n, high_n = percentile_interval(
        bootstrap_means(values, resample_weights(torch.arange(80), 1000, 1)), 0.95)
    assert (high_c - low_c).item() > 2 * (high_n - low_n).item()


def test_p_greater_is_the_normal_tail_and_handles_zero_spread():
    p = p_greater(torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.1, 0.1, 0.1]), null=0.3)
    assert p[0].item() == pytest.approx(0.5 * math.erfc(2 / math.sqrt(2)))  # z = 2
    assert p[1].item() == pytest.approx(0.5) and p[2].item() > 0.8
    exact = p_greater(torch.tensor([0.31, 0.3, math.nan], dtype=torch.float64), torch.zeros(3), null=0.3)
    assert exact[0].item() == 0.0 and exact[1].item() == 1.0 and math.isnan(exact[2].item())


def test_benjamini_hochberg_hand_computed():
    # m = 5 sorted p: .01 .02 .03 .04 .20 -> p·m/rank: .05 .05 .05 .05 .20 (running minimum from the top)
    p = torch.tensor([0.04, 0.01, 0.20, 0.03, 0.02])
    assert benjamini_hochberg(p).tolist() == pytest.approx([0.05, 0.05, 0.20, 0.05, 0.05])
    # a NaN is not part of the family
    q = benjamini_hochberg(torch.tensor([0.01, math.nan, 0.04]))
    assert (q[0].item() == pytest.approx(0.02) and math.isnan(q[1].item())
            and q[2].item() == pytest.approx(0.04))
    assert benjamini_hochberg(torch.tensor([0.9, 0.8])).max().item() <= 1.0


def test_benjamini_hochberg_controls_the_false_discovery_rate_on_nulls():
    generator = torch.Generator().manual_seed(2)
    false_discoveries = 0
    for _ in range(200):
        null = torch.rand(90, generator=generator)  # true nulls
        real = torch.rand(10, generator=generator) * 1e-4  # real effects
        q = benjamini_hochberg(torch.cat([null, real]))
        found = q <= 0.05
        false_discoveries += int(found[:90].sum()) / max(int(found.sum()), 1)
    assert false_discoveries / 200 <= 0.05 * 0.9 + 0.02  # FDR ≤ (m0/m)·α, with some slack


def test_choose_candidate_and_selection_split():
    effects = torch.zeros(3, 4, 1, 2)  # [candidate example layer head]
    effects[1, :, 0, 0] = 0.5
    effects[2, :, 0, 1] = 0.7
    effects[0, 0, 0, 1] = math.nan
    assert choose_candidate(effects).tolist() == [[1, 2]]
    select, test = selection_split(5)
    assert select.tolist() == [True, False, True, False, True] and test.tolist() == [False, True,
                                                                                     False, True, False]
    assert selection_split(1)[0].tolist() == selection_split(1)[1].tolist() == [True]


@pytest.mark.parametrize(("resamples", "confidence"),
                         [(1000, 0.95), (999, 0.99), (7, 0.9), (2, 0.5), (1, 0.95)])
def test_percentile_interval_is_exactly_nanquantile(resamples, confidence):
    """The partial-sort interval equals torch.nanquantile's linear interpolation bit for bit, on complete
    entries, entries with a NaN resample and all-NaN entries (NaN bounds)."""
    torch.manual_seed(resamples)
    means = torch.randn(resamples, 5, 7, dtype=torch.float64)
    means[0, 0, 0] = float("nan")  # one resample drew none of this entry's examples
    means[:, 1, 1] = float("nan")  # never measured
    low, high = percentile_interval(means, confidence)
    tail = (1 - confidence) / 2
    assert torch.allclose(low, torch.nanquantile(means, tail, dim=0).float(), rtol=0, atol=0, equal_nan=True)
    assert torch.allclose(high, torch.nanquantile(means, 1 - tail, dim=0).float(), rtol=0, atol=0,
                          equal_nan=True)
    assert torch.isnan(low[1, 1]) and torch.isnan(high[1, 1])
