"""Tables the dashboard reads from disk: a labels table from `probe label` (checked for the atlas's columns, one
probe length) and a structure-set summary from `probe contacts --heads-summary`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from probe.errors import ProbeError
from probe.heads.tables import TABLE_EXTENSIONS, read_table_file

LABEL_COLUMNS = ("layer", "head", "head_type", "score")


def read_labels(path: str | Path) -> pd.DataFrame:
    """A labels table from `probe label` (.csv, .parquet or .json); checked for the columns the atlas needs."""
    path = Path(path).expanduser()
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
        raise ProbeError(f"--labels {path}: missing columns {', '.join(missing)}; pass a table written by `probe label`")
    return table


def one_length(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of one probe length: a table from `probe label --seq-len 64,256` has a row per length for every head
    and type; the views show the first length it lists (its `stable` column says where the labels flip)."""
    if "seq_len" not in table.columns or table["seq_len"].nunique() <= 1:
        return table
    return table[table["seq_len"] == table["seq_len"].iloc[0]]


def read_heads_summary(path: str) -> pd.DataFrame:
    """`probe contacts --heads-summary` output, checked by probe.proteins.sets (one-line ProbeError otherwise)."""
    from probe.proteins.sets import read_heads_summary as read_summary

    return read_summary(path)
