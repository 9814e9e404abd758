"""Protein language models: attention against structure.

What belongs here: structures read through biotite, DSSP secondary structure (:mod:`~probe.proteins.structure`),
Vig et al.'s feature shares (:mod:`~probe.proteins.features`), contacts from attention head by head and ESM's contact
regression (:mod:`~probe.proteins.contacts`), every head against its contact base rate
(:mod:`~probe.proteins.significance`), a contact regression fitted for any protein model
(:mod:`~probe.proteins.regression`), whole structure sets with per-head summaries (:mod:`~probe.proteins.sets`) and
the one FASTA reader (:mod:`~probe.proteins.fasta`). Built on :mod:`probe.engine` and :mod:`probe.models`; it never
imports :mod:`probe.heads`, :mod:`probe.runs` or :mod:`probe.commands`.
"""
