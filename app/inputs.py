"""Parsing what users type: token ids ("15 7 22") and protein sequences (FASTA or bare), one-line errors."""

from __future__ import annotations

import re

from probe import models
from probe.errors import ProbeError
from probe.proteins.fasta import parse_fasta as read_records


def parse_token_ids(text: str, vocab_size: int) -> list[int]:
    """"15 7 22" or "15,7,22" -> [15, 7, 22], each checked against the vocabulary."""
    parts = [part for part in re.split(r"[\s,]+", text.strip()) if part]
    if not parts:
        raise ProbeError("no token ids given: type integers separated by spaces or commas, e.g. 5 17 17 5")
    ids = []
    for part in parts:
        if not part.lstrip("-").isdigit():
            raise ProbeError(f"{part!r} is not a token id: type integers separated by spaces or commas, "
                             "or untick 'token ids' to type text")
        value = int(part)
        if not 0 <= value < vocab_size:
            raise ProbeError(f"token id {value} is out of range: this model's vocabulary is "
                             f"0..{vocab_size - 1}")
        ids.append(value)
    return ids


def parse_fasta(text: str) -> str:
    """The first record of FASTA text, or a bare sequence; validated amino-acid letters."""
    _, sequence = read_records(text, "the input")[0]
    return models.clean_protein(sequence)


def row_head(service, spec: str, cell, rows, head_column: str = "head") -> dict:
    """{"layer", "head"} of the table row a user clicked (`cell` is the table's active cell, `rows` its data;
    the head index sits in `head_column`), checked against `spec`'s heads by ``service.facts.head_of``."""
    try:
        row = rows[int(cell["row"])]
        selected = {"layer": row["layer"], "head": row[head_column]}
    except (TypeError, KeyError, IndexError, ValueError):
        raise ProbeError("that row does not name a head; click a row of the table") from None
    layer, head = service.facts.head_of(spec, selected)
    return {"layer": layer, "head": head}
