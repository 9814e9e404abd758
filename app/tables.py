"""Tables the dashboard reads from disk: a labels table from `probe label` (checked for the atlas's columns,
one probe length), the label tables shipped with models (`shipped_labels`) and a structure-set summary from
`probe contacts --heads-summary`."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from probe import zoo
from probe.errors import ProbeError
from probe.heads.tables import TABLE_EXTENSIONS, read_table_file
from probe.proteins.sets import read_heads_summary as read_summary
from probe.specs import resolve

from .registry import minilm_dir

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


# scripts/minilm_labels.py writes it
MINILM_TABLE = Path(__file__).resolve().parent / "data" / "minilm_labels.csv"


def shipped_labels(spec: str) -> pd.DataFrame | None:
    """The label table shipped with a model, or None: a bundled organism's `probe/zoo/NAME/labels.csv` (named
    by its card.json's "label_table" entry), and all-MiniLM-L6-v2's table in `app/data/`. Read once at
    start-up: the app labels nothing it was shipped a table for."""
    path = shipped_table_path(spec)
    if path is None:
        return None
    try:
        return one_length(read_table_file(path))
    except ProbeError:
        return None  # a damaged shipped table: the model is labelled in the background instead


def shipped_table_path(spec: str) -> Path | None:
    """Where the shipped label table of `spec` is, or None when it has none."""
    if spec.startswith("zoo:"):
        try:
            directory = zoo.path(spec[len("zoo:"):])
            entry = json.loads((directory / "card.json").read_text()).get("label_table")
        except (ProbeError, OSError, ValueError):
            return None
        name = entry.get("file") if isinstance(entry, dict) else None
        path = directory / name if isinstance(name, str) and "/" not in name and "\\" not in name else None
        return path if path is not None and path.is_file() else None
    minilm = minilm_dir()
    if minilm is not None and Path(resolve(spec)).resolve() == minilm and MINILM_TABLE.is_file():
        return MINILM_TABLE
    return None
