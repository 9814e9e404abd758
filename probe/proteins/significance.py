"""Every head against its base rate: is a head's precision@L more than a head attending at random would get?

For one protein, one head and one sequence-separation range (short 6–11, medium 12–23, long ≥ 24), let N be
the known pairs i < j of the range, C the contacts among them (the **base rate** is C / N: the precision of a
random ranking), and let the head's k = min(L, N) top-scoring pairs hold h contacts (P@L = h / k). Under the
null hypothesis that the head's ranking carries no contact information, its top k are k pairs drawn without
replacement from the N, so h is hypergeometric; the p-value is P(X ≥ h) with X ~ Hypergeometric(N, C, k)
(scipy's ``hypergeom.sf(h − 1, N, C, k)``). ``enrichment`` = P@L / base rate.

Over a set of proteins the hits are pooled: H = Σ h over Σ k draws, the expected hits Σ k·C/N, so the pooled
``base_rate`` is Σ k·(C/N) / Σ k, the pooled precision Σ h / Σ k and ``enrichment`` their ratio; the p-value
of H is exact: the distribution of a sum of independent hypergeometrics, by convolving their probability mass
functions.

Benjamini–Hochberg over the heads of a table (one per range) turns p-values into q-values; a head is
**significant** where q < :data:`FDR` (0.05). NaN p-values (a range without a known pair) get NaN q-values and
are not counted in the number of tests.

Columns added per range r (:func:`range_columns`): ``hits_L_{r}``, ``top_L_{r}`` (k), ``n_known_{r}``,
``n_true_{r}``, ``base_rate_{r}``, ``enrichment_L_{r}``, ``p_value_L_{r}``, ``q_value_L_{r}``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import hypergeom

FDR = 0.05  # Benjamini–Hochberg false discovery rate at which a head is called significant
RANGE_NAMES = ("short", "medium", "long")


def range_columns(name: str) -> list[str]:
    """The significance columns of one range, in table order."""
    return [f"hits_L_{name}", f"top_L_{name}", f"n_known_{name}", f"n_true_{name}", f"base_rate_{name}",
            f"enrichment_L_{name}", f"p_value_L_{name}", f"q_value_L_{name}"]


def hypergeometric_p_value(hits: int, known: int, contacts: int, drawn: int) -> float:
    """P(X ≥ hits) for X ~ Hypergeometric(population `known`, successes `contacts`, draws `drawn`); NaN
    without draws.

    Parameters
    ----------
    hits, known, contacts, drawn : int
        h, N, C, k of the module docstring.

    Returns
    -------
    float
        The one-sided p-value.
    """
    if drawn <= 0 or known <= 0:
        return float("nan")
    return float(hypergeom.sf(int(hits) - 1, int(known), int(contacts), int(drawn)))


def pooled_p_value(hits: Sequence[int], known: Sequence[int], contacts: Sequence[int],
                   drawn: Sequence[int]) -> float:
    """P(Σ X_p ≥ Σ hits) for independent X_p ~ Hypergeometric(known_p, contacts_p, drawn_p), exactly (the pmfs
    convolved); proteins without draws are skipped, NaN when none is left.

    Parameters
    ----------
    hits, known, contacts, drawn : Sequence[int]
        [protein] h, N, C, k of each protein.

    Returns
    -------
    float
        The one-sided p-value of the pooled hits.
    """
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


def benjamini_hochberg(p_values) -> np.ndarray:
    """Benjamini–Hochberg q-values (step-up, monotone, capped at 1) of [test] p-values; NaN stays NaN and is
    not a test.

    Parameters
    ----------
    p_values : array-like
        [test] float.

    Returns
    -------
    numpy.ndarray
        [test] float64 q-values.
    """
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


def with_q_values(table: pd.DataFrame) -> pd.DataFrame:
    """`table` (one row per head) with ``q_value_L_{r}`` from its ``p_value_L_{r}`` columns, BH over its
    rows."""
    table = table.copy()
    for name in RANGE_NAMES:
        column = f"p_value_L_{name}"
        if column in table:
            table[f"q_value_L_{name}"] = benjamini_hochberg(table[column].to_numpy())
    return table


def head_row(hits: int, drawn: int, known: int, contacts: int, name: str) -> dict[str, float]:
    """The significance columns of one protein, head and range (q-value NaN until :func:`with_q_values`)."""
    base = contacts / known if known else float("nan")
    precision = hits / drawn if drawn else float("nan")
    with np.errstate(invalid="ignore", divide="ignore"):
        enrichment = precision / base if drawn and base > 0 else float("nan")
    return {f"hits_L_{name}": float(hits), f"top_L_{name}": float(drawn), f"n_known_{name}": float(known),
            f"n_true_{name}": float(contacts), f"base_rate_{name}": base, f"enrichment_L_{name}": enrichment,
            f"p_value_L_{name}": hypergeometric_p_value(hits, known, contacts, drawn),
            f"q_value_L_{name}": float("nan")}


def pooled_rows(heads: pd.DataFrame) -> pd.DataFrame:
    """Per head over a set: pooled hits, draws and expected hits → ``pooled_p_at_L_{r}``, ``base_rate_{r}``,
    ``enrichment_L_{r}``, exact pooled ``p_value_L_{r}`` and BH ``q_value_L_{r}`` over the heads.

    Parameters
    ----------
    heads : pandas.DataFrame
        One row per protein × head with ``layer``, ``head`` and :func:`range_columns` (the per-protein
        values).

    Returns
    -------
    pandas.DataFrame
        One row per (layer, head): ``layer, head`` and per range ``hits_L_{r}, top_L_{r}, pooled_p_at_L_{r},
        base_rate_{r}, enrichment_L_{r}, p_value_L_{r}, q_value_L_{r}``.
    """
    rows = []
    for (layer, head), group in heads.groupby(["layer", "head"], sort=True):
        row = {"layer": int(layer), "head": int(head)}
        for name in RANGE_NAMES:
            hits = group[f"hits_L_{name}"].fillna(0).to_numpy()
            drawn = group[f"top_L_{name}"].fillna(0).to_numpy()
            known = group[f"n_known_{name}"].fillna(0).to_numpy()
            contacts = group[f"n_true_{name}"].fillna(0).to_numpy()
            with np.errstate(invalid="ignore", divide="ignore"):
                expected = float(np.where(known > 0, drawn * contacts / np.maximum(known, 1), 0).sum())
            total = float(drawn.sum())
            precision = hits.sum() / total if total else float("nan")
            base = expected / total if total else float("nan")
            row.update({f"hits_L_{name}": float(hits.sum()), f"top_L_{name}": total,
                        f"pooled_p_at_L_{name}": precision, f"base_rate_{name}": base,
                        f"enrichment_L_{name}": precision / base if total and base > 0 else float("nan"),
                        f"p_value_L_{name}": pooled_p_value(hits.astype(int), known.astype(int),
                                                            contacts.astype(int), drawn.astype(int))})
        rows.append(row)
    return with_q_values(pd.DataFrame(rows))


def best_significant(table: pd.DataFrame, name: str = "long", fdr: float = FDR) -> pd.Series | None:
    """The head with the highest enrichment in range `name` among those with q < `fdr`, or None."""
    q = table.get(f"q_value_L_{name}")
    if q is None:
        return None
    significant = table[q < fdr]
    if significant.empty:
        return None
    return significant.loc[significant[f"enrichment_L_{name}"].idxmax()]


__all__ = ["FDR", "benjamini_hochberg", "best_significant", "head_row", "hypergeometric_p_value",
           "pooled_p_value", "pooled_rows", "range_columns", "with_q_values"]
