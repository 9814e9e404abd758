"""Table assembly for :func:`probe.heads.label.label_model`: one row per (layer, head) of every scored type in
:data:`probe.heads.tables.COLUMNS` order, the FDR decision and the labels' roles, and the one-line summaries
``probe label`` prints."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from probe.heads import stats
from probe.heads.label.config import LabelConfig
from probe.heads.label.scoring import Scored
from probe.heads.label.summary import per_group, summarise
from probe.heads.registry import REGISTRY
from probe.heads.sink_rate import sink_rate_lines
from probe.heads.tables import COLUMNS

# a label whose output share is below this is a "sink": attended to, but it adds almost nothing
SINK_SHARE = 0.1


COPYING_MARGIN = 0.1  # a copying type's label is "copying" at copying ≥ +margin, "suppressing" at ≤ −margin


def roles(table: pd.DataFrame) -> pd.Series:
    """Per row: "sink" for a label whose output_share < SINK_SHARE, "function" for the other labels, NaN for
    unlabelled rows and where output_share is NaN (not measured, or the output projection is unknown). Labels
    of a type that copies (:attr:`probe.heads.registry.HeadTypeSpec.copies`, induction) that are not sinks are
    "copying" where ``copying`` ≥ COPYING_MARGIN and "suppressing" where it is ≤ −COPYING_MARGIN (Elhage et
    al.'s eigenvalue score; Olsson et al.'s induction head copies); in between, or with copying NaN, as
    above."""
    if "output_share" not in table:
        return pd.Series([math.nan] * len(table), index=table.index)
    share = pd.to_numeric(table["output_share"], errors="coerce")
    labelled = table["label"].astype(bool)
    values = ["sink" if is_label and value < SINK_SHARE else "function" if is_label and value >= SINK_SHARE
              else math.nan for is_label, value in zip(labelled, share, strict=True)]
    if "copying" in table:
        copying = pd.to_numeric(table["copying"], errors="coerce")
        copies = [REGISTRY[name].copies if name in REGISTRY else False for name in table["head_type"]]
        for row, (is_label, kind, score,
                  role) in enumerate(zip(labelled, copies, copying, values, strict=True)):
            if is_label and kind and role != "sink" and score == score:
                values[row] = ("copying" if score >= COPYING_MARGIN else "suppressing"
                               if score <= -COPYING_MARGIN
                               else role)
    return pd.Series(values, index=table.index)  # float NaN when no row has a role, else object


def verified_scores(table: pd.DataFrame, head_type: str, seq_len: float,
                    shape: tuple[int, int]) -> torch.Tensor:
    """The `score` of `head_type`'s rows at `seq_len` as `[layer head]` (NaN where a head has no row)."""
    rows = table[(table["head_type"] == head_type) & (table["seq_len"] == seq_len)]
    scores = torch.full(shape, math.nan, dtype=torch.float64)  # [layer head]
    scores[rows["layer"].astype(int).tolist(), rows["head"].astype(int).tolist()] = torch.tensor(
        rows["score"].astype(float).tolist(), dtype=torch.float64)
    return scores


def fill_verification(table: pd.DataFrame, head_type: str, seq_len: float,
                      columns: dict[str, object]) -> None:
    """Put a verifier's `columns` on `head_type`'s rows at `seq_len` (in place)."""
    rows = ((table["head_type"] == head_type) & (table["seq_len"] == seq_len)).to_numpy()
    for name, value in columns.items():
        if name not in table:
            table[name] = math.nan
        if isinstance(value, str):
            table[name] = table[name].astype(object)
        table.loc[rows, name] = value


def fill_copying(table: pd.DataFrame, copying: torch.Tensor, dla: dict[str, torch.Tensor]) -> pd.DataFrame:
    """The table with ``copying`` (`copying` [layer head], every row of a head) and ``copying_dla`` (`dla`:
    head type -> [layer head], that type's rows; NaN elsewhere) filled, and ``role`` recomputed with them."""
    layers = table["layer"].to_numpy(dtype=int)
    heads = table["head"].to_numpy(dtype=int)
    table["copying"] = copying.double().numpy()[layers, heads]
    table["copying_dla"] = math.nan
    for head_type, values in dla.items():
        rows = (table["head_type"] == head_type).to_numpy()
        table.loc[rows, "copying_dla"] = values.double().numpy()[layers[rows], heads[rows]]
    table["role"] = roles(table)
    return table


def assemble(loaded, scored: list[Scored], config: LabelConfig) -> pd.DataFrame:
    """One row per (layer, head) of every scored type, built column by column (a [layer head] tensor becomes
    one column, row-major: layer 0's heads first), in :data:`COLUMNS` order."""
    n_layers, n_heads = loaded.n_layers, loaded.n_heads
    n_rows = n_layers * n_heads
    layers = np.repeat(np.arange(n_layers), n_heads)  # [row]
    heads = np.tile(np.arange(n_heads), n_layers)  # [row]
    names = [loaded.head_name(layer, head) for layer,
             head in zip(layers.tolist(), heads.tolist(), strict=True)]
    parts = []
    for item in scored:
        summary = summarise(item, config)
        groups = summary.pop("_groups", [])
        columns: dict[str, object] = {"model": loaded.name, "revision": loaded.revision, "layer": layers,
                                      "head": heads, "head_name": names, "head_type": item.spec.name,
                                      "probe_set": item.probe_set,
                                      "seq_len": math.nan if item.seq_len is None else item.seq_len,
                                      "seed": config.seed}
        for key, value in summary.items():
            if isinstance(value, torch.Tensor):  # [layer head] -> [row]
                columns[key] = value.reshape(n_rows).double().numpy()
            else:
                columns[key] = [value] * n_rows
        correct = (item.scores[None].correct if item.spec.statistic == "accuracy" and None in item.scores
                   else None)
        if correct is not None and groups:
            columns["accuracy_by_source"] = per_group(correct, item.groups, groups)
        parts.append(pd.DataFrame(columns, index=range(n_rows)))
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    # a hybrid: only the layers with α have real heads
    if len(table) and len(loaded.attention_layers) < n_layers:
        table = table[table["layer"].isin(loaded.attention_layers)].reset_index(drop=True)
    later = ("q_value", "label", "stable", "role")
    return table.reindex(columns=[c for c in COLUMNS if c not in later] + list(later))




def decide(table: pd.DataFrame, config: LabelConfig) -> pd.DataFrame:
    """The table with ``q_value`` (Benjamini–Hochberg over all its tests), ``label`` (q ≤ fdr), ``stable``
    (the same label at every length) and ``role`` filled in (in place, and returned)."""
    table["q_value"] = stats.benjamini_hochberg(torch.tensor(table["p_value"].to_numpy(dtype=float))).numpy()
    table["label"] = (table["q_value"] <= config.fdr).fillna(False).astype(bool)
    agree = table.groupby(["layer", "head", "head_type"])["label"].transform("nunique")
    table["stable"] = agree.eq(1)
    table["role"] = roles(table)
    return table


def _copying_note(rows: pd.DataFrame, index, role) -> str:
    """" (copying +0.99, dla +2.6)" for a labelled row of a copying type (role copying / suppressing); ""
    else."""
    if role not in ("copying", "suppressing"):
        return ""
    dla = rows.at[index, "copying_dla"] if "copying_dla" in rows else math.nan
    shown = f", dla {float(dla):+.1f}" if dla == dla else ""
    return f" ({role} {float(rows.at[index, 'copying']):+.2f}{shown})"


def summary_lines(table: pd.DataFrame) -> list[str]:
    """"model · type: N of M heads (L0H1, ...)" for every model, length and type of a table (for stderr);
    fixed-offset heads show their offset, heads whose label flips between lengths are marked "(unstable)",
    labels whose output share is below SINK_SHARE "(sink)"; "N sinks" counts them, and each ablated group adds
    "together L1H0 L1H1 …: +6.39 nats (z 1.2)"."""
    lines = []
    lengths = table["seq_len"].dropna().unique()
    for model, rows in table.groupby("model", sort=False):
        for (seq_len,
             head_type), group in rows.groupby([rows["seq_len"].fillna(-1), "head_type"], sort=False):
            labelled = group[group["label"].astype(bool)]
            roles_of = labelled["role"] if "role" in labelled else pd.Series([math.nan] * len(labelled))
            names = [name + (f"({int(offset):+d})" if offset == offset else "") +
                     ("" if bool(stable) else " (unstable)") + (" (sink)" if kind == "sink" else "") +
                     _copying_note(labelled, index, kind)
                     for index, name, offset, stable, kind in zip(labelled.index, labelled["head_name"],
                                                                  labelled["offset"],
                                                                  labelled["stable"].fillna(True), roles_of,
                                                                  strict=True)]
            more = " ..." if len(names) > 12 else ""
            at = f" @{int(seq_len)}" if len(lengths) > 1 and seq_len >= 0 else ""
            sinks = int((roles_of == "sink").sum())
            line = (f"{model} · {head_type}{at}: {len(labelled)} of {len(group)} heads"
                    + (f" ({', '.join(names[:12])}{more})" if names else "")
                    + (f"; {sinks} sink{'s' if sinks != 1 else ''} (output share < {SINK_SHARE})"
                       if sinks else ""))
            if "group_heads" in labelled:
                joint = labelled.dropna(subset=["group_heads"]).drop_duplicates("group_heads")
                for heads, effect, z in zip(joint["group_heads"], joint["group_effect"], joint["group_z"],
                                            strict=True):
                    line += f"; together {heads}: {float(effect):+.2f} nats (z {float(z):.1f})"
            if "type_group_effect" in labelled:
                whole = labelled.dropna(subset=["type_group_effect"])
                if whole["layer"].nunique() >= 2:  # one layer: the same heads as its group above
                    effect, z = (float(whole["type_group_effect"].iloc[0]),
                                 float(whole["type_group_z"].iloc[0]))
                    line += f"; all {len(whole)} across layers: {effect:+.2f} nats (z {z:.1f})"
            if "retrieval_k" in group and group["retrieval_k"].notna().any():
                first = group[group["retrieval_k"].notna()].iloc[0]
                line += (f"; top {int(first['retrieval_k'])} masked: needle recall "
                         f"{first['needle_recall']:.2f} → {first['needle_recall_top']:.2f} (as many random "
                         f"heads: {first['needle_recall_random_min']:.2f} at worst)")
            lines.append(line)
    return lines + sink_rate_lines(table)
