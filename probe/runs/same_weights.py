"""Sweeps that notice identical checkpoints: two revisions with the same weight bytes (EleutherAI/pythia #205:
86 of 154 pythia-2.8b step branches hold the final weights) give the same rows, and a sweep plot would show a
plateau that is no training dynamics at all.

Each unit of a sweep records its weights' identity in the ``weights`` column
(:func:`probe.runs.checkpoints.checkpoint_weights`: the sha256 of every weight file, from the Hugging Face
cache's blob names where it can). :func:`mark_same_weights` fills ``same_weights_as`` — the first checkpoint
of the sweep (in unit order) whose weights are the same, empty for the first of each set and wherever the
identity is unknown — and says one line per set of identical checkpoints."""

from __future__ import annotations

import pandas as pd

NAMED = 4  # a warning names at most this many checkpoints


def mark_same_weights(table: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(`table` with ``same_weights_as``, one warning line per set of checkpoints with the same weights).
    Tables without ``checkpoint`` and ``weights`` (no sweep) come back unchanged, with no line."""
    if "checkpoint" not in table or "weights" not in table or table.empty:
        return table, []
    table = table.copy()
    units = table[["model", "checkpoint", "weights"]].drop_duplicates(["model", "checkpoint"])
    first: dict[str, str] = {}  # weights identity -> the first checkpoint holding it
    sets: dict[str, list[str]] = {}
    same: dict[tuple[str, str], str] = {}
    for model, checkpoint, weights in units.itertuples(index=False):
        if not isinstance(weights, str) or not weights:
            continue
        name = str(checkpoint)
        if weights in first:
            same[(model, checkpoint)] = first[weights]
            sets[weights].append(name)
        else:
            first[weights], sets[weights] = name, [name]
    keys = list(zip(table["model"], table["checkpoint"], strict=True))
    table["same_weights_as"] = pd.array([same.get(key) for key in keys], dtype=object)
    lines = []
    for weights, names in sets.items():
        if len(names) > 1:
            shown = ", ".join(names[:NAMED]) + (
                f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
            )
            lines.append(
                f"warning: {len(names)} checkpoints hold the same weights ({weights}): {shown}; their rows "
                f"are one model's (column same_weights_as names the first)"
            )
    return table, lines
