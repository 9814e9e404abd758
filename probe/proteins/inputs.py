"""What a contacts run analyses, checked before any computing: its units, its options, its records.

``probe contacts`` (and any caller that wants the same checks) turns its sources into units here: a sequence
or a FASTA file (each record optionally aligned to one structure chain), one structure chain, or every protein
chain of a set of structures (:mod:`probe.proteins.units` builds the units, :mod:`probe.proteins.sets`
analyses them). Every check raises a one-line :class:`~probe.errors.ProbeError` naming the flag to change.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from probe import models
from probe.errors import ProbeError
from probe.hashing import file_hash
from probe.models import LoadedModel
from probe.proteins import units
from probe.proteins.fasta import read_fasta
from probe.proteins.regression_file import read_regression
from probe.proteins.sets import ContactOptions
from probe.proteins.structure import check_threshold, read_structure
from probe.proteins.units import UnitSpec
from probe.untrained import DEFAULT_TWINS


def contact_options(*, threshold: float, cb: str, window: int | None, min_attention: float, min_count: int,
                    min_total: float, binding_distance: float, per_head: bool,
                    regression: str | None = None, control: int = DEFAULT_TWINS) -> ContactOptions:
    """The options of a run, each checked (one line naming the flag); `regression`, a fitted regression file,
    is read now and recorded with its hash, so a changed file recomputes the units."""
    check_threshold(threshold, "--threshold")
    check_threshold(binding_distance, "--binding-distance")
    if not (math.isfinite(min_attention) and 0.0 < min_attention <= 1.0):
        raise ProbeError(f"--min-attention {min_attention} must be an attention weight above 0 and at most 1")
    if min_count < 1:
        raise ProbeError(f"--min-count {min_count} must be at least 1")
    if not (math.isfinite(min_total) and min_total >= 0):
        raise ProbeError(f"--min-total {min_total} must be a finite sum of attention weights, 0 or more")
    if window is not None and window < 1:
        raise ProbeError(f"--window {window} must be a positive number of residues")
    options = ContactOptions(threshold=float(threshold), cb=cb, window=window,
                             min_attention=float(min_attention), binding_distance=float(binding_distance),
                             per_head=per_head, control=int(control))
    if not regression:
        return options
    read_regression(regression)  # the schema, before any computing
    path = str(Path(regression).expanduser().resolve())
    return dataclasses.replace(options, regression=path, regression_hash=file_hash(path))


def contact_units(*, sequence: str | None = None, fasta: str | None = None, structure: str | None = None,
                  chain: str | None = None, structures: str | None = None, chains: str | None = None,
                  ) -> tuple[list[UnitSpec], list[tuple[str, str]]]:
    """(units, skipped files) of the sources given (the flags of ``probe contacts``).

    Parameters
    ----------
    sequence, fasta : str, optional
        A sequence, or a FASTA file's records, optionally aligned to `structure` (`chain`).
    structure : str, optional
        A PDB / mmCIF file; alone: its chain's observed residues.
    chain : str, optional
        The structure's chain.
    structures : str, optional
        A folder or a list file of structures.
    chains : str, optional
        A comma-separated filter of the chains of `structures`.

    Returns
    -------
    tuple
        (list of UnitSpec, list of (file, reason) skipped).
    """
    if structures is not None:
        if structure or chain:
            raise ProbeError("--structures takes whole sets; use --chains to pick chains "
                             "(not --structure/--chain)")
        wanted = [name.strip() for name in chains.split(",") if name.strip()] if chains else None
        return units.structure_units(units.structure_files(structures), wanted)
    if chains:
        raise ProbeError("--chains selects chains of --structures; with --structure use --chain")
    if sequence is None and fasta is None and structure is None:
        raise ProbeError("give the input: --sequence S, --fasta F, --structure X or --structures DIR")
    if chain is not None and structure is None:
        raise ProbeError("--chain selects a chain of --structure; pass --structure too")
    records = [("sequence", sequence)] if sequence is not None else []
    if sequence is None and fasta is not None:
        records = read_fasta(fasta)
    if structure is None:
        return units.record_units(records), []
    read = read_structure(structure, chain=chain)  # checks the file and the chain now
    if records:
        return units.record_units(records, structure, read.chain), []
    spec = UnitSpec(key=f"{structure}:{read.chain}", id=f"{read.name}_{read.chain}", record=0,
                    structure=structure, chain=read.chain, structure_hash=file_hash(structure))
    return [spec], []


def check_records(loaded: LoadedModel, units: list[UnitSpec], options: ContactOptions) -> None:
    """Letters and lengths of the given sequences against the model, checked before any computing (one line
    naming the record)."""
    alphabet = models.protein_alphabet(loaded)
    limit = loaded.max_tokens - 2
    if options.window is not None and not 1 <= options.window <= limit:
        raise ProbeError(f"--window {options.window} must be between 1 and {limit} "
                         "(the model's residue limit)")
    for spec in units:
        if spec.sequence is None:
            continue
        try:
            cleaned = models.clean_protein(spec.sequence, alphabet)
        except ProbeError as error:
            raise ProbeError(f"{spec.id}: {error}" if len(units) > 1 else str(error)) from None
        if len(cleaned) > limit and options.window is None:
            raise ProbeError(f"{spec.id} has {len(cleaned)} residues but {loaded.name} takes at most "
                             f"{limit}; shorten it or use --window {limit}")
        if len(cleaned) > limit and options.per_head:
            raise ProbeError("--heads-out, --chains-out and --heads-summary need whole sequences: per-head "
                             "statistics are not computed in --window mode")


def resolve_per_head(loaded: LoadedModel, options: ContactOptions, model: str) -> ContactOptions:
    """The options for this model: per-head statistics always for a model that predicts no contacts (no
    contact head, no --regression), whose only output they are; its --regression checked against it."""
    if options.regression is not None:
        read_regression(options.regression).check_model(loaded)  # the right model, before any computing
    predicts = loaded.has_contact_head or options.regression is not None
    if options.window is not None and not predicts:
        raise ProbeError(f"--window averages predicted contacts, which need a contact regression; {model} "
                         "has none (per-head analysis needs whole sequences)")
    per_head = options.per_head or not predicts
    return options if per_head == options.per_head else dataclasses.replace(options, per_head=per_head)


__all__ = ["check_records", "contact_options", "contact_units", "resolve_per_head"]
