"""Table assembly for :func:`probe.heads.label.label_model`: one row per (layer, head) of every scored type in
:data:`probe.heads.tables.COLUMNS` order, the FDR decision and the labels' roles, and the one-line summaries
``probe label`` prints."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from probe import untrained
from probe.heads import stats
from probe.heads.label.config import LabelConfig
from probe.heads.label.scoring import Scored
from probe.heads.label.summary import per_group, subset, summarise
from probe.heads.registry import REGISTRY
from probe.heads.sink_rate import sink_rate_lines
from probe.heads.tables import COLUMNS, labelled_mask
from probe.naming import fixed

# a label of a sink type (HeadTypeSpec.sink: first token, delimiters) whose output share is below this is a
# "sink": attended to, but it adds almost nothing
SINK_SHARE = 0.1


COPYING_MARGIN = 0.1  # a copying type's label is "copying" at copying ≥ +margin, "suppressing" at ≤ −margin

# untrained_p99: this quantile of the twins' statistic over all their heads (probe.untrained's, shared with
# the contact test and probe profile; numpy's default, linear interpolation)
UNTRAINED_QUANTILE = untrained.UNTRAINED_QUANTILE


def roles(table: pd.DataFrame) -> pd.Series:
    """Per row, what a label's weight is worth (docs/labels.md, "Role"); NaN for unlabelled rows and where
    ``output_share`` is NaN (not measured, or the output projection is unknown).

    * Sink types (:attr:`probe.heads.registry.HeadTypeSpec.sink`: first token, delimiters — where attention
      is parked, Clark et al. 2019; Kobayashi et al. 2020): "sink" when ``output_share`` < SINK_SHARE, else
      "function".
    * Every other type (span and positional types: coreference, bracket, sentence start, induction, …),
      against the type's own chance level: "function" when ``output_share`` > ``chance`` — its targets supply
      more of the head's output than a uniform head's targets would (with equal value norms the share *is*
      the score) — else "inert" (NaN where ``chance`` is NaN).
    * Copying types (:attr:`~probe.heads.registry.HeadTypeSpec.copies`, induction): a "function" label is
      "copying" where ``copying`` ≥ COPYING_MARGIN and "suppressing" where it is ≤ −COPYING_MARGIN (Elhage
      et al.'s eigenvalue score; Olsson et al.'s induction head copies); in between, or with copying NaN, it
      stays "function".
    """
    if "output_share" not in table:
        return pd.Series([math.nan] * len(table), index=table.index)
    share = pd.to_numeric(table["output_share"], errors="coerce")
    chance = (pd.to_numeric(table["chance"], errors="coerce") if "chance" in table
              else pd.Series(math.nan, index=table.index))
    copying = (pd.to_numeric(table["copying"], errors="coerce") if "copying" in table
               else pd.Series(math.nan, index=table.index))
    labelled = labelled_mask(table["label"])
    values = []
    for is_label, name, value, level, score in zip(labelled, table["head_type"], share, chance, copying,
                                                   strict=True):
        spec = REGISTRY.get(name)
        if not is_label or value != value:
            values.append(math.nan)
        elif spec is not None and spec.sink:
            values.append("sink" if value < SINK_SHARE else "function")
        elif level != level:
            values.append(math.nan)
        elif value <= level:
            values.append("inert")
        elif spec is not None and spec.copies and score == score and abs(score) >= COPYING_MARGIN:
            values.append("copying" if score > 0 else "suppressing")
        else:
            values.append("function")
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
        if isinstance(value, (str, bool)):
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
    for whole in scored:
        # the selection half makes every column below but the confirm_* ones (docs/labels.md, "Held-out
        # confirmation"); the confirmation half tests the same candidate again
        select, confirm = stats.confirmation_split(whole.cluster, config.seed)
        item = subset(whole, select)
        summary = summarise(item, config)
        groups = summary.pop("_groups", [])
        choice = summary.pop("_choice")
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
        for key, value in confirmation(subset(whole, confirm), config, choice).items():
            columns[key] = (value.reshape(n_rows).double().numpy() if isinstance(value, torch.Tensor)
                            else value)
        parts.append(pd.DataFrame(columns, index=range(n_rows)))
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    # a hybrid: only the layers with α have real heads
    if len(table) and len(loaded.attention_layers) < n_layers:
        table = table[table["layer"].isin(loaded.attention_layers)].reset_index(drop=True)
    later = ("q_value", "selected", "confirm_q", "replicated", "label", "stable", "role")
    return table.reindex(columns=[c for c in COLUMNS if c not in later] + list(later))




# the confirmation half's columns (besides confirm_q and replicated, which decide() adds)
CONFIRM_COLUMNS = ("confirm_score", "confirm_ci_low", "confirm_ci_high", "confirm_effect", "confirm_p",
                   "confirm_clusters")


def confirmation(half: Scored, config: LabelConfig, choice: torch.Tensor) -> dict[str, torch.Tensor | float]:
    """The confirmation half's :data:`CONFIRM_COLUMNS` (each `[layer head]`, or one number for every head):
    the statistic a label rests on — the accuracy where a head has one (accuracy types), else the score —
    with its clustered bootstrap interval, the effect and the same one-sided test as the selection's, on
    the half's examples only, each head keeping the candidate the selection half chose (`choice`). NaN where
    the half has no example (a probe set of one cluster)."""
    if len(half.cluster) == 0:
        return {**dict.fromkeys(CONFIRM_COLUMNS, math.nan), "confirm_clusters": 0}
    found = summarise(half, config, choice)
    score, low, high = found["score"], found["ci_low"], found["ci_high"]
    if isinstance(found.get("accuracy"), torch.Tensor):  # the statistic is the accuracy where it is known
        accuracy = found["accuracy"].to(score.dtype)
        known = ~torch.isnan(accuracy)
        score = torch.where(known, accuracy, score)
        low = torch.where(known, found["accuracy_ci_low"].to(low.dtype), low)
        high = torch.where(known, found["accuracy_ci_high"].to(high.dtype), high)
    return {"confirm_score": score, "confirm_ci_low": low, "confirm_ci_high": high,
            "confirm_effect": found["effect"], "confirm_p": found["p_value"],
            "confirm_clusters": found["n_clusters"]}


def statistic(table: pd.DataFrame) -> pd.Series:
    """Per row, the number a label rests on: ``accuracy`` where the row has one (accuracy types:
    coreference), else ``score`` (NaN where unknown) — what :func:`probe.views.reading.label_reason` reads."""
    score = pd.to_numeric(table["score"], errors="coerce")
    if "accuracy" not in table:
        return score
    accuracy = pd.to_numeric(table["accuracy"], errors="coerce")
    return accuracy.where(accuracy.notna(), score)


def untrained_bars(twins: list[tuple[object, list[Scored]]],
                   config: LabelConfig) -> dict[tuple[str, float], float]:
    """(head type, seq_len or −1 for span sets) -> ``untrained_p99``: the twins' bar
    (:func:`probe.untrained.untrained_bar`, the :data:`UNTRAINED_QUANTILE` quantile) of :func:`statistic`
    (accuracy where a head has one, else score) over every head of every twin; NaN where no twin head has a
    value. `twins`: (twin, its Scored items). The twins' summaries are read directly (no
    label table is built for them: only their point statistics make the bar)."""
    groups: dict[tuple[str, float], list[float]] = {}
    for twin, scored in twins:
        layers = list(twin.attention_layers)  # a hybrid: only the layers with α have real heads
        for item in scored:
            summary = summarise(item, config)
            # the twin's heads as rows (layer-major, as the table): the columns statistic() reads
            columns = pd.DataFrame({name: summary[name][layers].double().flatten().numpy()
                                    for name in ("score", "accuracy")
                                    if isinstance(summary.get(name), torch.Tensor)})
            length = math.nan if item.seq_len is None else float(item.seq_len)  # span sets: NaN
            key = (item.spec.name, -1.0 if math.isnan(length) else length)  # as decide() reads the table
            groups.setdefault(key, []).extend(statistic(columns).tolist())
    return {key: untrained.untrained_bar(found) for key, found in groups.items()}


def decide(table: pd.DataFrame, config: LabelConfig,
           bars: dict[tuple[str, float], float] | None = None) -> pd.DataFrame:
    """The table with ``q_value`` (Benjamini–Hochberg over all its selection-half tests), ``untrained_p99``
    (from `bars`, :func:`untrained_bars`; NaN without twins), ``selected`` (q ≤ fdr, and the statistic above
    ``untrained_p99`` where it is known), ``confirm_q`` (Benjamini–Hochberg of ``confirm_p`` over the
    selected rows; NaN elsewhere), ``replicated`` (selected rows: confirm_q ≤ fdr and ``confirm_score`` above
    ``untrained_p99`` where it is known; NaN for rows not selected: nothing to replicate), ``label``
    (selected and replicated), ``stable`` (the same label at every length) and ``role`` filled in (in place,
    and returned). A table without ``confirm_p`` (no confirmation half) replicates nothing."""
    table["q_value"] = stats.benjamini_hochberg(torch.tensor(table["p_value"].to_numpy(dtype=float))).numpy()
    keys = zip(table["head_type"], table["seq_len"].fillna(-1.0), strict=True)
    table["untrained_p99"] = [(bars or {}).get((name, float(length)), math.nan) for name, length in keys]
    bar = pd.to_numeric(table["untrained_p99"], errors="coerce")
    below_twins = statistic(table) <= bar  # False where either is NaN: no twins, no bar
    selected = ((table["q_value"] <= config.fdr).fillna(False) & ~below_twins).astype(bool)
    table["selected"] = selected
    unknown = pd.Series(math.nan, index=table.index)
    confirm_p = pd.to_numeric(table["confirm_p"], errors="coerce") if "confirm_p" in table else unknown
    confirm_score = (pd.to_numeric(table["confirm_score"], errors="coerce") if "confirm_score" in table
                     else unknown)
    # the family is the selected rows: fixed by the selection half, so independent of the confirmation data
    confirm_q = unknown.copy()
    confirm_q[selected] = stats.benjamini_hochberg(torch.tensor(confirm_p[selected].to_numpy(dtype=float))
                                                   ).numpy()
    table["confirm_q"] = confirm_q
    confirmed = (confirm_q <= config.fdr).fillna(False) & ~(confirm_score <= bar)
    table["replicated"] = confirmed.astype(object).where(selected, math.nan)
    table["label"] = (selected & confirmed).astype(bool)
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


def _retrieval_note(first) -> str:
    """"; top 1 masked (output zeroed): needle recall 0.65 → 0.08; as many random heads of the whole model:
    0.00 at worst; most damaging other head L0H2: 0.00 — not beyond every control" for a retrieval row."""
    mask = first.get("retrieval_mask")
    how = {"query": "Wu et al.'s: query zeroed, decoding only", "output": "output zeroed"}.get(mask, "masked")
    text = (f"; top {int(first['retrieval_k'])} masked ({how}): needle recall {first['needle_recall']:.2f} → "
            f"{first['needle_recall_top']:.2f}; as many random heads of the whole model: "
            f"{first['needle_recall_random_min']:.2f} at worst")
    other = first.get("needle_recall_other_head")
    if isinstance(other, str):
        text += f"; most damaging other head {other}: {float(first['needle_recall_other_min']):.2f}"
    beats = first.get("retrieval_beats_controls")
    if beats is not None and beats == beats:
        text += (" — the top heads beat every control" if bool(beats)
                 else " — NOT beyond every control: another head's masking hurts as much or more")
    return text


NO_TWINS_LINE = ("untrained twins: not run, so these labels beat chance only (probe label's default "
                 "--control untrained:3 adds random-weight copies of the model as a second bar, about 1.2× "
                 "the run; docs/labels.md)")


Z_SIGNIFICANT = 2.0  # |z| against the random control groups read as beyond them (≈ two-sided 5% for a normal)


def z_text(z: float) -> str:
    """A group's z against its random control groups as the summary prints it: "z 3.4"; below
    :data:`Z_SIGNIFICANT` "z 1.2: not significant, within the random groups' spread"; NaN "z unknown: too few
    control groups"."""
    if z != z:
        return "z unknown: too few control groups"
    if abs(z) < Z_SIGNIFICANT:
        return f"z {fixed(z)}: not significant, within the random groups' spread"
    return f"z {fixed(z)}"


def summary_lines(table: pd.DataFrame) -> list[str]:
    """"model · type: N of M heads (L0H1, ...)" for every model, length and type of a table (for stderr);
    fixed-offset heads show their offset, heads whose label flips between lengths are marked "(unstable)",
    sink labels (:func:`roles`) "(sink)" and inert ones "(inert)"; "N sinks" counts the sinks, the untrained
    twins' bar follows where they ran ("untrained twins' p99 0.027"), and each ablated group adds "together
    L1H0 L1H1 …: +6.39 nats (z 1.2: not significant, ...)" (:func:`z_text`). A table whose run had no twins
    ends with a line that says so (:data:`NO_TWINS_LINE`): its labels beat chance only."""
    lines = []
    lengths = table["seq_len"].dropna().unique()
    for model, rows in table.groupby("model", sort=False):
        for (seq_len,
             head_type), group in rows.groupby([rows["seq_len"].fillna(-1), "head_type"], sort=False):
            labelled = group[labelled_mask(group["label"])]
            roles_of = labelled["role"] if "role" in labelled else pd.Series([math.nan] * len(labelled))
            names = [name + (f"({int(offset):+d})" if offset == offset else "") +
                     ("" if bool(stable) else " (unstable)")
                     + (f" ({kind})" if kind in ("sink", "inert") else "") +
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
            bar = pd.to_numeric(group["untrained_p99"], errors="coerce").max() if "untrained_p99" in group \
                else math.nan
            if bar == bar:
                line += f"; untrained twins' p99 {bar:.3f}"
            if "selected" in group:  # selected on one half of the documents, not reproduced on the other
                lost = group[labelled_mask(group["selected"]) & ~labelled_mask(group["label"])]
                if len(lost):
                    line += f"; not replicated on held-out documents: {' '.join(lost['head_name'])}"
            if "group_heads" in labelled:
                joint = labelled.dropna(subset=["group_heads"]).drop_duplicates("group_heads")
                for heads, effect, z in zip(joint["group_heads"], joint["group_effect"], joint["group_z"],
                                            strict=True):
                    line += f"; together {heads}: {float(effect):+.2f} nats ({z_text(float(z))})"
            if "type_group_effect" in labelled:
                whole = labelled.dropna(subset=["type_group_effect"])
                if whole["layer"].nunique() >= 2:  # one layer: the same heads as its group above
                    effect, z = (float(whole["type_group_effect"].iloc[0]),
                                 float(whole["type_group_z"].iloc[0]))
                    line += f"; all {len(whole)} across layers: {effect:+.2f} nats ({z_text(z)})"
            if "retrieval_k" in group and group["retrieval_k"].notna().any():
                line += _retrieval_note(group[group["retrieval_k"].notna()].iloc[0])
            lines.append(line)
    bars = pd.to_numeric(table["untrained_p99"], errors="coerce") if "untrained_p99" in table else None
    twins = [] if bars is not None and bars.notna().any() else [NO_TWINS_LINE]
    return lines + replication_lines(table) + sink_rate_lines(table) + twins


def replication_lines(table: pd.DataFrame) -> list[str]:
    """Per model, how many of the labels selected on one half of the documents the other half reproduced
    (docs/labels.md, "Held-out confirmation"): "zoo:x · held-out confirmation: 5 of 6 selected labels
    replicate (the label column counts those 5)"; nothing for a table without a ``selected`` column (one
    written before the confirmation existed).

    Examples
    --------
    >>> table = pd.DataFrame({"model": "m", "selected": [True, True, False], "label": [True, False, False]})
    >>> replication_lines(table)
    ['m · held-out confirmation: 1 of 2 selected labels replicate on the documents the selection never saw \
(the label column keeps those 1)']
    """
    if "selected" not in table:
        return []
    lines = []
    for model, rows in table.groupby("model", sort=False):
        selected = labelled_mask(rows["selected"])
        kept = int((selected & labelled_mask(rows["label"])).sum())
        lines.append(f"{model} · held-out confirmation: {kept} of {int(selected.sum())} selected labels "
                     f"replicate on the documents the selection never saw (the label column keeps those "
                     f"{kept})")
    return lines
