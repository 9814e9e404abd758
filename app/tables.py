"""Tables the dashboard reads from disk: a labels table from `probe label` (checked for the atlas's columns,
one probe length), the label tables shipped with models (`shipped_labels`) and a structure-set summary from
`probe contacts --heads-summary`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from probe.errors import ProbeError
from probe.heads.tables import TABLE_EXTENSIONS, read_table_file
from probe.proteins.sets import read_heads_summary as read_summary
from probe.specs import LABELS_DIR, shipped_labels_path

LABEL_COLUMNS = ("layer", "head", "head_type", "score")


def read_labels(path: str | Path) -> pd.DataFrame:
    """A labels table from `probe label` (.csv, .parquet or .json); checked for the columns the atlas
    needs."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ProbeError(f"--labels {path} is a folder: give the table file inside it, written by "
                         "`probe label`")
    if not path.is_file():
        raise ProbeError(f"--labels {path}: no such file; pass a table written by `probe label`")
    if path.suffix.lower() not in TABLE_EXTENSIONS:
        raise ProbeError(f"--labels {path}: the extension must be one of {', '.join(TABLE_EXTENSIONS)}")
    try:
        table = read_table_file(path)
    except ProbeError as error:
        raise ProbeError(f"--labels {error}; pass a table written by `probe label`") from None
    missing = [column for column in LABEL_COLUMNS if column not in table.columns]
    if missing:
        raise ProbeError(f"--labels {path}: missing columns {', '.join(missing)}; pass a table written by "
                         "`probe label`")
    return table


def one_length(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of one probe length: a table from `probe label --seq-len 64,256` has a row per length for
    every head and type; the views show the first length it lists (its `stable` column says where the labels
    flip)."""
    if "seq_len" not in table.columns or table["seq_len"].nunique() <= 1:
        return table
    return table[table["seq_len"] == table["seq_len"].iloc[0]]


def read_heads_summary(path: str) -> pd.DataFrame:
    """`probe contacts --heads-summary` output, checked by probe.proteins.sets (one-line ProbeError
    otherwise)."""
    return read_summary(path)


MINILM_TABLE = LABELS_DIR / "all-MiniLM-L6-v2.csv"  # scripts/minilm_labels.py writes it


def shipped_labels(spec: str) -> pd.DataFrame | None:
    """The label table shipped with a model, or None: a bundled organism's `probe/zoo/NAME/labels.csv` (named
    by its card.json's "label_table" entry), and all-MiniLM-L6-v2's in `probe/data/labels/`, matched by model
    id (:func:`probe.specs.shipped_labels_path`). Read once at
    start-up: the app labels nothing it was shipped a table for."""
    path = shipped_labels_path(spec)
    if path is None:
        return None
    try:
        return one_length(read_table_file(path))
    except ProbeError:
        return None  # a damaged shipped table: the model is labelled in the background instead


