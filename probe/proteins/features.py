"""Vig et al.'s feature shares: how much of a head's high attention lands on a structural property.

Reproduced from "BERTology Meets Biology" (Vig et al. 2020) as its code computes it (salesforce/provis,
``protein_attention/attention_analysis/compute_edge_features.py``, ``report_edge_features.py``, ``features.py``,
``background.py``). For every head, over every sequence of a set and every residue pair (i attends to j; rows and
columns of special tokens dropped, the attention *not* renormalised afterwards)::

    n_high    = #{(i, j) : α(i, j) ≥ θ}                                  θ = 0.3 (--min-attention)
    n_f       = #{(i, j) : α(i, j) ≥ θ and the pair / the attended residue j has property f}
    share_f   = Σ_sequences n_f / Σ_sequences n_high                     pooled over the set, not a mean of shares
    left out (NaN) where Σ n_high < 100                                  (--min-count; report_edge_features' min_total)

Properties f:

* ``contact``: the pair is a true contact and |i − j| ≥ 6. As in TAPE's ProteinNet contact maps (which provis uses),
  pairs closer than 6 in sequence and pairs without coordinates are -1 there, so they stay in the denominator and
  never in the numerator;
* ``binding``: the attended residue j is a binding site (provis' ``BindingSiteFeature``: attention *to* the site);
* ``helix``, ``strand``, ``coil``: the secondary structure of the attended residue j (``SecStructFeature``, "to").

Background (provis' ``background.py``: the property's rate in the data, what a head attending at random gets)::

    contact: Σ contact pairs with |i − j| ≥ 6 / Σ L²      binding, helix, ...: Σ residues with the property / Σ L

Where we differ: provis takes binding sites from PDB SITE records and secondary structure from DSSP (TAPE's
NetSurfP data, 4 classes); we derive both from the structure file itself (ligand HETATMs within a stated distance,
P-SEA via biotite), see :mod:`probe.proteins.structure`.

Column names (per-head tables): ``n_high``, ``n_{f}`` (float; NaN where the property is unknown for that
sequence), ``{f}_share``, ``{f}_background``. Per-sequence background counts: ``n_pairs`` (L²), ``n_residues`` (L),
``n_contact_pairs`` and ``n_{f}_residues``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

MIN_ATTENTION = 0.3  # θ: attention weights at least this high are counted (provis: --min-attn .3)
MIN_COUNT = 100  # heads with fewer high weights over the set are left out (provis: min_total = 100)
MIN_SEPARATION = 6  # contacts closer in sequence are not counted as contacts (TAPE's ProteinNet maps)
PAIR_FEATURES = ("contact",)
RESIDUE_FEATURES = ("binding", "helix", "strand", "coil")
FEATURES = PAIR_FEATURES + RESIDUE_FEATURES
SECONDARY_CODES = {"helix": "a", "strand": "b", "coil": "c"}  # P-SEA codes (biotite annotate_sse)


@dataclass(frozen=True, eq=False)
class ResidueFeatures:
    """Structural properties of one sequence, aligned to it (L = sequence length); None where not known."""

    contacts: np.ndarray | None = None  # [L L] int8: 1 contact, 0 not, -1 unknown
    binding: np.ndarray | None = None  # [L] int8: 1 binding site, 0 not, -1 unknown
    secondary: np.ndarray | None = None  # [L] str: "a" helix, "b" strand, "c" coil, "" unknown

    def available(self) -> tuple[str, ...]:
        """The properties this sequence has data for."""
        names = []
        if self.contacts is not None:
            names.append("contact")
        if self.binding is not None:
            names.append("binding")
        if self.secondary is not None:
            names += ["helix", "strand", "coil"]
        return tuple(names)


def feature_masks(features: ResidueFeatures, length: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Property masks: "contact" [L L] over (query, key) pairs, the residue properties [L] over attended keys."""
    masks: dict[str, torch.Tensor] = {}
    if features.contacts is not None:
        contacts = torch.as_tensor(np.asarray(features.contacts) == 1, device=device)  # [L L]
        position = torch.arange(length, device=device)
        far = (position[:, None] - position[None, :]).abs() >= MIN_SEPARATION  # [L L]
        masks["contact"] = contacts & far
    if features.binding is not None:
        masks["binding"] = torch.as_tensor(np.asarray(features.binding) == 1, device=device)  # [L]
    if features.secondary is not None:
        secondary = np.asarray(features.secondary).astype(str)
        for name, code in SECONDARY_CODES.items():
            masks[name] = torch.as_tensor(secondary == code, device=device)  # [L]
    for name, mask in masks.items():
        expected = (length, length) if name in PAIR_FEATURES else (length,)
        if tuple(mask.shape) != expected:
            raise ValueError(f"the {name} data has shape {tuple(mask.shape)} but the sequence has {length} residues")
    return masks


def feature_counts(alpha: torch.Tensor, masks: Mapping[str, torch.Tensor],
                   min_attention: float = MIN_ATTENTION) -> dict[str, torch.Tensor]:
    """{"n_high": [head], "n_{f}": [head]} for α [head L L] over residues (query, key): counts of α ≥ θ overall and
    on each property in `masks` (see :func:`feature_masks`)."""
    high = alpha >= min_attention  # [head L L]
    counts = {"n_high": high.sum((-1, -2))}
    for name, mask in masks.items():
        if mask.ndim == 2:  # a pair property [L L]
            counts[f"n_{name}"] = (high & mask).sum((-1, -2))
        else:  # a property of the attended residue [L]: sum over queries first, then over the keys that have it
            counts[f"n_{name}"] = (high.sum(-2) * mask).sum(-1)
    return counts


def background_counts(features: ResidueFeatures | None, length: int) -> dict[str, float]:
    """Per-sequence counts behind the background rates (NaN where the property is unknown)."""
    counts = {"n_pairs": float(length * length), "n_residues": float(length)}
    masks = feature_masks(features, length) if features is not None else {}
    counts["n_contact_pairs"] = float(masks["contact"].sum()) if "contact" in masks else float("nan")
    for name in RESIDUE_FEATURES:
        counts[f"n_{name}_residues"] = float(masks[name].sum()) if name in masks else float("nan")
    return counts


def _background_columns(name: str) -> tuple[str, str]:
    """(numerator, denominator) background count columns of a property."""
    return ("n_contact_pairs", "n_pairs") if name == "contact" else (f"n_{name}_residues", "n_residues")


def shares(counts: pd.DataFrame, min_count: int = MIN_COUNT) -> pd.DataFrame:
    """`{f}_share` columns from the count columns of one sequence or of a pooled set (a copy; NaN where n_high is
    below `min_count` or the property is unknown)."""
    table = counts.copy()
    enough = table["n_high"] >= min_count
    for name in FEATURES:
        column = f"n_{name}"
        if column not in table:
            table[column] = np.nan
        with np.errstate(invalid="ignore", divide="ignore"):
            table[f"{name}_share"] = np.where(enough & table[column].notna(), table[column] / table["n_high"], np.nan)
    return table


def pooled_shares(heads: pd.DataFrame, min_count: int = MIN_COUNT) -> pd.DataFrame:
    """Vig et al.'s pooled shares per head from a per-sequence table (one row per sequence × head with ``layer``,
    ``head`` and the ``n_*`` counts): for each property, Σ n_f / Σ n_high over the sequences that have data for it;
    NaN where that Σ n_high is below `min_count`. One row per (layer, head) with ``n_high`` (all sequences),
    ``n_{f}`` and ``{f}_share``."""
    rows = []
    for (layer, head), group in heads.groupby(["layer", "head"], sort=True):
        row = {"layer": int(layer), "head": int(head), "n_high": float(group["n_high"].sum())}
        for name in FEATURES:
            column = f"n_{name}"
            known = group[column].notna() if column in group else pd.Series(False, index=group.index)
            high = float(group.loc[known, "n_high"].sum())
            row[column] = float(group.loc[known, column].sum()) if known.any() else np.nan
            row[f"{name}_share"] = row[column] / high if known.any() and high >= min_count and high > 0 else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def pooled_backgrounds(records: pd.DataFrame) -> dict[str, float]:
    """{f}_background over a set: Σ property count / Σ denominator over the sequences that have data for it."""
    result = {}
    for name in FEATURES:
        numerator, denominator = _background_columns(name)
        if numerator not in records:
            result[f"{name}_background"] = np.nan
            continue
        known = records[numerator].notna()
        total = float(records.loc[known, denominator].sum())
        result[f"{name}_background"] = float(records.loc[known, numerator].sum()) / total if total > 0 else np.nan
    return result


def backgrounds(counts: Mapping[str, float]) -> dict[str, float]:
    """{f}_background of one sequence from :func:`background_counts`."""
    return pooled_backgrounds(pd.DataFrame([dict(counts)]))
