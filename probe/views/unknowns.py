"""Why a cell of a protein head table reads ``unknown``: one reason per column, in one place for the app's
protein panel (the cell's hover text and the glossary) and the report (the cell's ``title``).

Unknown is NaN, never 0 (:mod:`probe.proteins.features`, :mod:`probe.proteins.contacts`); what each column
needs, and how a user supplies it:

* ``logit_share``, ``weight``: a contact regression — the checkpoint's own (ESM) or one fitted with ``probe
  contacts --fit DIR`` and given with ``--regression FILE``;
* P@L, base rate, enrichment, the contact test (``p_fwer``, untrained p99, significant): a structure (true
  contacts) — ``--structure`` / an uploaded PDB or mmCIF; the test also needs long-range contacts in it;
* Vig et al.'s shares (``contact_share`` and the others): the head's weights above θ = 0.3 must sum to at
  least 100 (provis' ``min_total``); one chain of L residues holds at most L of attention per head, so on one
  chain of ≲ 100 residues they stay unknown — pool chains with ``probe contacts --structures DIR
  --heads-summary``;
* ``binding_share``: ligand HETATM records (any non-water, non-amino-acid group within 4 Å of a residue) in
  the structure file; the PDB entry with its ligand, not a stripped model;
* ``helix_share``, ``strand_share``: the secondary structure, DSSP through mdtraj (``pip install mdtraj``;
  biotite's P-SEA otherwise), computed from the structure's backbone.

Example
-------
>>> "this file has none" in unknown_reason("binding_share", ligands=())
True
>>> unknown_reason("logit_share")[:33]
'needs a contact regression: the c'
"""

from __future__ import annotations

from probe.proteins.defaults import BINDING_DISTANCE, MIN_ATTENTION, MIN_TOTAL

SHARE_RULE = (f"Vig et al.'s share needs the head's weights above θ = {MIN_ATTENTION:g} to sum to at least "
              f"{MIN_TOTAL:g} (provis' min_total); one chain of L residues holds at most L of attention per "
              "head, so it stays unknown on one short chain: pool chains with probe contacts --structures "
              "DIR --heads-summary")
SECONDARY = "needs the secondary structure (DSSP through mdtraj, else biotite's P-SEA) from the backbone"
NEEDS = {
    "logit_share": "needs a contact regression: the checkpoint carries none; fit one with probe contacts "
                   "--fit DIR and pass --regression FILE",
    "weight": "needs a contact regression (see logit share)",
    "p_at_": "needs a structure (true contacts): pass --structure or upload a PDB / mmCIF file",
    "base_rate_": "needs a structure (true contacts): pass --structure or upload a PDB / mmCIF file",
    "enrichment_": "needs a structure, and long-range contacts in it (the base rate is 0 otherwise)",
    "p_fwer_": "not tested: the contact test needs a structure with long-range contacts (≥ 24 apart)",
    "untrained_": "not tested: the contact test needs a structure with long-range contacts (≥ 24 apart)",
    "significant_": "not tested: the contact test needs a structure with long-range contacts (≥ 24 apart)",
    "binding_": f"needs ligand HETATM records in the structure file (a non-water group within "
                     f"{BINDING_DISTANCE:g} Å of a residue)",
    "helix_": SECONDARY,
    "strand_": SECONDARY,
    "turn_bend_": SECONDARY + " (DSSP only: P-SEA has no turn/bend)",
    "blank_": SECONDARY + " (DSSP only: P-SEA has no blank)",
}
# Vig et al.'s shares (probe.proteins.features): unknown under the share rule
SHARES = ("contact_share", "binding_share", "helix_share", "strand_share", "turn_bend_share", "blank_share")


def unknown_reason(column: str, *, ligands: tuple[str, ...] | None = None, has_structure: bool = True,
                   w_high: float | None = None) -> str:
    """Why `column` (a per-head table column) is unknown for one head: one line.

    Parameters
    ----------
    column : str
        The table's column name (``binding_share``, ``p_at_L_long``, ...).
    ligands : tuple of str, optional
        The structure's ligand groups (:attr:`probe.proteins.structure.Structure.ligands`), when known.
    has_structure : bool, default True
        Whether a structure was given.
    w_high : float, optional
        The head's Σ α over weights above θ (the share rule's numerator's denominator), when known.

    Examples
    --------
    >>> unknown_reason("p_at_L_long", has_structure=False)
    'needs a structure (true contacts): pass --structure or upload a PDB / mmCIF file'
    """
    if not has_structure and (column.startswith(("p_at_", "base_rate_", "enrichment_", "p_fwer_",
                                                  "untrained_", "significant_")) or column in SHARES):
        return NEEDS["p_at_"]
    rule = SHARE_RULE + ("" if w_high is None else f" (this head: {w_high:.1f})")
    if column.startswith("binding_") and ligands is not None:
        if ligands:  # the annotation is there: only the share rule can leave it unknown
            return rule if column in SHARES else "not measured for this input"
        reason = NEEDS["binding_"] + "; this file has none"
        return f"{reason}; {rule}" if column in SHARES else reason
    reason = next((text for key, text in NEEDS.items() if column == key or column.startswith(key)), None)
    if column in SHARES:
        return rule if reason is None else f"{reason}; {rule}"
    return reason or "not measured for this input"


def glossary() -> list[tuple[str, str]]:
    """(term, definition) pairs of the unknowns, for the app's glossary."""
    return [("unknown (protein tables)", "NaN, never 0: the measure needs something this input lacks; hover "
                                         "the cell for its reason."),
            ("unknown: logit share", NEEDS["logit_share"] + "."),
            ("unknown: P@L, base rate, enrichment", NEEDS["p_at_"] + "."),
            ("unknown: p FWER, untrained p99, significant", NEEDS["p_fwer_"] + "."),
            ("unknown: Vig share (contact share)", SHARE_RULE + "."),
            ("unknown: binding share", NEEDS["binding_"] + " (the PDB entry with its ligand, not a "
                                                                "stripped model), and the share rule."),
            ("unknown: helix / strand share", SECONDARY + ", and the share rule.")]


__all__ = ["NEEDS", "SECONDARY", "SHARES", "SHARE_RULE", "glossary", "unknown_reason"]
