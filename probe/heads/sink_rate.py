"""Sink rate (Gu et al. 2024, "When Attention Sink Emerges in Language Models"; code sail-sg/Attention-Sink):
the share of a model's heads whose mean attention on the first token exceeds ε = 0.3, and how many of those
are no-op sinks by output share (Kobayashi et al. 2020: the first token supplies less than :data:`SINK_SHARE`
of the head's output norm).

Pure: read from a label table's ``first_token`` rows, whose ``score`` is the head's mean attention mass on the
first token over the probe's rows and whose ``output_share`` is the share of its output norm that comes from
there."""

from __future__ import annotations

import math

import pandas as pd

EPSILON = 0.3  # Gu et al.: a head sinks when its mean attention on the first token exceeds ε
SINK_TYPE = "first_token"  # the head type whose score is the mean attention on the first token
NOOP_SHARE = 0.1  # output share below which a sink is a no-op (probe.heads.label.table.SINK_SHARE)


def sink_rates(table: pd.DataFrame) -> pd.DataFrame:
    """Per (model, seq_len): ``n_heads``, ``n_sinks`` (heads whose first-token score > EPSILON), ``sink_rate``
    (their share), ``n_noop`` (sinks whose output_share < NOOP_SHARE; NaN when no sink has a known share).
    Empty when the table has no first_token rows.

    Parameters
    ----------
    table : pandas.DataFrame
        A label table with ``first_token`` rows (``score``; ``output_share`` where measured).

    Returns
    -------
    pandas.DataFrame
        One row per (model, seq_len): ``model``, ``seq_len``, ``n_heads``, ``n_sinks``, ``sink_rate``,
        ``n_noop``.

    Examples
    --------
    >>> from probe.heads.tables import load_table
    >>> sink_rates(load_table(probe.zoo.labels_path("induction")))  # zoo:induction's shipped labels
               model  seq_len  n_heads  n_sinks  sink_rate  n_noop
    0  zoo:induction     64.0        8        2       0.25       0
    """
    rows = table[table["head_type"] == SINK_TYPE]
    records = []
    for (model, seq_len), group in rows.groupby(["model", rows["seq_len"].fillna(-1)], sort=False):
        score = pd.to_numeric(group["score"], errors="coerce")
        sinks = group[score > EPSILON]
        share = pd.to_numeric(sinks["output_share"], errors="coerce") if "output_share" in sinks else None
        known = share.notna() if share is not None else pd.Series(dtype=bool)
        records.append(
            {
                "model": model,
                "seq_len": seq_len if seq_len >= 0 else math.nan,
                "n_heads": len(group),
                "n_sinks": len(sinks),
                "sink_rate": len(sinks) / len(group) if len(group) else math.nan,
                "n_noop": int((share[known] < NOOP_SHARE).sum())
                if share is not None and known.any()
                else math.nan,
            }
        )
    return pd.DataFrame.from_records(
        records, columns=["model", "seq_len", "n_heads", "n_sinks", "sink_rate", "n_noop"]
    )


def sink_rate_lines(table: pd.DataFrame) -> list[str]:
    """ "model · sink rate: 40 of 72 heads (56 %) put mean α > 0.3 on the first token (Gu et al. 2024); 35 of
    them no-op sinks (output share < 0.1)" per model and length."""
    rates = sink_rates(table)
    several = rates["seq_len"].nunique() > 1
    lines = []
    for row in rates.itertuples():
        at = f" @{int(row.seq_len)}" if several and row.seq_len == row.seq_len else ""
        noop = (
            ""
            if row.n_sinks == 0
            else "; no-op share unknown"
            if row.n_noop != row.n_noop
            else f"; {int(row.n_noop)} of them no-op sinks (output share < {NOOP_SHARE})"
        )
        lines.append(
            f"{row.model} · sink rate{at}: {row.n_sinks} of {row.n_heads} heads ({row.sink_rate:.0%}) put "
            f"mean α > {EPSILON} on the first token (Gu et al. 2024){noop}"
        )
    return lines
