"""Is an input inside a model's training domain? A one-line note for `probe contacts`, the app and the report
when it is not, and the note naming the chain used of a multi-chain structure.

The domain comes from the card (:func:`probe.card.training_domain`: name patterns, never guessed). Only
antibody models get an input check, and it is a **heuristic**: an antibody variable (V) domain has two
conserved cysteines that close its disulfide (IMGT positions 23 and 104) and the conserved tryptophan of
framework 2 (IMGT 41) a CDR1 after the first — ``C``, 9–17 residues, ``W`` followed by the framework-2 pattern
(``W[FYVIL][RQKLH][QKR]``: WVRQ in heavy chains, WYQQ / WFQQ / WYLQ in light chains), then 40–80 residues on
to ``Y[YFH]C``. A chain without that motif is called "no antibody V domain". It is not ANARCI (no HMM, no
numbering): a V domain with an unusual framework can be missed and a non-antibody chain with the motif by
chance would pass. Protein models trained on UniRef have no check (every natural protein is inside).

Example
-------
>>> trastuzumab_vl = ("DIQMTQSPSSLSASVGDRVTITCRASQDVNTAVAWYQQKPGKAPKLLIYSASFLYSGVPSRFSGSRSGTDFTLTISSLQPEDF"
...                   "ATYYCQQHYTTPPTFGQGTKVEIK")
>>> has_antibody_v_domain(trastuzumab_vl), has_antibody_v_domain("MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQ")
(True, False)
"""

from __future__ import annotations

import re

from probe.card import ANTIBODY, training_domain

NOTED_STRUCTURES = 8  # probe contacts reads at most this many structures again for its notes
V_DOMAIN = re.compile(r"C.{9,17}W[FYVIL][RQKLH][QKR].{40,80}?Y[YFH]C")


def has_antibody_v_domain(sequence: str) -> bool:
    """True when `sequence` holds the conserved Cys–Trp–Cys spacing of an antibody V domain (the heuristic
    above).

    >>> has_antibody_v_domain("MTYKLILNGKTLKGETTTEAVDAATAEKVFKQYANDNGVDGEWTYDDATKTFTVTE")  # protein G
    False
    """
    return V_DOMAIN.search(str(sequence).upper()) is not None


def domain_note(model_type: str, name: str, sequence: str) -> str | None:
    """One line when `sequence` is outside the model's training domain (an antibody model on a chain without
    an antibody V domain), else None.

    >>> gb1 = "MTYKLILNGKTLKGETTTEAVDAATAEKVFKQYANDNGVDGEWTYDDATKTFTVTE"
    >>> domain_note("bert", "Exscientia/IgBert", gb1)[:27]
    "outside the model's domain:"
    >>> domain_note("esm", "facebook/esm2_t6_8M_UR50D", gb1) is None  # UniRef: no input check
    True
    """
    kind, text = training_domain(model_type, name)
    if kind == ANTIBODY and not has_antibody_v_domain(sequence):
        return (f"outside the model's domain: {name} was trained on {text}, and this chain has no antibody V "
                "domain (no conserved Cys–Trp–Cys framework motif; a heuristic, not ANARCI): read its heads "
                "with care")
    return None


def chain_note(chain: str, chains: tuple[str, ...]) -> str | None:
    """One line naming the chain used and the others of a multi-chain structure, else None."""
    others = [other for other in chains if other != chain]
    if not others:
        return None
    return (f"chain {chain} used of {len(chains)} protein chains ({', '.join(chains)}); pick another with "
            "--chain / the chain menu")


def unit_notes(loaded, specs, max_structures: int = NOTED_STRUCTURES) -> list[str]:
    """`probe contacts`' notes on its units (:class:`probe.proteins.units.UnitSpec`): each outside the model's
    domain, and the chain used of each multi-chain structure. Structures are read for it only when at most
    `max_structures` are given (a structure set is not read twice)."""
    from probe.proteins.structure import read_structure  # biotite: only when a structure is given

    model_type = str(getattr(loaded.config, "model_type", ""))
    name = str(getattr(loaded.config, "_name_or_path", "") or loaded.name)
    notes: list[str] = []
    structures = sum(spec.structure is not None for spec in specs)
    for spec in specs:
        sequence, chain = spec.sequence, None
        if spec.structure is not None and structures <= max_structures:
            parsed = read_structure(spec.structure, chain=spec.chain)
            sequence = sequence or parsed.sequence
            chain = chain_note(parsed.chain, parsed.chains)
        outside = domain_note(model_type, name, sequence) if sequence else None
        notes += [f"{spec.id}: {line}" for line in (chain, outside) if line]
    return notes


__all__ = ["NOTED_STRUCTURES", "V_DOMAIN", "chain_note", "domain_note", "has_antibody_v_domain", "unit_notes"]
