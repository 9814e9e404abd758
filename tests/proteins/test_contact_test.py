"""The contact test (probe.proteins.contact_null, probe.proteins.significance): exact values on hand-computed
cases, equality with the recipe written out in plain Python, a positive control (a head whose attention is the
true contact map) and negative controls (a seeded random head, a local head, the true map read in a shuffled
order)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from probe.engine import AttentionBlock
from probe.proteins.contact_null import RangeNull, pair_strata, residue_classes, shift_values
from probe.proteins.precision import RangePairs
from probe.proteins.significance import (
    ALPHA,
    best_significant,
    maxt_adjusted,
    pooled_null,
    pooled_rows,
    shift_draws,
    shift_p_values,
    standardized,
    with_tests,
)
from probe.proteins.sink import ContactSink
from probe.proteins.structure import contact_map, read_structure

STRUCTURES = ("1aki.pdb", "pdb1ejg.pdb", "pdb1ubi.pdb")


# ------------------------------------------------------------------------------------------------------------
# Hand-computed cases
# ------------------------------------------------------------------------------------------------------------


def _nine_residue_case():
    """L = 9; the short range (6–11) holds the pairs of diagonals 6, 7, 8; contacts (0, 6) and (1, 7)."""
    true_map = np.zeros((9, 9), dtype=np.int8)
    for i, j in ((0, 6), (1, 7)):
        true_map[i, j] = true_map[j, i] = 1
    pairs = RangePairs(torch.as_tensor(true_map))
    flat, _ = pairs.pairs["short"]
    return true_map, flat


def test_excess_under_every_shift_by_hand():
    """Pairs in RangePairs order (0,6) (0,7) (0,8) (1,7) (1,8) (2,8); strata without a sequence: the bins 6–7
    (five pairs, two contacts under any shift: a shift rotates diagonal 6 = [1, 1, 0] and keeps its two) and
    8–9 (one pair, none). Top = {(0, 6), (0, 8)}: one pair in each stratum, so the expectation is 1·2/5 + 0 =
    0.4 under every shift; the hits follow diagonal 6 rotated by s: [1, 1, 0] repeating over s = 0 … 8."""
    true_map, flat = _nine_residue_case()
    assert [(int(f) // 9, int(f) % 9) for f in flat] == [(0, 6), (0, 7), (0, 8), (1, 7), (1, 8), (2, 8)]
    null = RangeNull(torch.as_tensor(true_map), flat)
    assert null.strata.tolist() == [0, 0, 1, 0, 0, 0] and null.shifts.tolist() == list(range(9))
    np.testing.assert_allclose(null.rates.numpy(), [[0.4] * 9, [0.0] * 9])
    hits, expected = null.excess(torch.tensor([0, 2]))
    assert hits.tolist() == [1, 1, 0] * 3
    np.testing.assert_allclose(expected.numpy(), [0.4] * 9)
    excess = (hits - expected).numpy()[None]  # [head shift]
    assert shift_p_values(excess)[0] == pytest.approx(6 / 9)  # six shifts reach the observed 0.6
    # z: the hits are 1 with frequency 2/3 (mean 2/3, sd √(2/9)); observed 1
    assert standardized(excess)[0, 0] == pytest.approx((1 - 2 / 3) / np.sqrt(2 / 9))


def test_strata_split_by_residue_class_and_identity():
    """Diagonal 6 of "CAVCGGCAV": (0,6) C–C identical, (1,7) A–A identical, (2,8) V–V identical; diagonal 7:
    (0,7) C–A, (1,8) A–V; diagonal 8: (0,8) C–V. Bins 6–7 and 8–9; classes C = cysteine, A and V aliphatic.
    Strata: {C–C same}, {aliphatic–aliphatic same}: (1,7) and (2,8), {C–aliphatic}: (0,7), {aliph.–aliph.
    different}: (1,8), and (0,8) alone in bin 8–9."""
    _, flat = _nine_residue_case()
    i, j = flat // 9, flat % 9
    strata = pair_strata(i, j, "CAVCGGCAV").tolist()  # order (0,6) (0,7) (0,8) (1,7) (1,8) (2,8)
    assert strata[3] == strata[5]  # A–A and V–V: aliphatic pair, identical residues
    assert len({strata[0], strata[1], strata[2], strata[3], strata[4]}) == 5
    assert residue_classes("AVILMFWYSTNQKRHDEGPCX").tolist() == (
        [0] * 5 + [1] * 3 + [2] * 4 + [3] * 3 + [4] * 2 + [5, 6, 7, 8])
    assert shift_values(300).numel() == 256 and int(shift_values(300)[0]) == 0
    assert shift_values(40).tolist() == list(range(40))


def _excess_written_out(true_map: np.ndarray, sequence: str | None, top_pairs, low: int, high: int | None):
    """The recipe in plain Python: every known pair of the range, its stratum key, and per shift s the
    contacts of the shifted map (each diagonal rotated by s) among the top pairs minus
    Σ_σ k_σ·(contacts of σ)/|σ|."""
    length = len(true_map)
    edges = [6, 8, 10, 12, 15, 19, 24, 32, 48, 72, 108]
    classes = {**dict.fromkeys("AVILM", 0), **dict.fromkeys("FWY", 1), **dict.fromkeys("STNQ", 2),
               **dict.fromkeys("KRH", 3), **dict.fromkeys("DE", 4), "G": 5, "P": 6, "C": 7}

    def key(i, j):
        separation_bin = sum(edge <= j - i for edge in edges)
        if sequence is None:
            return (separation_bin,)
        a, b = classes.get(sequence[i], 8), classes.get(sequence[j], 8)
        return (separation_bin, min(a, b), max(a, b), sequence[i] == sequence[j])

    pairs = [(i, j) for i in range(length) for j in range(i + 1, length)
             if true_map[i, j] >= 0 and j - i >= low and (high is None or j - i <= high)]
    strata = {}
    for pair in pairs:
        strata.setdefault(key(*pair), []).append(pair)
    out = []
    for s in range(length):
        def shifted(i, j, s=s):
            d = j - i
            moved = (i + s) % (length - d)
            return int(true_map[moved, moved + d] == 1)
        hits = sum(shifted(i, j) for i, j in top_pairs)
        expected = sum(sum(shifted(*p) for p in members) / len(members) * sum(key(*t) == k for t in top_pairs)
                       for k, members in strata.items())
        out.append(hits - expected)
    return np.array(out)


@pytest.mark.parametrize("use_sequence", [False, True])
def test_excess_equals_the_recipe_written_out(structures_dir, use_sequence):
    structure = read_structure(f"{structures_dir}/pdb1ejg.pdb")  # crambin, 46 residues, three disulfides
    true_map = contact_map(structure)
    sequence = structure.sequence if use_sequence else None
    pairs = RangePairs(torch.as_tensor(true_map))
    generator = np.random.default_rng(3)
    for name, (low, high) in (("short", (6, 11)), ("medium", (12, 23)), ("long", (24, None))):
        flat, _ = pairs.pairs[name]
        null = RangeNull(torch.as_tensor(true_map), flat, sequence)
        top = torch.as_tensor(generator.choice(flat.numel(), size=min(46, flat.numel()), replace=False))
        hits, expected = null.excess(top)
        top_pairs = [(int(flat[t]) // 46, int(flat[t]) % 46) for t in top]
        np.testing.assert_allclose((hits - expected).numpy(),
                                   _excess_written_out(true_map, sequence, top_pairs, low, high), atol=1e-9)


def test_maxt_by_hand_and_against_the_algorithm_written_out():
    """Two heads, four shifts. Head 0 [3, 0, 1, 2] → z [1.342, −1.342, −0.447, 0.447] (mean 1.5, sd √1.25);
    head 1 [1, 2, 0, 1] → z [0, 1.414, −1.414, 0]. Rank 1 is head 0: max over both heads per shift [1.342,
    1.414, −0.447, 0.447] reaches 1.342 twice: 2/4. Rank 2, head 1 alone: [0, 1.414, −1.414, 0] reaches 0
    three times: 3/4, kept ≥ 2/4."""
    null = np.array([[3.0, 0, 1, 2], [1.0, 2, 0, 1]])
    np.testing.assert_allclose(maxt_adjusted(null), [0.5, 0.75])
    np.testing.assert_allclose(shift_p_values(null), [0.25, 0.75])
    # a constant head is untestable: NaN, left out of the family
    assert np.isnan(maxt_adjusted(np.array([[1.0, 1, 1, 1], [3.0, 0, 1, 2]]))[0])
    rng = np.random.default_rng(0)
    for _ in range(5):
        null = rng.normal(size=(6, 30)) + rng.normal(size=(6, 1))
        z = (null - null.mean(1, keepdims=True)) / null.std(1, keepdims=True)
        order = sorted(range(6), key=lambda h: -z[h, 0])
        expected, running = {}, 0.0
        for rank, h in enumerate(order):  # Westfall & Young (1993) algorithm 2.8, written out
            rest = order[rank:]
            count = sum(max(z[r, s] for r in rest) >= z[h, 0] - 1e-12 for s in range(30))
            running = max(running, count / 30)
            expected[h] = running
        np.testing.assert_allclose(maxt_adjusted(null), [expected[h] for h in range(6)])


def test_pooled_draws_keep_the_observed_first_and_sum_the_proteins():
    picks = shift_draws([3, 5], draws=50, seed=1)
    assert picks.shape == (2, 51) and (picks[:, 0] == 0).all()
    assert picks[0].max() < 3 and picks[1].max() < 5 and len(set(picks[1])) > 1
    a, b = np.arange(6.0).reshape(2, 3), 10 * np.arange(10.0).reshape(2, 5)
    pooled = pooled_null([a, b], picks)
    np.testing.assert_allclose(pooled[:, 0], a[:, 0] + b[:, 0])
    np.testing.assert_allclose(pooled[1, 7], a[1, picks[0, 7]] + b[1, picks[1, 7]])


# ------------------------------------------------------------------------------------------------------------
# Controls through the sink
# ------------------------------------------------------------------------------------------------------------


def _heads_alpha(true_map: np.ndarray, seed: int, order: np.ndarray | None = None) -> torch.Tensor:
    """α [1 head token token] over BOS + L residues + EOS: head 0 attends to the residue's true contacts at
    |i − j| ≥ 6 (0.8 of its weight; with `order`, the contacts of the residues in that order: a perfect
    predictor reading a shuffled sequence), head 1 a seeded random softmax, head 2 its neighbours i ± 1."""
    length = true_map.shape[0]
    tokens = length + 2
    generator = torch.Generator().manual_seed(seed)
    separation = np.abs(np.subtract.outer(np.arange(length), np.arange(length)))
    target = ((true_map == 1) & (separation >= 6)).astype(np.float32)
    if order is not None:
        target = target[np.ix_(order, order)]
    rows = torch.as_tensor(target)
    rows = rows / rows.sum(-1, keepdim=True).clamp(min=1)
    alpha = torch.zeros(1, 3, tokens, tokens)
    alpha[0, 0] = 0.2 / tokens
    alpha[0, 0, 1:-1, 1:-1] += 0.8 * rows
    alpha[0, 1] = torch.softmax(torch.randn(tokens, tokens, generator=generator) * 3.0, dim=-1)
    index = torch.arange(1, tokens - 1)
    alpha[0, 2, index, (index - 1).clamp(min=1)] += 0.5
    alpha[0, 2, index, (index + 1).clamp(max=tokens - 2)] += 0.5
    return alpha


def _table(true_map, sequence, alpha, record):
    tokens = alpha.shape[-1]
    sink = ContactSink(torch.zeros(1, 3), 0.0, torch.full((1, tokens), 5),
                       torch.ones(1, tokens, dtype=torch.long), None, true_maps=[true_map], per_head=True,
                       regression=False, residues=[sequence])
    sink.update(AttentionBlock(step=0, layer=0, heads=(0, 1, 2), query_start=0, n_query=tokens,
                               query_offset=0, n_key=tokens, alpha=alpha.contiguous()))
    return sink.head_table(0).assign(record=record)


def test_planted_contact_map_head_is_significant_and_the_controls_are_not(structures_dir):
    tables = []
    for index, name in enumerate(STRUCTURES):
        structure = read_structure(f"{structures_dir}/{name}")
        true_map = contact_map(structure)
        alpha = _heads_alpha(true_map, seed=index)
        table = _table(true_map, structure.sequence, alpha, index).set_index("name")
        length = len(structure.sequence)
        for r in ("short", "medium", "long"):
            # the planted head beats (almost) every shift: p_fwer ≥ 1 / L, the smallest L shifts allow;
            # crambin's short range (46 residues, mostly helix) lets one shift's maximum reach it: 2 / 46
            assert table.loc["L0H0", f"p_fwer_L_{r}"] <= 2 / length
            if r == "long" or length > 46:
                assert table.loc["L0H0", f"p_fwer_L_{r}"] == pytest.approx(1 / length)
            assert bool(table.loc["L0H0", f"significant_L_{r}"])
            assert table.loc["L0H0", f"z_L_{r}"] > 3
            for control in ("L0H1", "L0H2"):  # random and local heads
                assert not bool(table.loc[control, f"significant_L_{r}"])
        tables.append(table.reset_index())
    summary = pooled_rows(pd.concat(tables, ignore_index=True)).set_index("head")
    for r in ("short", "medium", "long"):
        assert summary.loc[0, f"p_fwer_L_{r}"] == pytest.approx(1 / 1000)  # 999 draws and the observed
        assert summary.loc[0, f"significant_L_{r}"]
        assert summary.loc[0, f"enrichment_L_{r}"] > 3
        assert not summary.loc[1, f"significant_L_{r}"] and not summary.loc[2, f"significant_L_{r}"]
        assert summary.loc[1, f"p_fwer_L_{r}"] > ALPHA and summary.loc[2, f"p_fwer_L_{r}"] > ALPHA
        assert int(best_significant(summary.reset_index(), r)["head"]) == 0


def test_a_perfect_predictor_reading_a_shuffled_sequence_labels_nothing(structures_dir):
    """Negative control: head 0 holds the true contacts of the residues in a shuffled order (what a perfect
    contact predictor returns for the shuffled sequence), scored against the real structure."""
    for index, name in enumerate(STRUCTURES):
        structure = read_structure(f"{structures_dir}/{name}")
        true_map = contact_map(structure)
        order = np.random.default_rng(index).permutation(len(structure.sequence))
        shuffled = "".join(structure.sequence[i] for i in order)
        table = _table(true_map, shuffled, _heads_alpha(true_map, seed=index, order=order), index)
        for r in ("short", "medium", "long"):
            assert not table[f"significant_L_{r}"].fillna(False).any(), (name, r)


def test_untrained_p99_is_the_bar_and_no_control_leaves_it_nan():
    """with_tests: untrained_p99 is the 99th percentile of the twins' P@L; a head with p_fwer ≤ 0.05 below it
    is not significant; without twins the bar is NaN and p_fwer decides."""
    null = np.zeros((2, 20))
    null[0, 0], null[0, 1:] = 5.0, np.linspace(-1, 1, 19)  # head 0 beats every shift: p_fwer 1/20
    null[1] = np.linspace(-1, 1, 20)  # head 1 is at its smallest unshifted
    table = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "p_at_L_long": [0.30, 0.10],
                          "hits_L_long": [6.0, 2.0], "top_L_long": [20.0, 20.0],
                          "n_known_long": [100.0, 100.0], "n_true_long": [5.0, 5.0],
                          "null_excess_L_long": list(null)})
    plain = with_tests(table)
    assert plain.loc[0, "p_fwer_L_long"] == pytest.approx(1 / 20) and bool(plain.loc[0, "significant_L_long"])
    assert np.isnan(plain.loc[0, "untrained_p99_L_long"]) and not plain.loc[1, "significant_L_long"]
    twins = pd.DataFrame({"p_at_L_long": np.linspace(0.0, 0.5, 101)})
    barred = with_tests(table, twins)
    assert barred.loc[0, "untrained_p99_L_long"] == pytest.approx(0.495)
    assert not barred.loc[0, "significant_L_long"]  # P@L 0.30 is below the twins' 0.495
    lower = with_tests(table, pd.DataFrame({"p_at_L_long": np.linspace(0.0, 0.2, 101)}))
    assert bool(lower.loc[0, "significant_L_long"])
    # the retired exchangeable p only on request: the hypergeometric tail P(X ≥ 6); the short range (no
    # columns) is left alone
    from scipy.stats import hypergeom
    assert plain.filter(like="exchangeable").columns.empty
    wide = with_tests(table, exchangeable=True)
    assert wide.loc[0, "p_exchangeable_L_long"] == pytest.approx(hypergeom.sf(5, 100, 5, 20))
    assert plain.filter(like="_short").columns.empty and wide.filter(like="_short").columns.empty
    assert with_tests(wide).columns.tolist() == plain.columns.tolist()  # asked for no more: dropped
