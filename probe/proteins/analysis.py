"""One protein analysed, in one place: the dashboard's protein panel (``app/protein_analysis.py``), the
protein section of ``probe report`` (:mod:`probe.views.report`) and each unit of ``probe contacts``
(:func:`probe.proteins.sets.analyse_unit`) all reach it, and differ only in how they show the result.

:func:`protein_input` turns what the user gave — a sequence, a structure, or both — into the analysis' inputs:
the residues the model reads (cleaned to its alphabet; a structure's own chain by default, a given sequence
aligned to the chain), the true contacts ``[L L]`` and the residue properties (:class:`ResidueFeatures`:
binding sites where the file has a ligand, secondary structure where it is assigned; unknown is not 0).
:func:`analyse_protein` runs the contact analysis on it (:func:`probe.proteins.contacts.predict_contacts`,
per head, with the untrained twins) and says when the protein is outside the model's training domain. A
measure read from the structure is filled in :meth:`ResidueFeatures.of_structure`, which :func:`protein_input`
calls: it then reaches the CLI, the app and the report alike (docs/howto/protein-measure.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from probe import models
from probe.errors import ProbeError
from probe.proteins.contacts import ContactResult, predict_contacts
from probe.proteins.defaults import BINDING_DISTANCE, CONTACT_THRESHOLD, DEFAULT_CB
from probe.proteins.domain import chain_note, domain_note
from probe.proteins.features import ResidueFeatures
from probe.proteins.structure import CbMode, Structure, contact_map, read_structure


@dataclass(frozen=True)
class ProteinInput:
    """What one protein analysis reads (frozen).

    Attributes
    ----------
    sequence : str
        The residues the model reads (L), cleaned to its alphabet.
    structure : Structure or None
        The chain read from the structure file; None for a sequence alone.
    true_map : numpy.ndarray or None, shape=(L, L), int8
        True contacts aligned to `sequence`: 1, 0, −1 unknown (a residue the chain lacks); None without a
        structure.
    features : ResidueFeatures or None
        The residue properties (contacts, binding sites, secondary structure); None without a structure.

    Examples
    --------
    >>> protein = ProteinInput("MQIFVKT")  # a sequence alone: nothing known of its contacts
    >>> protein.true_contacts, protein.placed, protein.other_chains
    (0, 7, None)
    """

    sequence: str
    structure: Structure | None = None
    true_map: np.ndarray | None = None
    features: ResidueFeatures | None = None

    @property
    def true_contacts(self) -> int:
        """How many residue pairs are true contacts (each pair once); 0 without a structure."""
        return 0 if self.true_map is None else int((np.triu(self.true_map, 1) == 1).sum())

    @property
    def placed(self) -> int:
        """How many residues of `sequence` sit on the structure (all of them for the chain's own sequence)."""
        return len(self.sequence) if self.true_map is None else int((self.true_map >= 0).any(axis=1).sum())

    @property
    def other_chains(self) -> str | None:
        """One line naming the chain used and the file's other protein chains, else None
        (:func:`probe.proteins.domain.chain_note`)."""
        if self.structure is None:
            return None
        return chain_note(self.structure.chain, self.structure.chains)


def protein_input(loaded: models.LoadedModel, sequence: str | None = None,
                  structure: Structure | str | Path | bytes | None = None, *, chain: str | None = None,
                  fmt: str | None = None, threshold: float = CONTACT_THRESHOLD, cb: CbMode = DEFAULT_CB,
                  binding_distance: float = BINDING_DISTANCE) -> ProteinInput:
    """The inputs of one protein's analysis from a sequence, a structure, or both.

    Parameters
    ----------
    loaded : LoadedModel
        A protein model (its alphabet cleans the sequence).
    sequence : str, optional
        The residues; with a structure they are aligned to its chain (another protein is refused in one
        line); default: the chain's own.
    structure : Structure, path or bytes, optional
        A chain already read, or a PDB / mmCIF file (path or bytes) read with `chain` and `fmt`
        (:func:`probe.proteins.structure.read_structure`).
    chain, fmt : str, optional
        The chain to read (default: the first protein chain) and the file's format (default: from the path).
    threshold, cb, binding_distance
        The contact threshold (Å), the virtual-Cβ mode and the binding-site distance (Å), as in
        ``probe contacts``.

    Returns
    -------
    ProteinInput
        `true_map` [L L] int8 and `features` set when a structure is given.

    Examples
    --------
    >>> import probe
    >>> from probe.proteins.analysis import protein_input
    >>> esm = probe.load("zoo:esm-random")
    >>> protein = protein_input(esm, structure="tests/data/pdb1ubi.pdb")
    >>> len(protein.sequence), protein.true_map.shape, protein.true_contacts > 0
    (76, (76, 76), True)
    >>> protein_input(esm, "mqif vkt").sequence, protein_input(esm, "MQIF").true_map
    ('MQIFVKT', None)
    """
    if structure is None and sequence is None:
        raise ProbeError("give a protein sequence or a structure")
    if structure is not None and not isinstance(structure, Structure):
        structure = read_structure(structure, chain=chain, fmt=fmt)
    alphabet = models.protein_alphabet(loaded)
    residues = models.clean_protein(structure.sequence if sequence is None else sequence, alphabet)
    if structure is None:
        return ProteinInput(residues)
    true_map = contact_map(structure, threshold, residues, cb=cb)  # [L L] int8
    # unknown is not 0: no ligand in the file -> no binding annotation; no assignment -> no secondary
    # structure
    features = ResidueFeatures.of_structure(structure, true_map, residues, binding_distance)
    return ProteinInput(residues, structure, true_map, features)


@dataclass(frozen=True)
class ProteinAnalysis:
    """One protein analysed (frozen): its inputs, the contact analysis and the domain note.

    Attributes
    ----------
    protein : ProteinInput
        What was analysed.
    result : ContactResult
        Predicted contacts, their precision and the per-head table (tested against the contact base rate and
        the untrained twins where there is a structure).
    outside : str or None
        One line when the protein is outside the model's training domain, else None.

    Examples
    --------
    >>> import probe
    >>> esm = probe.load("zoo:esm-random")
    >>> analysis = analyse_protein(esm, protein_input(esm, "MQIFVKTLTG"), control=0)
    >>> analysis.protein.sequence, analysis.result.true_contacts is None, analysis.outside
    ('MQIFVKTLTG', True, None)
    """

    protein: ProteinInput
    result: ContactResult
    outside: str | None = None


def analyse_protein(loaded: models.LoadedModel, protein: ProteinInput, **options) -> ProteinAnalysis:
    """The contact analysis of one protein, per head: what the app's protein panel and ``probe report`` show.

    Parameters
    ----------
    loaded : LoadedModel
        A protein model.
    protein : ProteinInput
        From :func:`protein_input`.
    **options
        Passed on to :func:`probe.proteins.contacts.predict_contacts` (``control``, ``min_attention``, ...;
        its defaults otherwise: K untrained twins).

    Returns
    -------
    ProteinAnalysis

    Examples
    --------
    >>> import probe
    >>> from probe.proteins.analysis import analyse_protein, protein_input
    >>> esm = probe.load("zoo:esm-random")
    >>> analysis = analyse_protein(esm, protein_input(esm, structure="tests/data/pdb1ejg.pdb"), control=0)
    >>> analysis.result.heads.shape[0] == esm.n_layers * esm.n_heads, analysis.outside
    (True, None)
    """
    result = predict_contacts(loaded, protein.sequence, protein.true_map, per_head=True,
                              features=protein.features, **options)
    name = str(getattr(loaded.config, "_name_or_path", "") or loaded.name)
    outside = domain_note(str(getattr(loaded.config, "model_type", "")), name, result.sequence)
    return ProteinAnalysis(protein, result, outside)


__all__ = ["ProteinAnalysis", "ProteinInput", "analyse_protein", "protein_input"]
