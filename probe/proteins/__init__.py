"""Protein language models: attention against structure.

What belongs here, one job per module: structures read through biotite, DSSP secondary structure
(:mod:`~probe.proteins.structure`); Vig et al.'s feature shares (:mod:`~probe.proteins.features`); precision
of a contact map by range (:mod:`~probe.proteins.precision`); ESM's contact regression streamed head by head
(:mod:`~probe.proteins.sink`) and the contact API on top of it (:mod:`~probe.proteins.contacts`); every head
against its contact base rate (:mod:`~probe.proteins.significance`); a contact regression fitted for any
protein model (:mod:`~probe.proteins.regression`) and its file (:mod:`~probe.proteins.regression_file`); the
units of a run (:mod:`~probe.proteins.units`), their analysis and the tables of a set
(:mod:`~probe.proteins.sets`); a run's inputs checked (:mod:`~probe.proteins.inputs`) and its output files
(:mod:`~probe.proteins.outputs`); the defaults (:mod:`~probe.proteins.defaults`, import-light) and the one
FASTA reader (:mod:`~probe.proteins.fasta`). Built on :mod:`probe.engine` and :mod:`probe.models`; it never
imports :mod:`probe.heads`, :mod:`probe.runs` or :mod:`probe.commands`.

Examples
--------
>>> from probe.proteins.structure import contact_map, read_structure
>>> structure = read_structure("tests/data/pdb1ubi.pdb", chain="A")  # ubiquitin, a real wwPDB entry
>>> len(structure.sequence), int(contact_map(structure, sequence=structure.sequence).sum())  # Cβ < 8 Å
(76, 742)
"""
