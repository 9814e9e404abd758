"""Vig et al.'s feature shares: how much of a head's high attention lands on a structural property.

"BERTology Meets Biology" (Vig et al.) exists in two versions of its code, salesforce/provis
``protein_attention/attention_analysis/compute_edge_features.py`` (with ``report_edge_features.py``,
``report_top_heads.py``, ``features.py``, ``background.py``), and they define the share differently. Both are
computed; they have different names.

``{f}_share`` — attention-weighted, provis' **first version** (commit 34e6869, unchanged in b23402d, which
only adds licence headers; ``attns = (attn > min_attn) * attn``, then sums of α; its scripts run ``--min-attn
.1``)::

    w_high    = Σ α(i, j)            over pairs with α(i, j) > θ (strict)
    w_f       = Σ α(i, j) · f(i, j)  over the same pairs
    share_f   = Σ_sequences w_f / Σ_sequences w_high        pooled over the set, not a mean of shares
    NaN where Σ w_high < 100                                (--min-total; report_edge_features'
                                                             ``min_total``, applied to Σ α)

``{f}_count_share`` — counts, provis' **ICLR 2021 version** (commit 946e9b4, identical at HEAD 051fe89;
``mask = attns >= min_attn``, then sums of the mask; its scripts run ``--min-attn .3``)::

    n_high = #{(i, j) : α(i, j) ≥ θ},  n_f = #{... and f(i, j)},  count_share_f = Σ n_f / Σ n_high
    NaN where Σ n_high < 100                                (--min-count)

One θ (``--min-attention``) serves both; its default 0.3 is the ICLR version's, so ``{f}_count_share``
reproduces that version as it ran. The first version ran at θ = 0.1: ``--min-attention 0.1`` reproduces its
``{f}_share`` (:data:`probe.proteins.defaults.MIN_ATTENTION_FIRST_VERSION`). In both, rows and columns of
special tokens ([CLS]/[SEP], BOS/EOS) are dropped and α is not renormalised, every residue pair (i attends to
j, i = j included) of every sequence is visited, and a pair without the property stays in the denominator.

Properties f:

* ``contact``: the pair is a true contact and |i − j| ≥ 6. As in TAPE's ProteinNet contact maps (which provis
  uses), pairs closer than 6 in sequence and pairs without coordinates are -1 there, so they stay in the
  denominator and never in the numerator;
* ``binding``: the attended residue j is a binding site (provis' ``BindingSiteFeature``: attention *to* the
  site);
* ``helix``, ``strand``, ``turn_bend``, ``blank``: provis' 4 secondary-structure classes (``ss4``: Helix,
  Beta, Turn/Bend, Blank) of the attended residue j (``SecStructFeature``, "to"; DSSP, see
  :mod:`probe.proteins.structure`). Turn/bend (DSSP T, S) and blank (no DSSP assignment) are reported apart,
  as provis reports them.

Backgrounds (the property's rate in the data)::

    contact_background            = Σ contact pairs / Σ known pairs
                                    known: |i − j| ≥ 6 and both residues resolved
    contact_background_all_pairs  = Σ contact pairs / Σ L²
    binding, helix, ... background = Σ residues with the property / Σ L

``contact_background`` is provis' (``report_top_heads.py``: contacts / (contacts + non-contacts) of TAPE's
maps, where the −1 pairs — local or unresolved — count in neither). ``contact_background_all_pairs`` is ours,
kept under its own name because it is the one on the share's own scale: the share's denominator holds every
pair, local and unresolved ones included, so a head attending uniformly gets exactly contacts / L², not
contacts / known pairs (at L = 60 provis' background is 1.2× that; comparing a share with it understates a
head's enrichment).

Unknown is NaN, never 0: a sequence without data for a property (a structure without any ligand has no
binding-site annotation, a chain without a secondary-structure assignment has no helix/strand/turn/blank, a
chain assigned by the P-SEA fallback, which has no turn/bend, has none for turn_bend and blank) gets NaN
counts, shares and background for it, and is left out of the pooled sums for that property.

Where we differ: provis takes binding sites from PDB SITE records and secondary structure from TAPE's NetSurfP
data; we derive both from the structure file itself (ligand HETATMs within a stated distance; DSSP), see
:mod:`probe.proteins.structure`. provis computes the contact background over ProteinNet's whole training split
(its ``background.py``), not over the sequences it analyses; we compute it over the sequences analysed.

Column names (per-head tables): ``w_high``, ``w_{f}``, ``{f}_share`` (weighted); ``n_high``, ``n_{f}``,
``{f}_count_share`` (counts); ``{f}_background`` and ``contact_background_all_pairs``. Per-sequence background
counts: ``n_pairs`` (L²), ``n_known_pairs``, ``n_residues`` (L), ``n_contact_pairs`` and ``n_{f}_residues``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from probe.proteins.defaults import BINDING_DISTANCE, MIN_ATTENTION, MIN_COUNT, MIN_TOTAL

MIN_SEPARATION = 6  # contacts closer in sequence are not counted as contacts (TAPE's ProteinNet maps)
PAIR_FEATURES = ("contact",)
SECONDARY_FEATURES = ("helix", "strand", "turn_bend", "blank")  # provis' ss4 classes 0, 1, 2, 3
RESIDUE_FEATURES = ("binding", *SECONDARY_FEATURES)
FEATURES = PAIR_FEATURES + RESIDUE_FEATURES
# probe.proteins.structure's codes
SECONDARY_CODES = {"helix": "a", "strand": "b", "turn_bend": "t", "blank": "n"}
MERGED_CODE = "c"  # P-SEA's coil (turn/bend and blank together): such a chain has neither class


@dataclass(frozen=True, eq=False)
class ResidueFeatures:
    """Structural properties of one sequence, aligned to it (L = sequence length); None where not known."""

    contacts: np.ndarray | None = None  # [L L] int8: 1 contact, 0 not, -1 unknown
    binding: np.ndarray | None = None  # [L] int8: 1 binding site, 0 not, -1 unknown
    secondary: np.ndarray | None = None  # [L] str: "a" helix, "b" strand, "t" turn/bend, "n" blank, "c" coil
    # (P-SEA: turn/bend and blank unknown), "" unknown

    @classmethod
    def of_structure(cls, structure, true_map: np.ndarray, sequence: str | None = None,
                     binding_distance: float = BINDING_DISTANCE) -> ResidueFeatures:
        """The properties of a :class:`probe.proteins.structure.Structure` chain, aligned to `sequence`
        (default: its own): `true_map` [L L] as contacts, binding sites only when the file has a ligand, the
        secondary structure only when assigned (unknown is not 0: NaN shares otherwise)."""
        from probe.proteins.structure import binding_sites, secondary_structure  # biotite: only with a file

        binding = binding_sites(structure, binding_distance, sequence) if structure.ligands else None
        secondary = secondary_structure(structure, sequence)  # [L]
        known = secondary if (secondary != "").any() else None
        return cls(contacts=true_map, binding=binding, secondary=known)

    def available(self) -> tuple[str, ...]:
        """The properties this sequence has data for (an annotation without a single known position has
        none)."""
        names = []
        if self.contacts is not None:
            names.append("contact")
        if self.binding is not None and (np.asarray(self.binding) >= 0).any():
            names.append("binding")
        secondary = np.asarray(self.secondary).astype(
            str) if self.secondary is not None else np.array([], str)
        if (secondary != "").any():
            names += ["helix", "strand"]
            if not (secondary == MERGED_CODE).any():
                names += ["turn_bend", "blank"]
        return tuple(names)


def feature_masks(features: ResidueFeatures, length: int,
                  device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Property masks: "contact" [L L] over (query, key) pairs, the residue properties [L] over attended
    keys."""
    masks: dict[str, torch.Tensor] = {}
    available = features.available()
    if features.contacts is not None:
        contacts = torch.as_tensor(np.asarray(features.contacts) == 1, device=device)  # [L L]
        position = torch.arange(length, device=device)
        far = (position[:, None] - position[None, :]).abs() >= MIN_SEPARATION  # [L L]
        masks["contact"] = contacts & far
    if "binding" in available:
        masks["binding"] = torch.as_tensor(np.asarray(features.binding) == 1, device=device)  # [L]
    for name, code in SECONDARY_CODES.items():
        if name in available:
            # [L]
            masks[name] = torch.as_tensor(np.asarray(features.secondary).astype(str) == code, device=device)
    for name, mask in masks.items():
        expected = (length, length) if name in PAIR_FEATURES else (length,)
        if tuple(mask.shape) != expected:
            raise ValueError(f"the {name} data has shape {tuple(mask.shape)} but the sequence has {length} "
                             "residues")
    return masks


def feature_counts(alpha: torch.Tensor, masks: Mapping[str, torch.Tensor],
                   min_attention: float = MIN_ATTENTION) -> dict[str, torch.Tensor]:
    """Both variants' sums for one sequence.

    Parameters
    ----------
    alpha : torch.Tensor
        [head query key] float, α over the residues (special tokens' rows and columns dropped, not
        renormalised).
    masks : Mapping[str, torch.Tensor]
        :func:`feature_masks`: "contact" [query key] bool, residue properties [key] bool.
    min_attention : float
        θ.

    Returns
    -------
    dict[str, torch.Tensor]
        [head] float64 each: ``w_high`` (Σ α over α > θ), ``w_{f}`` (Σ α·f over α > θ), ``n_high`` (#α ≥ θ),
        ``n_{f}`` (#α ≥ θ with f).
    """
    # compared in α's own dtype, as provis compares its float32 tensors with θ; summed in float64
    # [head query key] v1
    weighted = torch.where(alpha > min_attention, alpha, torch.zeros_like(alpha)).double()
    high = (alpha >= min_attention).double()  # [head query key] provis HEAD
    counts = {"w_high": weighted.sum((-1, -2)), "n_high": high.sum((-1, -2))}
    for name, mask in masks.items():
        mask = mask.to(alpha.device, torch.float64)
        if mask.ndim == 2:  # a pair property [query key]
            counts[f"w_{name}"] = (weighted * mask).sum((-1, -2))
            counts[f"n_{name}"] = (high * mask).sum((-1, -2))
        else:
            # a property of the attended residue [key]: sum over queries first, then over the keys that have
            # it
            counts[f"w_{name}"] = weighted.sum(-2) @ mask
            counts[f"n_{name}"] = high.sum(-2) @ mask
    return counts


def background_counts(features: ResidueFeatures | None, length: int) -> dict[str, float]:
    """Per-sequence counts behind the background rates (NaN where the property is unknown)."""
    counts = {"n_pairs": float(length * length), "n_residues": float(length)}
    masks = feature_masks(features, length) if features is not None else {}
    counts["n_contact_pairs"] = float(masks["contact"].sum()) if "contact" in masks else float("nan")
    counts["n_known_pairs"] = float("nan")
    if features is not None and features.contacts is not None:
        position = np.arange(length)
        far = np.abs(position[:, None] - position[None, :]) >= MIN_SEPARATION  # [L L]
        counts["n_known_pairs"] = float((far & (np.asarray(features.contacts) >= 0)).sum())
    for name in RESIDUE_FEATURES:
        counts[f"n_{name}_residues"] = float(masks[name].sum()) if name in masks else float("nan")
    return counts


# background column -> (numerator, denominator) count columns
BACKGROUNDS = {"contact_background": ("n_contact_pairs", "n_known_pairs"),
               "contact_background_all_pairs": ("n_contact_pairs", "n_pairs"),
               **{f"{name}_background": (f"n_{name}_residues", "n_residues") for name in RESIDUE_FEATURES}}


def _share(numerator, denominator, enough):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(enough & pd.notna(numerator) & (denominator > 0), numerator / denominator, np.nan)


def shares(counts: pd.DataFrame, *, min_total: float = MIN_TOTAL, min_count: int = MIN_COUNT) -> pd.DataFrame:
    """`{f}_share` (weighted) and `{f}_count_share` columns from the sum columns of one sequence or of a
    pooled set (a copy; NaN where w_high < `min_total`, n_high < `min_count`, or the property is unknown)."""
    table = counts.copy()
    for name in FEATURES:
        for column in (f"w_{name}", f"n_{name}"):
            if column not in table:
                table[column] = np.nan
        table[f"{name}_share"] = _share(table[f"w_{name}"], table["w_high"], table["w_high"] >= min_total)
        table[f"{name}_count_share"] = _share(table[f"n_{name}"], table["n_high"],
                                              table["n_high"] >= min_count)
    return table


def pooled_shares(heads: pd.DataFrame, *, min_total: float = MIN_TOTAL,
                  min_count: int = MIN_COUNT) -> pd.DataFrame:
    """Vig et al.'s pooled shares per head from a per-sequence table (one row per sequence × head with
    ``layer``, ``head`` and the ``w_*`` / ``n_*`` sums).

    For each property, Σ w_f / Σ w_high (and Σ n_f / Σ n_high) over the sequences that have data for it; NaN
    where that Σ w_high is below `min_total` (Σ n_high below `min_count`). One row per (layer, head) with
    ``w_high`` and ``n_high`` (all sequences), ``w_{f}``, ``n_{f}``, ``{f}_share`` and ``{f}_count_share``.
    """
    rows = []
    for (layer, head), group in heads.groupby(["layer", "head"], sort=True):
        row = {"layer": int(layer), "head": int(head), "w_high": float(group["w_high"].sum()),
               "n_high": float(group["n_high"].sum())}
        for name in FEATURES:
            for prefix, total_column, least, suffix in (("w", "w_high", min_total, "share"),
                                                         ("n", "n_high", min_count, "count_share")):
                column = f"{prefix}_{name}"
                known = group[column].notna() if column in group else pd.Series(False, index=group.index)
                total = float(group.loc[known, total_column].sum())
                row[column] = float(group.loc[known, column].sum()) if known.any() else np.nan
                row[f"{name}_{suffix}"] = (row[column] / total if known.any() and total >= least and total > 0
                                           else np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def pooled_backgrounds(records: pd.DataFrame) -> dict[str, float]:
    """The :data:`BACKGROUNDS` over a set: Σ property count / Σ denominator over the sequences that have data
    for it (keys ``{f}_background`` and ``contact_background_all_pairs``)."""
    result = {}
    for column, (numerator, denominator) in BACKGROUNDS.items():
        if numerator not in records or denominator not in records:
            result[column] = np.nan
            continue
        known = records[numerator].notna() & records[denominator].notna()
        total = float(records.loc[known, denominator].sum())
        result[column] = float(records.loc[known, numerator].sum()) / total if total > 0 else np.nan
    return result


def backgrounds(counts: Mapping[str, float]) -> dict[str, float]:
    """The :data:`BACKGROUNDS` of one sequence from :func:`background_counts`."""
    return pooled_backgrounds(pd.DataFrame([dict(counts)]))
