"""Which heads know contacts: a test whose null keeps what structure and sequence fix, and untrained twins.

For one protein, one head and one sequence-separation range (short 6–11, medium 12–23, long ≥ 24), let N
be the known pairs i < j of the range, C the contacts among them (the **base rate** C / N is what a random
ranking gets), and let the head's k = min(L, N) top-scoring pairs of APC(sym(α)) hold h contacts (P@L = h / k,
``enrichment`` = P@L / base rate).

**The test** (:mod:`probe.proteins.contact_null` computes its parts). The head's **excess** is h minus what a
predictor knowing only separation and residue types gets on the same strata, Σ_σ k_σ·C_σ/N_σ
(``strata_rate`` = that expectation / k); its null distribution comes from **diagonal shifts** of the contact
map, which keep each pair's separation, each diagonal's contacts and the map's clumps and break only its
alignment with the sequence. Per head, ``p_value`` = #{shifts s: excess_s ≥ excess_0} / #shifts (shift 0, the
map as it is, counted: a permutation p-value, no smaller than 1 / #shifts), and ``z`` = (excess_0 −
mean_s) / sd_s. Over every head *and range* of a table the family-wise error is controlled by Westfall &
Young's step-down maxT (Westfall & Young 1993, *Resampling-Based Multiple Testing*, algorithm 2.8): each
(head, range)'s excess standardised over the shifts, each shift's maximum over those ranked at or below,
``p_fwer`` the fraction of shifts whose maximum reaches the observed one (made monotone in rank). One shift
moves every head's map and every range together, so their dependence is kept, and the chance that a model
that knows no contacts gets *any* significant head in a protein's table is at most :data:`ALPHA`. A protein of
L residues has at most L shifts: p_fwer ≥ 1 / L (L ≥ 20 can reach 0.05).

**The untrained twins** (:mod:`probe.untrained`): the same inputs through K copies of the architecture with
random weights; ``untrained_p99`` is the 99th percentile of their heads' P@L in the range (over all K × heads
heads). A head is **significant** where p_fwer ≤ :data:`ALPHA` (0.05) *and* its P@L is above
``untrained_p99``; without twins (``control=0``) ``untrained_p99`` is NaN and p_fwer decides alone. NaN
p-values (a range without a known pair or without a contact, a head whose excess does not move under the
shifts) are unknown, not tested.

**Over a set of proteins** hits, draws and expectations are summed per head; the null draws one shift per
protein at random (:data:`POOLED_DRAWS` draws, seeded, the same draw for every range, plus the identity
first), so ``p_value`` and ``p_fwer`` are Monte Carlo permutation p-values, ``(1 + #{draws ≥ observed}) /
(1 + draws)``; the twins' P@L are pooled per twin head the same way.

The old test is retired from the default tables and kept, on request only (``exchangeable=True``;
``probe contacts --hypergeometric-exchangeable-pairs``), under names that say what it assumes:
``p_exchangeable`` = P(X ≥ h), X ~ Hypergeometric(N, C, k) — the top k a random draw from *exchangeable*
pairs, which they are not (contacts and an untrained head's attention both follow separation and residue
types; on random-weight models it flags a head in 98.6 % of runs) — and ``q_exchangeable``, its
Benjamini–Hochberg q over one protein's heads (:func:`with_exchangeable`). Pooled, the sum of independent
hypergeometrics, exactly.

Columns per range r (:func:`range_columns`): ``hits_L_r, top_L_r, n_known_r, n_true_r, base_rate_r,
enrichment_L_r, strata_rate_r, z_L_r, p_value_L_r, p_fwer_L_r, untrained_p99_L_r, significant_L_r`` (and
on request ``p_exchangeable_L_r, q_exchangeable_L_r``), and per protein the null itself,
``null_excess_L_r`` (the excess under every shift, shift 0 first; what the set's summary pools).

Longer than 450 lines because the per-protein tests, the pooled tests over a set and their controls share
the same nulls and column names, with the running examples tests/project/test_doctests.py runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import hypergeom

from probe import untrained

ALPHA = 0.05  # family-wise error over a table's heads at which a head is called significant (and BH's FDR)
RANGE_NAMES = ("short", "medium", "long")
UNTRAINED_QUANTILE = untrained.UNTRAINED_QUANTILE  # the twins' bar (probe.untrained, shared with probe label)
POOLED_DRAWS = 999
POOLED_SEED = 0
EXCHANGEABLE = ("p_exchangeable_L", "q_exchangeable_L")  # the retired test's columns (per range), on request


def range_columns(name: str, exchangeable: bool = False) -> list[str]:
    """The significance columns of one range, in table order (without the per-protein ``null_excess_L_r``);
    `exchangeable`: with the hypergeometric ``p_exchangeable_L_r, q_exchangeable_L_r`` at the end."""
    return [f"hits_L_{name}", f"top_L_{name}", f"n_known_{name}", f"n_true_{name}", f"base_rate_{name}",
            f"enrichment_L_{name}", f"strata_rate_{name}", f"z_L_{name}", f"p_value_L_{name}",
            f"p_fwer_L_{name}", f"untrained_p99_L_{name}", f"significant_L_{name}",
            *([f"{column}_{name}" for column in EXCHANGEABLE] if exchangeable else [])]


def exchangeable_columns(table: pd.DataFrame) -> list[str]:
    """The retired test's columns ``p_exchangeable_L_r, q_exchangeable_L_r`` that `table` has."""
    return [f"{column}_{name}" for name in RANGE_NAMES for column in EXCHANGEABLE
            if f"{column}_{name}" in table]


# ------------------------------------------------------------------------------------------------------------
# The permutation test
# ------------------------------------------------------------------------------------------------------------


def _testable(null: np.ndarray) -> np.ndarray:
    """[head] bool: the rows whose null is finite and moves."""
    finite = np.isfinite(null).all(1) if null.size else np.zeros(len(null), bool)
    return finite & (np.ptp(np.where(np.isfinite(null), null, 0.0), axis=1) > 0) if null.shape[1] else finite


def shift_p_values(null: np.ndarray) -> np.ndarray:
    """Per head, the permutation p-value #{s: null[s] ≥ null[0]} / #s (column 0 the observed).

    Parameters
    ----------
    null : array-like
        [head shift] the statistic under every shift (or draw), the observed first.

    Returns
    -------
    numpy.ndarray
        [head] float64; NaN where the row is not finite or does not move.

    Examples
    --------
    >>> from probe.proteins.significance import shift_p_values
    >>> null = np.array([[5.0, 1.0, 2.0, 0.0], [1.0, 3.0, 0.5, 2.0], [2.0, 2.0, 2.0, 2.0]])  # observed first
    >>> shift_p_values(null)  # the third head never moves: not testable
    array([0.25, 0.75,  nan])
    """
    null = np.asarray(null, dtype=np.float64).reshape(len(null), -1)
    p = np.full(len(null), np.nan)
    ok = _testable(null)
    if ok.any():
        rows = null[ok]
        p[ok] = (rows >= rows[:, :1] - 1e-9).mean(1)
    return p


def standardized(null: np.ndarray) -> np.ndarray:
    """[head shift] (null − mean) / sd per head over the shifts; NaN rows where not testable."""
    null = np.asarray(null, dtype=np.float64).reshape(len(null), -1)
    out = np.full(null.shape, np.nan)
    ok = _testable(null)
    if ok.any():
        rows = null[ok]
        out[ok] = (rows - rows.mean(1, keepdims=True)) / rows.std(1, keepdims=True)
    return out


def maxt_adjusted(null: np.ndarray) -> np.ndarray:
    """Westfall & Young's step-down maxT adjusted p-values over the heads (family-wise error).

    Each head's row is standardised over the shifts; heads are ranked by their observed (column 0) value; for
    the head of rank j the p-value is the fraction of shifts whose maximum over the heads of rank ≥ j reaches
    its observed value, then made monotone in rank.

    Parameters
    ----------
    null : array-like
        [head shift] the statistic under every shift, the observed first (the same shifts for every head).

    Returns
    -------
    numpy.ndarray
        [head] float64 adjusted p-values; NaN for the heads that are not testable (left out of the family).

    Examples
    --------
    >>> from probe.proteins.significance import maxt_adjusted
    >>> null = np.array([[5.0, 1.0, 2.0, 0.0], [1.0, 3.0, 0.5, 2.0], [2.0, 2.0, 2.0, 2.0]])
    >>> maxt_adjusted(null)
    array([0.25, 0.75,  nan])
    """
    z = standardized(null)
    adjusted = np.full(len(z), np.nan)
    ok = np.flatnonzero(np.isfinite(z[:, 0])) if z.size else np.array([], dtype=int)
    if len(ok) == 0:
        return adjusted
    order = ok[np.argsort(-z[ok, 0], kind="stable")]  # rank 1 first
    ranked = z[order]  # [rank shift]
    successive = np.maximum.accumulate(ranked[::-1], axis=0)[::-1]  # max over the ranks ≥ j, per shift
    raw = (successive >= ranked[:, :1] - 1e-9).mean(1)  # [rank]
    adjusted[order] = np.maximum.accumulate(raw)
    return adjusted


# ------------------------------------------------------------------------------------------------------------
# The exchangeable (hypergeometric) p-values, kept under their assumption's name
# ------------------------------------------------------------------------------------------------------------


def hypergeometric_p_value(hits: int, known: int, contacts: int, drawn: int) -> float:
    """P(X ≥ hits) for X ~ Hypergeometric(population `known`, successes `contacts`, draws `drawn`); NaN
    without draws (``p_exchangeable``)."""
    if drawn <= 0 or known <= 0:
        return float("nan")
    return float(hypergeom.sf(int(hits) - 1, int(known), int(contacts), int(drawn)))


def hypergeometric_p_values(hits, known, contacts, drawn) -> np.ndarray:
    """:func:`hypergeometric_p_value` of arrays at once ([test] each); NaN without draws or known pairs."""
    hits, known, contacts, drawn = (np.nan_to_num(np.asarray(x, dtype=np.float64)) for x in
                                    (hits, known, contacts, drawn))
    ok = (drawn > 0) & (known > 0)
    p = np.full(hits.shape, np.nan)
    if ok.any():
        p[ok] = hypergeom.sf(hits[ok] - 1, known[ok], contacts[ok], drawn[ok])
    return p


def pooled_p_value(hits: Sequence[int], known: Sequence[int], contacts: Sequence[int],
                   drawn: Sequence[int]) -> float:
    """P(Σ X_p ≥ Σ hits) for independent X_p ~ Hypergeometric(known_p, contacts_p, drawn_p), exactly (the pmfs
    convolved); proteins without draws skipped, NaN when none is left (the pooled ``p_exchangeable``)."""
    total_pmf = np.ones(1)
    observed = 0
    used = False
    for h, n, c, k in zip(hits, known, contacts, drawn, strict=True):
        if k <= 0 or n <= 0:
            continue
        used = True
        support = np.arange(int(k) + 1)
        total_pmf = np.convolve(total_pmf, hypergeom.pmf(support, int(n), int(c), int(k)))  # [Σk + 1]
        observed += int(h)
    if not used:
        return float("nan")
    return float(min(1.0, max(0.0, total_pmf[observed:].sum())))


def with_exchangeable(table: pd.DataFrame, by: str | None = "record") -> pd.DataFrame:
    """`table` (per-head rows with ``hits_L_r, n_known_r, n_true_r, top_L_r``) with the retired test's
    ``p_exchangeable_L_r`` (the hypergeometric tail, which assumes a head's top pairs are drawn from
    exchangeable pairs) and ``q_exchangeable_L_r`` (Benjamini–Hochberg over the heads of one protein: the rows
    of one `by` value, or all rows where `table` has no such column).

    Examples
    --------
    >>> from probe.proteins.significance import with_exchangeable
    >>> table = pd.DataFrame({"hits_L_long": [4.0, 1.0], "n_known_long": [100.0, 100.0],
    ...                       "n_true_long": [5.0, 5.0], "top_L_long": [20.0, 20.0]})
    >>> with_exchangeable(table).round(4).filter(like="exchangeable")  # P(X ≥ h), X ~ Hypergeom(100, 5, 20)
       p_exchangeable_L_long  q_exchangeable_L_long
    0                 0.0054                 0.0107
    1                 0.6807                 0.6807
    """
    table = table.copy()
    groups = (table.groupby(by, sort=False).indices.values() if by is not None and by in table
              else [np.arange(len(table))])
    for name in RANGE_NAMES:
        if f"hits_L_{name}" not in table:
            continue
        counts = [table[f"{c}_{name}"].to_numpy(dtype=np.float64)
                  for c in ("hits_L", "n_known", "n_true", "top_L")]
        p = hypergeometric_p_values(*counts)  # [row]
        q = np.full(len(table), np.nan)
        for rows in groups:
            q[rows] = benjamini_hochberg(p[rows])
        table[f"p_exchangeable_L_{name}"], table[f"q_exchangeable_L_{name}"] = p, q
    return table


def benjamini_hochberg(p_values) -> np.ndarray:
    """Benjamini–Hochberg q-values (step-up, monotone, capped at 1) of [test] p-values; NaN stays NaN and is
    not a test."""
    p = np.asarray(p_values, dtype=np.float64)
    q = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    m = len(finite)
    if m == 0:
        return q
    order = finite[np.argsort(p[finite], kind="stable")]
    ranked = p[order] * m / np.arange(1, m + 1)  # p_(i) · m / i
    ranked = np.minimum.accumulate(ranked[::-1])[::-1]  # q_(i) = min over j ≥ i
    q[order] = np.minimum(ranked, 1.0)
    return q


# ------------------------------------------------------------------------------------------------------------
# Tables
# ------------------------------------------------------------------------------------------------------------


def head_row(hits: int, drawn: int, known: int, contacts: int, name: str,
             null_hits: np.ndarray | None = None, null_expected: np.ndarray | None = None) -> dict:
    """The per-protein columns of one head and range; the table-wide ones (p_fwer, significant,
    untrained_p99) NaN until :func:`with_tests`.

    Parameters
    ----------
    hits, drawn, known, contacts : int
        h, k, N, C of the module docstring.
    name : str
        The range.
    null_hits, null_expected : numpy.ndarray, optional
        [shift] the head's hits and the strata's expectation under every shift, shift 0 first
        (:meth:`probe.proteins.contact_null.RangeNull.excess`); None: no permutation test yet (NaN, and
        :func:`null_columns` can add it).
    """
    base = contacts / known if known else float("nan")
    precision = hits / drawn if drawn else float("nan")
    with np.errstate(invalid="ignore", divide="ignore"):
        enrichment = precision / base if drawn and base > 0 else float("nan")
    nan = float("nan")
    row = {f"hits_L_{name}": float(hits), f"top_L_{name}": float(drawn), f"n_known_{name}": float(known),
           f"n_true_{name}": float(contacts), f"base_rate_{name}": base, f"enrichment_L_{name}": enrichment,
           f"strata_rate_{name}": nan, f"z_L_{name}": nan, f"p_value_L_{name}": nan, f"p_fwer_L_{name}": nan,
           f"untrained_p99_L_{name}": nan, f"significant_L_{name}": pd.NA,
           f"null_excess_L_{name}": np.zeros(0)}
    if null_hits is not None:
        row.update(null_columns(null_hits, null_expected, name, drawn))
    return row


def null_columns(null_hits: np.ndarray, null_expected: np.ndarray, name: str, drawn: float) -> dict:
    """``strata_rate, z_L, p_value_L, null_excess_L`` of one head and range from its hits and the strata's
    expectation under every shift ([shift] each, shift 0 first); NaN without draws."""
    if not drawn:
        return {}
    excess = np.asarray(null_hits, np.float64) - np.asarray(null_expected, np.float64)  # [shift]
    return {f"strata_rate_{name}": float(null_expected[0]) / drawn,
            f"z_L_{name}": float(standardized(excess[None])[0, 0]),
            f"p_value_L_{name}": float(shift_p_values(excess[None])[0]),
            f"null_excess_L_{name}": excess}


def _decide(table: pd.DataFrame, name: str) -> pd.arrays.BooleanArray:
    """significant_L_{name}: p_fwer ≤ ALPHA and P@L above the twins' p99 (where there are twins); <NA> where
    p_fwer is NaN."""
    column = f"pooled_p_at_L_{name}" if f"pooled_p_at_L_{name}" in table else f"p_at_L_{name}"
    p_fwer, precision, bar = (table[c].to_numpy(dtype=np.float64) for c in
                              (f"p_fwer_L_{name}", column, f"untrained_p99_L_{name}"))
    with np.errstate(invalid="ignore"):
        decided = (p_fwer <= ALPHA) & (np.isnan(bar) | (precision > bar))
    return pd.arrays.BooleanArray(decided, np.isnan(p_fwer))  # masked (<NA>) where untested


def with_tests(table: pd.DataFrame, control: pd.DataFrame | None = None, *,
               exchangeable: bool = False) -> pd.DataFrame:
    """`table` (one row per head of one protein) with the table-wide columns: ``p_fwer_L_r``, maxT over every
    (head, range) of the table at once from the rows' ``null_excess_L_r`` (one shift moves every range: the
    family is the whole table); ``untrained_p99_L_r`` from `control` (the twins' heads, ``p_at_L_r`` columns;
    None: NaN) and ``significant_L_r``. `exchangeable`: also the retired hypergeometric
    ``p_exchangeable_L_r, q_exchangeable_L_r`` (:func:`with_exchangeable`); without it they are dropped.

    Examples
    --------
    >>> from probe.proteins.contacts import predict_contacts
    >>> from probe.proteins.significance import with_tests
    >>> from probe.proteins.structure import contact_map, read_structure
    >>> esm = probe.load("zoo:esm-random")  # random weights: nothing should be significant
    >>> crambin = read_structure("tests/data/pdb1ejg.pdb", chain="A")
    >>> true_map = contact_map(crambin, sequence=crambin.sequence)  # [L L] int8
    >>> result = predict_contacts(esm, crambin.sequence, true_map=true_map)
    >>> table = with_tests(result.heads)  # predict_contacts has called it; calling again recomputes the same
    >>> table[["name", "p_value_L_long", "p_fwer_L_long", "significant_L_long"]].head(3)
       name  p_value_L_long  p_fwer_L_long  significant_L_long
    0  L0H0        0.260870       1.000000               False
    1  L0H1        0.152174       0.956522               False
    2  L0H2        0.065217       0.630435               False
    """
    table = with_exchangeable(table, by=None) if exchangeable else table.drop(
        columns=exchangeable_columns(table))
    names = [name for name in RANGE_NAMES if f"hits_L_{name}" in table]
    null = _stack([list(table.get(f"null_excess_L_{name}", [()] * len(table))) for name in names])
    adjusted = maxt_adjusted(null) if null.shape[1] else np.full(len(null), np.nan)  # [range·head]
    for index, name in enumerate(names):
        table[f"p_fwer_L_{name}"] = adjusted[index * len(table):(index + 1) * len(table)]
        table[f"untrained_p99_L_{name}"] = untrained_quantile(control, f"p_at_L_{name}")
        table[f"significant_L_{name}"] = _decide(table, name)
    return table


def _stack(groups: Sequence[Sequence]) -> np.ndarray:
    """[row shift] float64 of the rows of every group, one after the other (group-major); rows of another
    width than the widest are NaN (not testable)."""
    rows = [row for group in groups for row in group]
    width = max((len(row) for row in rows), default=0)
    null = np.full((len(rows), width), np.nan)
    for index, row in enumerate(rows):
        if len(row) == width and width:
            null[index] = row
    return null


def untrained_quantile(control: pd.DataFrame | None, column: str) -> float:
    """The twins' bar (:func:`probe.untrained.untrained_bar`) of `column` over every twin head of `control`
    (NaN without one, or without a value)."""
    if control is None or column not in control:
        return float("nan")
    return untrained.untrained_bar(control[column].to_numpy(dtype=np.float64))


def shift_draws(widths: Sequence[int], draws: int = POOLED_DRAWS, seed: int = POOLED_SEED) -> np.ndarray:
    """[protein 1 + draws] shift indices: draw 0 leaves every protein as it is, each other draw picks one of
    protein p's `widths[p]` shifts at random (seeded)."""
    rng = np.random.default_rng(seed)
    picks = np.zeros((len(widths), 1 + draws), dtype=np.int64)
    for index, width in enumerate(widths):
        picks[index, 1:] = rng.integers(0, max(int(width), 1), size=draws)
    return picks


def pooled_null(tables: Sequence[np.ndarray], picks: np.ndarray) -> np.ndarray:
    """[head 1 + draws] the pooled excess Σ_p tables[p][:, picks[p]] (`tables`: per protein [head shift], the
    same heads in the same order; `picks` from :func:`shift_draws`)."""
    total = None
    for null, pick in zip(tables, picks, strict=True):
        part = null[:, pick]
        total = part if total is None else total + part
    return total


def pooled_rows(heads: pd.DataFrame, control: pd.DataFrame | None = None, draws: int = POOLED_DRAWS,
                seed: int = POOLED_SEED, *, exchangeable: bool = False) -> pd.DataFrame:
    """Per head over a set of proteins: pooled hits, draws and expectations; the test on the pooled excess.

    Parameters
    ----------
    heads : pandas.DataFrame
        One row per protein × head: ``record, layer, head``, :func:`range_columns` and ``null_excess_L_r``.
    control : pandas.DataFrame, optional
        The twins' rows (``record, seed, layer, head, hits_L_r, top_L_r``); None: no untrained control.
    draws, seed : int
        The Monte Carlo draws of the pooled null (one shift per protein, the same draw for every range) and
        their seed.
    exchangeable : bool, default False
        Also the retired hypergeometric test of the pooled hits (``p_exchangeable_L_r, q_exchangeable_L_r``,
        the sum of independent hypergeometrics; it assumes exchangeable pairs).

    Returns
    -------
    pandas.DataFrame
        One row per (layer, head): ``layer, head`` and per range ``hits_L_r, top_L_r, pooled_p_at_L_r,
        base_rate_r, enrichment_L_r, strata_rate_r, z_L_r, p_value_L_r, p_fwer_L_r, untrained_p99_L_r,
        significant_L_r`` (p_fwer: maxT over every head and range; with `exchangeable`,
        ``p_exchangeable_L_r, q_exchangeable_L_r`` after them).

    Examples
    --------
    >>> from pathlib import Path
    >>> from probe.proteins.sets import ContactOptions, analyse_unit, heads_table
    >>> from probe.proteins.significance import pooled_rows
    >>> from probe.proteins.units import structure_units
    >>> esm = probe.load("zoo:esm-random")
    >>> units, _ = structure_units([Path("tests/data/pdb1ubi.pdb"), Path("tests/data/pdb1ejg.pdb")])
    >>> heads = heads_table([analyse_unit(esm, unit, ContactOptions()) for unit in units])
    >>> pooled = pooled_rows(heads, draws=200)  # one row per head over both proteins
    >>> pooled[["layer", "head", "hits_L_long", "top_L_long", "p_value_L_long", "significant_L_long"]].head(2)
       layer  head  hits_L_long  top_L_long  p_value_L_long  significant_L_long
    0      0     0         10.0       122.0         0.58209               False
    1      0     1         19.0       122.0         0.01990               False
    """
    keys = heads[["layer", "head"]].drop_duplicates().sort_values(["layer", "head"])
    index = pd.MultiIndex.from_frame(keys)
    out = keys.reset_index(drop=True).astype({"layer": int, "head": int})
    by_head = [heads["layer"], heads["head"]]
    nulls = _protein_nulls(heads, index)
    records = sorted({record for per_range in nulls.values() for record in per_range})
    widths = [next(per_range[record].shape[1] for per_range in nulls.values() if record in per_range)
              for record in records]
    picks = dict(zip(records, shift_draws(widths, draws, seed), strict=True))
    pooled = []
    for name in RANGE_NAMES:
        sums = {c: heads[f"{c}_{name}"].fillna(0).groupby(by_head).sum().reindex(index).to_numpy()
                for c in ("hits_L", "top_L")}
        hits, total = sums["hits_L"], sums["top_L"]
        with np.errstate(invalid="ignore", divide="ignore"):
            expected = (heads[f"top_L_{name}"] * heads[f"n_true_{name}"]
                        / heads[f"n_known_{name}"].where(heads[f"n_known_{name}"] > 0))
            expected = expected.fillna(0).groupby(by_head).sum().reindex(index).to_numpy()
            strata = (heads[f"strata_rate_{name}"] * heads[f"top_L_{name}"]).fillna(0).groupby(
                by_head).sum().reindex(index).to_numpy()
            precision = np.where(total > 0, hits / np.maximum(total, 1), np.nan)
            base = np.where(total > 0, expected / np.maximum(total, 1), np.nan)
            out[f"hits_L_{name}"], out[f"top_L_{name}"] = hits, total
            out[f"pooled_p_at_L_{name}"], out[f"base_rate_{name}"] = precision, base
            out[f"enrichment_L_{name}"] = np.where(base > 0, precision / base, np.nan)
            out[f"strata_rate_{name}"] = np.where(total > 0, strata / np.maximum(total, 1), np.nan)
        per_range = nulls.get(name, {})
        null = (pooled_null(list(per_range.values()), np.stack([picks[r] for r in per_range]))
                if per_range else np.full((len(index), 1 + draws), np.nan))  # [head 1 + draws]
        pooled.append(null)
        out[f"z_L_{name}"] = standardized(null)[:, 0]
        out[f"p_value_L_{name}"] = shift_p_values(null)
        if exchangeable:
            out[f"p_exchangeable_L_{name}"] = [
                pooled_p_value(*(group[f"{c}_{name}"].fillna(0).astype(int).to_numpy()
                                 for c in ("hits_L", "n_known", "n_true", "top_L")))
                for _, group in heads.groupby(["layer", "head"], sort=True)]
            out[f"q_exchangeable_L_{name}"] = benjamini_hochberg(out[f"p_exchangeable_L_{name}"].to_numpy())
    adjusted = maxt_adjusted(np.concatenate(pooled, axis=0))  # [range·head]: one family
    twins = _pooled_control(control)
    for number, name in enumerate(RANGE_NAMES):
        out[f"p_fwer_L_{name}"] = adjusted[number * len(index):(number + 1) * len(index)]
        out[f"untrained_p99_L_{name}"] = untrained_quantile(twins, f"pooled_p_at_L_{name}")
        out[f"significant_L_{name}"] = _decide(out, name)
    if exchangeable:  # the retired test's columns after the rest, as range_columns(name, True) orders them
        out = out[[c for c in out if c not in exchangeable_columns(out)] + exchangeable_columns(out)]
    return out


def _protein_nulls(heads: pd.DataFrame, index: pd.MultiIndex) -> dict[str, dict]:
    """{range: {record: [head shift] null}} of the proteins whose every head has a null of one width."""
    found: dict[str, dict] = {}
    for name in RANGE_NAMES:
        column = f"null_excess_L_{name}"
        if column not in heads:
            continue
        for record, group in heads.groupby("record", sort=True):
            rows = group.set_index(["layer", "head"])[column].reindex(index)
            widths = {len(row) if isinstance(row, (list, tuple, np.ndarray)) else -1 for row in rows}
            if len(widths) == 1 and min(widths) > 0:
                found.setdefault(name, {})[record] = np.stack([np.asarray(row, np.float64) for row in rows])
    return found


def _pooled_control(control: pd.DataFrame | None) -> pd.DataFrame | None:
    """Per twin head (seed, layer, head): P@L pooled over the proteins (``pooled_p_at_L_r``)."""
    if control is None or control.empty:
        return None
    grouped = control.groupby(["seed", "layer", "head"], sort=True)
    pooled = {}
    for name in RANGE_NAMES:
        hits = grouped[f"hits_L_{name}"].sum(min_count=1)
        total = grouped[f"top_L_{name}"].sum(min_count=1)
        pooled[f"pooled_p_at_L_{name}"] = (hits / total.where(total > 0)).to_numpy()
    return pd.DataFrame(pooled)


def best_significant(table: pd.DataFrame, name: str = "long") -> pd.Series | None:
    """The head with the highest enrichment in range `name` among the significant ones, or None."""
    column = table.get(f"significant_L_{name}")
    if column is None:
        return None
    significant = table[column.fillna(False).astype(bool)]
    if significant.empty:
        return None
    return significant.loc[significant[f"enrichment_L_{name}"].idxmax()]


__all__ = ["ALPHA", "EXCHANGEABLE", "POOLED_DRAWS", "UNTRAINED_QUANTILE", "benjamini_hochberg",
           "best_significant", "exchangeable_columns", "head_row", "hypergeometric_p_value",
           "hypergeometric_p_values", "maxt_adjusted", "null_columns", "pooled_null", "pooled_p_value",
           "pooled_rows", "range_columns", "shift_draws", "shift_p_values", "standardized",
           "untrained_quantile", "with_exchangeable", "with_tests"]
