"""What a label table found, per (model, head type): the labelled heads and what their labels are worth.

Pure: read from a label table (the schema of docs/labels.md), nothing recomputed. A row summarises the heads
whose ``label`` is true for one head type: their names, the range of ``score`` against ``chance``, the output
share (median and range) and how many are sinks, the per-head ablation effect, the joint ablation of the
type's heads (``type_group_effect`` / ``type_group_z``, else the per-layer ``group_effect`` / ``group_z``),
the copying score and, for retrieval heads, needle recall with the top heads masked. A value no row knows is
NaN (shown as "—").

:func:`findings_markdown` renders the rows as the markdown table that README, docs/zoo.md and docs/labels.md
carry (``scripts/label_tables.py`` writes them from the shipped tables).
"""

from __future__ import annotations

import math

import pandas as pd

from probe.heads.tables import labelled_mask
from probe.naming import fixed, head_name

COLUMNS = ("model", "head_type", "probe_sets", "n_heads", "heads", "score_min", "score_max", "chance",
           "share_median", "share_min", "share_max", "n_sinks", "ablation_min", "ablation_max",
           "joint_effect", "joint_z", "joint_size", "copying_min", "copying_max", "retrieval_ablation")


def _numbers(group: pd.DataFrame, column: str) -> pd.Series:
    """The column's finite values as floats (empty when the table has no such column)."""
    if column not in group:
        return pd.Series(dtype=float)
    values = pd.to_numeric(group[column], errors="coerce")
    return values[values.notna()]


def _lowest(values: pd.Series) -> float:
    return float(values.min()) if len(values) else math.nan


def _highest(values: pd.Series) -> float:
    return float(values.max()) if len(values) else math.nan


def _first(values: pd.Series) -> float:
    return float(values.iloc[0]) if len(values) else math.nan


def _names(group: pd.DataFrame) -> list[str]:
    """Head names of the group, ordered by (layer, head), each once."""
    if "head_name" in group:
        order = group.sort_values(["layer", "head"]) if {"layer", "head"} <= set(group) else group
        return list(dict.fromkeys(order["head_name"].astype(str)))
    pairs = sorted({(int(layer), int(head))
                    for layer, head in zip(group["layer"], group["head"], strict=True)})
    return [head_name(layer, head) for layer, head in pairs]


def findings(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, head type) with at least one labelled head, in the table's order of appearance.

    Parameters
    ----------
    table : pandas.DataFrame
        A label table (``probe label``'s output): one row per (model, layer, head, head type, probe set) with
        at least ``model``, ``head_type``, ``label`` and ``score``; the optional columns (``chance``,
        ``output_share``, ``role``, ``ablation_effect``, ``type_group_*``, ``group_*``, ``copying``,
        ``retrieval_ablation``) are read where present.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`COLUMNS`: ``probe_sets`` and ``heads`` are space-separated names; ``n_sinks`` counts
        labelled heads with ``role == "sink"``; ``joint_*`` is the type's joint ablation across layers where
        the table has it, else the first per-layer group's; the rest are the minimum, maximum or median of the
        labelled rows' values, NaN where none is known.

    Examples
    --------
    >>> from probe.heads.tables import load_table
    >>> found = findings(load_table(probe.zoo.labels_path("induction")))  # zoo:induction's shipped labels
    >>> found[["head_type", "heads"]]
            head_type                heads
    0  previous_token                 L0H1
    1     first_token            L0H0 L0H2
    2    fixed_offset                 L0H3
    3       induction  L1H0 L1H1 L1H2 L1H3
    """
    labelled = table[labelled_mask(table["label"])]
    records = []
    for (model, head_type), group in labelled.groupby(["model", "head_type"], sort=False):
        names = _names(group)
        score, share = _numbers(group, "score"), _numbers(group, "output_share")
        joint = _numbers(group, "type_group_effect")
        prefix = "type_group" if len(joint) else "group"
        effect = _numbers(group, f"{prefix}_effect")
        roles = group["role"].astype(str) if "role" in group else pd.Series(dtype=str)
        retrieval = group["retrieval_ablation"].dropna().astype(str) if "retrieval_ablation" in group else []
        records.append({
            "model": model, "head_type": head_type,
            "probe_sets": " ".join(dict.fromkeys(group["probe_set"].astype(str)))
            if "probe_set" in group else "",
            "n_heads": len(names), "heads": " ".join(names),
            "score_min": _lowest(score), "score_max": _highest(score),
            "chance": _first(_numbers(group, "chance")),
            "share_median": float(share.median()) if len(share) else math.nan,
            "share_min": _lowest(share), "share_max": _highest(share),
            "n_sinks": int((roles == "sink").sum()),
            "ablation_min": _lowest(_numbers(group, "ablation_effect")),
            "ablation_max": _highest(_numbers(group, "ablation_effect")),
            "joint_effect": _first(effect), "joint_z": _first(_numbers(group, f"{prefix}_z")),
            "joint_size": _first(_numbers(group, f"{prefix}_size")),
            "copying_min": _lowest(_numbers(group, "copying")),
            "copying_max": _highest(_numbers(group, "copying")),
            "retrieval_ablation": retrieval.iloc[0] if len(retrieval) else "",
        })
    return pd.DataFrame.from_records(records, columns=list(COLUMNS))


def _span(low: float, high: float, digits: int = 2, signed: bool = False) -> str:
    """"0.91" or "0.91–0.95"; "—" when unknown."""
    if math.isnan(low) or math.isnan(high):
        return "—"
    form = f"{{:+.{digits}f}}" if signed else f"{{:.{digits}f}}"
    low_text, high_text = form.format(low), form.format(high)
    return low_text if low_text == high_text else f"{low_text}–{high_text}"


def _heads_text(row, limit: int) -> str:
    names = row["heads"].split()
    shown = " ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} … ({len(names)})"


def _joint_text(row) -> str:
    if math.isnan(row["joint_effect"]):
        return "—"
    z = "z —" if math.isnan(row["joint_z"]) else f"z {fixed(row['joint_z'])}"
    return f"{row['joint_effect']:+.2f} ({z})"


def _share_text(row) -> str:
    if math.isnan(row["share_median"]):
        return "—"
    text = f"{row['share_median']:.2f} ({_span(row['share_min'], row['share_max'])})"
    return f"{text}, {row['n_sinks']} sink{'s' if row['n_sinks'] != 1 else ''}" if row["n_sinks"] else text


def findings_markdown(rows: pd.DataFrame, heads_shown: int = 6, with_model: bool = True) -> str:
    """The rows of :func:`findings` as a markdown table (``heads_shown`` names at most per row, then a count).

    Columns: model (``with_model``), head type, probe sets, heads, score range (chance), output share median
    (range) and sinks, per-head ablation effect range (nats), joint ablation effect (z), copying range; a
    retrieval row appends its ablation summary to the joint column.

    Parameters
    ----------
    rows : pandas.DataFrame
        What :func:`findings` returns.
    heads_shown : int, default 6
        Head names shown per row; more are counted.
    with_model : bool, default True
        Begin each row with the model.

    Returns
    -------
    str
        The markdown table, a header and one line per row.

    Examples
    --------
    >>> from probe.heads.tables import load_table
    >>> found = findings(load_table(probe.zoo.labels_path("induction")))
    >>> markdown = findings_markdown(found, heads_shown=2, with_model=False)
    >>> print(markdown.splitlines()[-1])  # type, probes, heads, score (chance), share, ablation, joint, copy
    | induction | repeated | L1H0 L1H1 … (4) | 0.93–0.96 (0.03) | 0.95 (0.93–0.96) | +0.016–+0.034 |
    +6.39 (z —) | +1.00 |
    """
    header = ["head type", "probes", "labelled heads", "score (chance)", "output share", "ablation, nats",
              "joint ablation, nats", "copying"]
    if with_model:
        header.insert(0, "model")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for _, row in rows.iterrows():
        chance = "" if math.isnan(row["chance"]) else f" ({row['chance']:.2f})"
        joint = _joint_text(row)
        if row["retrieval_ablation"]:
            joint = row["retrieval_ablation"] if joint == "—" else f"{joint}; {row['retrieval_ablation']}"
        cells = [row["head_type"], row["probe_sets"], _heads_text(row, heads_shown),
                 _span(row["score_min"], row["score_max"]) + chance, _share_text(row),
                 _span(row["ablation_min"], row["ablation_max"], 3, signed=True), joint,
                 _span(row["copying_min"], row["copying_max"], 2, signed=True)]
        if with_model:
            cells.insert(0, f"`{row['model']}`")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
