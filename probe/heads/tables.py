"""Label-table files: one schema and one reader/writer, shared by `probe label` and the dashboard.

A label table has one row per (model, seq_len, layer, head, head_type); :data:`COLUMNS` lists its columns in
order (docs/labels.md, "Labelling heads", explains each). Files are parquet, csv or json (a list of records),
chosen by the extension. Tables written before a column existed read back with that column empty (NaN), so
older files stay usable; a file that lacks the identifying columns is not a label table and is refused.
"""

from __future__ import annotations

import math

import pandas as pd

from probe.errors import ProbeError, first_line
from probe.labelled import NOT_LABELLED, is_labelled, labelled_mask  # noqa: F401 - the one rule, re-exported
from probe.specs import PACKAGED_NAMES, model_id

COLUMNS = [
    "model", "revision", "layer", "head", "head_name", "head_type", "probe_set", "seq_len",
    "score", "ci_low", "ci_high", "chance", "effect", "p_value", "q_value", "tl_score", "offset",
    "label", "stable", "n_examples", "n_clusters", "seed",
    "accuracy", "accuracy_ci_low", "accuracy_ci_high", "baseline", "baseline_accuracy", "accuracy_by_source",
    "ablation_effect", "ablation_z",
    "output_share", "output_share_low", "output_share_high", "role",
    "group_effect", "group_z", "group_size", "group_heads",
    "copying", "copying_dla",
    "type_group_effect", "type_group_z", "type_group_size",
    "retrieval_k", "needle_recall", "needle_recall_top", "needle_recall_random", "needle_recall_random_min",
    "retrieval_ablation",
    # issue 39: coreference must find the antecedent, whole-model retrieval controls, untrained twins
    "p_above_chance", "clark_accuracy", "untrained_p99",
    "retrieval_mask", "needle_recall_other_min", "needle_recall_other_head", "retrieval_beats_controls",
    "fed_by", "fed_by_mode", "fed_by_effect",
    # issue 57: every label confirmed on held-out documents
    "selected", "confirm_score", "confirm_ci_low", "confirm_ci_high", "confirm_effect", "confirm_p",
    "confirm_q", "confirm_clusters", "replicated",
]
"""The label table's columns, in file order; one row per (model, seq_len, layer, head, head_type).

| column | dtype | meaning |
|---|---|---|
| `model` | str | the model as asked for: hub id, directory or `zoo:NAME` |
| `revision` | str | hub commit hash, or `sha256:…` of a local model's weight files |
| `layer`, `head` | int | 0-based |
| `head_name` | str | `L{layer}H{head}` |
| `head_type` | str | a registered head type |
| `probe_set` | str | `natural`, `repeated`, `brackets`, `random-brackets`, `random-sentences`, `gap`, `templates`, `causality` or `file` |
| `seq_len` | float | probe length in tokens; NaN for span types |
| `score` | float | mean attention mass on the targets over the rows that have one, on the selection half (every column but `confirm_*` is the selection half's: docs/labels.md, "Held-out confirmation") |
| `ci_low`, `ci_high` | float | clustered bootstrap interval of `score` |
| `chance` | float | a uniform head's score on the same probes |
| `effect` | float | score − chance; accuracy types: accuracy gain over the best baseline |
| `p_value`, `q_value` | float | one-sided test of effect > min_effect, Benjamini–Hochberg q-value |
| `tl_score` | float | TransformerLens' `detect_head` "mul" score with TL's own detection pattern; NaN for span types |
| `offset` | float | the head's chosen candidate (fixed_offset: offset d); NaN otherwise |
| `label` | bool | `selected` and `replicated`: found on the selection half and reproduced on the confirmation half |
| `stable` | bool | the label is the same at every probe length of the run |
| `n_examples`, `n_clusters` | int | examples with a target, bootstrap clusters (the selection half's) |
| `seed` | int | probe, bootstrap and control seed |
| `accuracy`, `accuracy_ci_low`, `accuracy_ci_high` | float | accuracy types: accuracy and its interval; else NaN |
| `baseline`, `baseline_accuracy` | str, float | the best baseline (nearest / first / agreement) and its accuracy |
| `accuracy_by_source` | str | accuracy per group of examples |
| `ablation_effect`, `ablation_z` | float | loss change when the head is zeroed, and its z against same-layer controls (whole-model controls when the layer has too few unlabelled heads); NaN for heads not ablated |
| `output_share`, `output_share_low`, `output_share_high` | float | mean over the rows with a target of Σ_{j∈T(i)} ‖α_ij f_h(x_j)‖ / Σ_j ‖α_ij f_h(x_j)‖, f_h(x) = (x W_V^h + b_V^h) W_O^h (Kobayashi et al. 2020), averaged like `score`, and its bootstrap interval; NaN where the output projection is not found |
| `role` | str | labelled heads: sink types `sink` when `output_share` < 0.1, else `function`; other types `function` when `output_share` > `chance`, else `inert`; induction functions `copying` / `suppressing` by `copying` (±0.1); empty otherwise |
| `group_effect`, `group_z` | float | loss change when the type's labelled heads of the layer are zeroed together, and its z against random groups of the same size (same layers where possible); NaN where fewer than two heads are labelled |
| `group_size`, `group_heads` | int, str | the group's size and its heads (`L1H0 L1H1 …`) |
| `copying` | float | Elhage et al.'s eigenvalue copying score Σλ / Σ abs(λ) of the head's OV circuit; NaN without an unembedding |
| `copying_dla` | float | induction rows: direct logit attribution to the induction target's token (logits); NaN elsewhere |
| `type_group_effect`, `type_group_z`, `type_group_size` | float | all the type's labelled heads ablated together across layers, its z against random groups of the same layer histogram, and their number; NaN for other rows |
| `retrieval_k` | float | retrieval rows: K, the heads masked (the largest of 1 … 5 % of the heads, at least 1); NaN elsewhere |
| `needle_recall`, `needle_recall_top` | float | retrieval rows: needle recall with no head masked, and with the K top-scoring retrieval heads masked (Wu et al. 2024) |
| `needle_recall_random`, `needle_recall_random_min` | float | retrieval rows: mean and lowest recall over random sets of K heads of the whole model masked |
| `retrieval_ablation` | str | retrieval rows: every K's recalls (`clean 0.65; K=1: top 0.08, random 0.58–0.64`) |
| `p_above_chance` | float | coreference rows: one-sided p of H0 score − chance ≤ 0 (the label needs it too) |
| `clark_accuracy` | float | coreference rows: the pronoun's most-attended word among all words is the antecedent (Clark et al. 2019) |
| `untrained_p99` | float | 99th percentile of the untrained twins' statistic over all their heads (`--control untrained:K`); NaN without twins |
| `retrieval_mask` | str | retrieval rows: `output` (ours) or `query` (Wu et al.'s: query zeroed, decoding only) |
| `needle_recall_other_min`, `needle_recall_other_head` | float, str | retrieval rows: the lowest recall over every other head masked alone, and that head |
| `retrieval_beats_controls` | bool | retrieval rows: the top K's recall is below every random draw and below the most damaging other head's |
| `fed_by`, `fed_by_mode`, `fed_by_effect` | str, str, float | `probe label --circuits`, labelled rows: the head's strongest upstream edge in its type's circuit (`probe.circuits`): the earlier head (`L0H1`), the mode (`Q`, `K`, `V`) and the path-patching effect in nats (NaN: composition only); empty without an edge or without --circuits |
| `selected` | bool | the selection half's decision: q_value ≤ fdr, and the statistic (accuracy for accuracy types, else score) above `untrained_p99` where known |
| `confirm_score`, `confirm_ci_low`, `confirm_ci_high` | float | the statistic (accuracy for accuracy types, else score) on the confirmation half — the documents the selection never saw — with its clustered bootstrap interval; fixed_offset keeps the selection's offset |
| `confirm_effect`, `confirm_p` | float | the confirmation half's effect and the same one-sided test as `p_value` |
| `confirm_q` | float | Benjamini–Hochberg of `confirm_p` over the selected rows; NaN for rows not selected |
| `confirm_clusters` | int | bootstrap clusters (documents) in the confirmation half |
| `replicated` | bool | selected rows: `confirm_q` ≤ fdr and `confirm_score` above `untrained_p99` where known; NaN for rows not selected (nothing to replicate) |

Tables written before a column existed read back with it NaN (:func:`load_table`).

Examples
--------
>>> from probe.heads.tables import COLUMNS, load_table
>>> COLUMNS[:8]  # the identifying columns come first
['model', 'revision', 'layer', 'head', 'head_name', 'head_type', 'probe_set', 'seq_len']
>>> list(load_table(probe.zoo.labels_path("induction")).columns) == COLUMNS  # a shipped table, in this order
True
"""  # noqa: E501 - markdown table rows cannot wrap
# Without these a file is not a label table (older tables have them all).
REQUIRED = ["model", "revision", "layer", "head", "head_name", "head_type", "score", "chance", "label"]

TABLE_EXTENSIONS = (".parquet", ".csv", ".json")
_TEXT_COLUMNS = {"model": str, "revision": str, "probe_set": str, "baseline": str, "accuracy_by_source": str,
                 "role": str, "group_heads": str, "retrieval_ablation": str, "retrieval_mask": str,
                 "needle_recall_other_head": str, "fed_by": str, "fed_by_mode": str}

_FLAG_COLUMNS = ("replicated", "retrieval_beats_controls")  # bool where known, NaN elsewhere


def _suffix(path) -> str:
    return str(path).lower().rsplit(".", 1)[-1]


def save_table(table: pd.DataFrame, path) -> None:
    """Write a label table by the path's extension: .parquet, .csv or .json (a list of records).

    Parameters
    ----------
    table : pandas.DataFrame
        A label table (columns :data:`COLUMNS`).
    path : str or os.PathLike
        Where to write; the extension chooses the format. The write is not atomic (``probe label --out``
        replaces its file atomically).

    Raises
    ------
    ProbeError
        The extension is not .parquet, .csv or .json.

    Examples
    --------
    >>> import os, tempfile
    >>> import probe.zoo
    >>> table = load_table(probe.zoo.labels_path("induction"))  # zoo:induction's shipped labels
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     save_table(table, os.path.join(folder, "labels.parquet"))
    ...     back = load_table(os.path.join(folder, "labels.parquet"))
    >>> back.equals(table)
    True
    """
    suffix = _suffix(path)
    if suffix == "parquet":
        table.to_parquet(path, index=False)
    elif suffix == "csv":
        table.to_csv(path, index=False)
    elif suffix == "json":
        table.to_json(path, orient="records", indent=1)
    else:
        raise ProbeError(f"{path}: the extension must be one of {', '.join(TABLE_EXTENSIONS)}")


def read_table_file(path) -> pd.DataFrame:
    """A table file by its extension (.parquet, .csv, .json records), as written by :func:`save_table`;
    one-line ProbeError when it cannot be read. No check of its columns (see :func:`load_table`)."""
    suffix = _suffix(path)
    try:
        if suffix == "parquet":
            return pd.read_parquet(path)
        if suffix == "csv":
            return pd.read_csv(path, dtype=_TEXT_COLUMNS, encoding="utf-8")
        if suffix == "json":
            return pd.read_json(path, orient="records", dtype=_TEXT_COLUMNS, encoding="utf-8")
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise ProbeError(f"cannot read the label table {path}: {first_line(error)}") from None
    raise ProbeError(f"{path}: the extension must be one of {', '.join(TABLE_EXTENSIONS)}")


def is_label_table(table: pd.DataFrame) -> bool:
    """True when the table has every identifying column of a label table."""
    return all(column in table.columns for column in REQUIRED)


def load_table(path) -> pd.DataFrame:
    """Read a label table written by :func:`save_table` (or ``probe label --out``).

    Parameters
    ----------
    path : str or os.PathLike
        A .parquet, .csv or .json (records) file.

    Returns
    -------
    pandas.DataFrame
        Columns in :data:`COLUMNS` order; columns newer than the file are NaN.

    Raises
    ------
    ProbeError
        One line: the file cannot be read, has another extension, or is not a label table (it lacks an
        identifying column — also when it has a header but no rows).

    Examples
    --------
    >>> import probe.zoo
    >>> table = load_table(probe.zoo.labels_path("induction"))  # 2 layers x 4 heads x 10 head types
    >>> table.shape, list(table.columns) == COLUMNS
    ((80, 68), True)
    >>> table.loc[table["label"], ["head_name", "head_type"]].head(3).values.tolist()
    [['L0H1', 'previous_token'], ['L0H0', 'first_token'], ['L0H2', 'first_token']]
    """
    table = read_table_file(path)
    if not is_label_table(table):
        missing = [column for column in REQUIRED if column not in table.columns]
        raise ProbeError(f"{path} is not a probe label table (no {', '.join(missing[:3])} column): "
                         "give a table written by probe label --out")
    table = table.reindex(columns=COLUMNS)
    # a text column without any value, and a flag's unknown cells (replicated: True / False / NaN), read back
    # as None from parquet: NaN, as written
    for column in (*_TEXT_COLUMNS, *_FLAG_COLUMNS):
        if table[column].dtype == object:
            table[column] = table[column].where(table[column].notna(), math.nan)
    return table


def rows_of_model(table: pd.DataFrame, name: str, revision: str | None = None,
                  shape: tuple[int, int] | None = None) -> pd.DataFrame:
    """The rows of one model in a label table; refused in one line when the table holds no row of it.

    A row is the model's when its ``model`` column is `name` (for a package-shipped model also its hub id
    or its name, :data:`probe.specs.PACKAGED_NAMES`) or its ``revision`` column is `revision` (the same
    weights asked for by another path). A table without a ``model`` column (one built by hand) is the
    model's as a whole, provided every ``layer``/``head`` it names exists in the model.

    Parameters
    ----------
    table : pandas.DataFrame
        A label table (at least ``layer``, ``head``).
    name : str
        The model as asked for (``LoadedModel.name``).
    revision : str, optional
        Its revision (``LoadedModel.revision``).
    shape : (int, int), optional
        (layers, heads) of the model: rows naming a head it does not have are refused.

    Returns
    -------
    pandas.DataFrame
        The model's rows (every probe length).

    Raises
    ------
    ProbeError
        The table names other models only, or a head the model does not have.
    """
    if "model" in table.columns and not table.empty:
        names = {name}
        if (hub := model_id(name)) in PACKAGED_NAMES:  # a package-shipped model: its hub id or its name too
            names |= {hub, PACKAGED_NAMES[hub]}
        mine = table["model"].astype(str).isin(names)
        if revision and revision != "unknown" and "revision" in table.columns:
            mine |= table["revision"].astype(str) == str(revision)
        if not mine.any():
            others = sorted(table["model"].dropna().astype(str).unique())
            listed = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            raise ProbeError(f"the labels table holds no row of {name} (its rows are of "
                             f"{listed or 'no named model'}); pass the table `probe label --model {name}` "
                             "wrote")
        table = table[mine]
    if shape is not None and not table.empty:
        layers = pd.to_numeric(table["layer"], errors="coerce")
        heads = pd.to_numeric(table["head"], errors="coerce")
        outside = ~(layers.between(0, shape[0] - 1) & heads.between(0, shape[1] - 1))
        if outside.any():
            row = table[outside].iloc[0]
            raise ProbeError(f"the labels table names layer {row['layer']} head {row['head']}, which {name} "
                             f"does not have ({shape[0]} layers × {shape[1]} heads); pass the table "
                             f"`probe label --model {name}` wrote")
    return table
