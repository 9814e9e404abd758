"""Protein language models: attention against structure.

What belongs here: structures read through biotite (:mod:`~probe.proteins.structure`), Vig et al.'s feature shares
(:mod:`~probe.proteins.features`), contacts from attention head by head and ESM's contact regression
(:mod:`~probe.proteins.contacts`), whole structure sets with per-head summaries (:mod:`~probe.proteins.sets`) and the
one FASTA reader (:mod:`~probe.proteins.fasta`). Built on :mod:`probe.engine` and :mod:`probe.models`; it never
imports :mod:`probe.heads`, :mod:`probe.runs` or :mod:`probe.commands`.
"""
