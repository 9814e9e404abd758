"""Protein analysis for the dashboard as pure functions of a loaded model and an input: the library's one
protein analysis (probe.proteins.analysis: true contacts, predicted contacts, the per-head table; the same as
``probe report``'s) shown the panel's way, and one head's or one layer's APC maps. No locks, no service: the
Service calls these under its inference lock.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from probe import models
from probe.engine import capture
from probe.engine.dense import DenseSink
from probe.errors import ProbeError
from probe.models import encode_proteins
from probe.naming import display_name
from probe.proteins.analysis import analyse_protein, protein_input
from probe.proteins.contacts import head_attention_map
from probe.proteins.precision import apc, symmetrize
from probe.proteins.structure import Structure

RANGE_NAMES = ("short", "medium", "long")
RANGE_TEXT = {"short": "short (6–11)", "medium": "medium (12–23)", "long": "long (≥ 24)"}
# Leaderboard columns and their short headers (the table fits a half-width panel at 1600 px).
LEADERBOARD_COLUMNS = {"head": "head", "p_at_L_long": "P@L long", "base_rate_long": "base rate long",
                       "enrichment_L_long": "enrichment long", "p_fwer_L_long": "p FWER long",
                       "untrained_p99_L_long": "untrained p99 long", "significant_L_long": "significant long",
                       "p_at_L_medium": "P@L med", "p_at_L_short": "P@L short", "contact_share": "Vig share",
                       "binding_share": "binding share", "weight": "weight", "logit_share": "logit share"}
# Shown even when unknown for every head (a chain without a ligand: binding share NaN, shown "unknown", never
# 0).
ALWAYS_SHOWN = ("contact_share", "binding_share")
# Need a structure: P@L, its base rate and significance, Vig et al.'s shares.
NEEDS_STRUCTURE = ("p_at_", "base_rate_", "enrichment_", "p_fwer_", "untrained_", "significant_",
                   "contact_share", "binding_share")


@dataclass(frozen=True)
class ProteinResult:
    """Everything the protein panel shows for one sequence (and structure)."""

    model: str
    sequence: str
    predicted: np.ndarray  # [residue residue] contact probabilities
    # [residue residue] 1.0 contact, 0.0 not, NaN unknown (from the uploaded structure)
    true: np.ndarray | None
    heads: pd.DataFrame | None  # per-head leaderboard (head, layer, head_index, precision columns, ...)
    precision: pd.DataFrame | None  # P@L by sequence-separation range
    note: str = ""
    structure: Structure | None = None  # the uploaded chain (its atoms: the 3D view), None for a sequence

    @property
    def nbytes(self) -> int:
        """Memory the result holds (for the cache's byte budget): the predicted and true maps, and the
        uploaded chain's atoms (about 100 bytes an atom: coordinates and annotations)."""
        atoms = getattr(self.structure, "atoms", None) if self.structure is not None else None
        return self.predicted.nbytes * 2 + 100 * len(atoms if atoms is not None else ())


def analyse(loaded: models.LoadedModel, sequence: str | None, structure: bytes | None, filename: str = "",
            chain: str | None = None, max_residues: int = 1022) -> ProteinResult:
    # max_residues: the cap of app.facts.ModelFacts.residue_cap (the model's own, or --max-residues)
    """A ProteinResult for a typed sequence or an uploaded structure: the library's one protein analysis
    (:func:`probe.proteins.analysis.analyse_protein`, as ``probe report`` and ``probe contacts``; true
    contacts: virtual Cβ–Cβ < 8 Å, as in ESM's evaluation; binding sites and secondary structure for Vig et
    al.'s shares), shown the panel's way. The note names the chain used and the others of a multi-chain file,
    and says when the input is outside the model's training domain (:mod:`probe.proteins.domain`)."""
    fmt = "cif" if filename.lower().endswith((".cif", ".mmcif")) else "pdb"
    typed = None if structure is not None else (sequence or "")  # a structure: its chain's own residues
    protein = protein_input(loaded, typed, structure, chain=chain, fmt=fmt)
    note = ""
    if protein.structure is not None:
        note = (f"{filename or 'structure'} chain {protein.structure.chain}: {len(protein.sequence)} "
                f"residues, {protein.true_contacts} true contacts (virtual Cβ–Cβ < 8 Å)")
        others = protein.other_chains
        note += f" · {others.replace('--chain / the chain menu', 'the chain menu')}" if others else ""
    if len(protein.sequence) > max_residues:
        raise ProbeError(f"the protein has {len(protein.sequence)} residues; the app runs at most "
                         f"{max_residues} with {display_name(loaded.name)}: upload a shorter chain (or use "
                         "`probe contacts --window` for long proteins)")
    analysis = analyse_protein(loaded, protein)
    result, true_map = analysis.result, protein.true_map
    name = str(getattr(loaded.config, "_name_or_path", "") or loaded.name)
    outside = analysis.outside.replace(name, display_name(name)) if analysis.outside else ""  # no server path
    note = " · ".join(part for part in (note, outside) if part)
    truth = None if true_map is None else np.where(true_map < 0, np.nan, true_map.astype(float))
    predicted = result.contacts
    if predicted is None:  # a protein model without a contact regression (ProtBert-style): heads only
        predicted = np.full((len(protein.sequence), len(protein.sequence)), np.nan, dtype=np.float32)
        note = ((note + " · " if note else "")
                + f"{display_name(loaded.name)} has no contact regression: per-head maps only")
    return ProteinResult(model=loaded.name, sequence=protein.sequence,
                         predicted=np.asarray(predicted, np.float32), true=truth,
                         heads=leaderboard(result.heads, true_map is not None),
                         precision=precision_table(result.precision), note=note, structure=protein.structure)


def leaderboard(heads: pd.DataFrame | None, with_structure: bool) -> pd.DataFrame | None:
    """Per-head rows for the panel's table: best long-range P@L first (by logit share without a structure).

    With a structure every head is set against the contact base rate of the long-range pairs (base rate,
    enrichment = P@L / base rate) and tested (:mod:`probe.proteins.significance`: the family-wise p of the
    diagonal-shift test, the untrained twins' 99th percentile of P@L, and whether it is significant: "yes",
    "no", NaN untested),
    and Vig et al.'s shares are shown, NaN ("unknown" in the panel) where the chain lacks the property. Other
    columns that are empty for this input are left out. `layer` and `head_index` stay for row clicks.
    """
    if heads is None or heads.empty:
        return None
    table = heads.rename(columns={"name": "head", "head": "head_index"})
    key = "p_at_L_long" if with_structure else "logit_share"
    table = table.sort_values(key, ascending=False, na_position="last", ignore_index=True)
    keep = [c for c in LEADERBOARD_COLUMNS
            if c in table.columns and (c in ALWAYS_SHOWN or not table[c].isna().all())]
    if not with_structure:
        keep = [c for c in keep if not c.startswith(NEEDS_STRUCTURE)]
    if "significant_L_long" in table:  # nullable boolean -> text the table's JSON can carry
        table["significant_L_long"] = table["significant_L_long"].map({True: "yes", False: "no"})
    table = table[keep + ["layer", "head_index"]].rename(columns=LEADERBOARD_COLUMNS)
    # p-values keep their digits: the panel prints them as the label tables do ("< 0.001", not a rounded 0)
    return table.round({column: 3 for column in table.columns if column != "p FWER long"})


def precision_table(precision: dict[str, float] | None) -> pd.DataFrame | None:
    """P@L, P@L/2, P@L/5 of the predicted contacts, one row per sequence-separation range."""
    if not precision:
        return None
    rows = [{"range": RANGE_TEXT[name], "P@L": precision[f"p_at_L_{name}"],
             "P@L/2": precision[f"p_at_L2_{name}"], "P@L/5": precision[f"p_at_L5_{name}"]}
             for name in RANGE_NAMES]
    return pd.DataFrame(rows).round(3)


def head_map(loaded: models.LoadedModel, sequence: str, layer: int, head: int) -> np.ndarray:
    """The selected head's APC-corrected symmetrised attention over residues: [residue residue]."""
    return np.asarray(head_attention_map(loaded, sequence, layer, head), dtype=np.float32)


def layer_maps(loaded: models.LoadedModel, sequence: str, layer: int) -> np.ndarray:
    """Every head's APC-corrected symmetrised attention over residues in one layer, from one forward pass:
    [head residue residue] float32 (each head equals `head_map`)."""
    if not 0 <= layer < loaded.n_layers:
        raise ProbeError(f"layer {layer} does not exist: the model has layers 0..{loaded.n_layers - 1}")
    cleaned, inputs = encode_proteins(loaded, [sequence])
    sink = DenseSink([layer])
    with capture(loaded.model, sink), torch.inference_mode():
        loaded.model(**inputs)
    start, length = loaded.residue_offset, len(cleaned[0])
    alpha = sink.attention(0)[0, 0, :, start:start + length, start:start + length]  # [head L L]
    return np.stack([apc(symmetrize(alpha[h])).numpy() for h in range(alpha.shape[0])]).astype(np.float32)
