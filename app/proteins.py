"""The protein panel's server side: probe.structure (true contacts) and probe.contacts (predicted contacts,
per-head table, one head's APC map) turned into what the panel shows. Called by the Service under its inference lock.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from probe import models
from probe.errors import ProbeError

RANGE_NAMES = ("short", "medium", "long")
RANGE_TEXT = {"short": "short (6–11)", "medium": "medium (12–23)", "long": "long (≥ 24)"}
LEADERBOARD_COLUMNS = ("head", "layer", "head_index", "p_at_L_long", "p_at_L_medium", "p_at_L_short",
                       "provis_share", "weight", "logit_share")


def analyse(service, loaded: models.LoadedModel, sequence: str | None, structure: bytes | None, filename: str = "",
            chain: str | None = None):
    """A ProteinResult for a typed sequence or an uploaded structure (true contacts: Cβ–Cβ < 8 Å)."""
    from app.service import ProteinResult
    from probe.contacts import predict_contacts
    from probe.structure import contact_map, read_structure

    true_map, note = None, ""
    if structure is not None:
        fmt = "cif" if filename.lower().endswith((".cif", ".mmcif")) else "pdb"
        parsed = read_structure(structure, chain=chain, fmt=fmt)
        sequence = parsed.sequence
        true_map = contact_map(parsed)  # [L L] int8: 1, 0, -1 unknown
        note = (f"{filename or 'structure'} chain {parsed.chain}: {len(sequence)} residues, "
                f"{int((np.triu(true_map, 1) == 1).sum())} true contacts (Cβ–Cβ < 8 Å)")
    sequence = models.clean_protein(sequence or "")
    cap = min(service.config.max_residues, loaded.max_tokens - 2)
    if len(sequence) > cap:
        raise ProbeError(f"the protein has {len(sequence)} residues; the app runs at most {cap}: upload a shorter "
                         "chain (or use `probe contacts --window` for long proteins)")
    with service.inference_lock:
        result = predict_contacts(loaded, sequence, true_map, per_head=True)
    truth = None if true_map is None else np.where(true_map < 0, np.nan, true_map.astype(float))
    return ProteinResult(model=loaded.name, sequence=sequence, predicted=np.asarray(result.contacts, np.float32),
                         true=truth, heads=leaderboard(result.heads, true_map is not None),
                         precision=precision_table(result.precision), note=note)


def leaderboard(heads: pd.DataFrame | None, with_structure: bool) -> pd.DataFrame | None:
    """Per-head rows for the panel's table: best long-range P@L first (by logit share without a structure)."""
    if heads is None or heads.empty:
        return None
    table = heads.rename(columns={"name": "head", "head": "head_index"})
    table = table[[column for column in LEADERBOARD_COLUMNS if column in table.columns]]
    key = "p_at_L_long" if with_structure else "logit_share"
    table = table.sort_values(key, ascending=False, na_position="last", ignore_index=True)
    if not with_structure:
        table = table.drop(columns=[c for c in table.columns if c.startswith("p_at_") or c == "provis_share"])
    return table.round(3)


def precision_table(precision: dict[str, float] | None) -> pd.DataFrame | None:
    """P@L, P@L/2, P@L/5 of the predicted contacts, one row per sequence-separation range."""
    if not precision:
        return None
    rows = [{"range": RANGE_TEXT[name], "P@L": precision[f"p_at_L_{name}"], "P@L/2": precision[f"p_at_L2_{name}"],
             "P@L/5": precision[f"p_at_L5_{name}"]} for name in RANGE_NAMES]
    return pd.DataFrame(rows).round(3)


def head_map(service, loaded: models.LoadedModel, sequence: str, layer: int, head: int) -> np.ndarray:
    """The selected head's APC-corrected symmetrised attention over residues: [residue residue]."""
    from probe.contacts import head_attention_map

    with service.inference_lock:
        return np.asarray(head_attention_map(loaded, sequence, layer, head), dtype=np.float32)
