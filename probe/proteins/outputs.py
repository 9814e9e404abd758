"""The files of a contacts run, rebuilt from its finished units, and its report lines.

Four outputs, each optional (the ``probe contacts`` flag in brackets):

* the contact maps (``--out F.npz``), record i = 0, 1, …::

      ids [R] str, sequences [R] str, lengths [R] int, model str, threshold float, cb str,
      ranges ["short" "medium" "long"], fractions ["L" "L/2" "L/5"],
      contacts_{i} [L_i L_i] float32                                    -- models with a contact regression,
      true_contacts_{i} [L_i L_i] int8 (1 contact, 0 not, -1 unknown)  -- with a structure,
      precision_{i} [range fraction] float64                            -- both;

* the per-head table (``--heads-out``, :func:`probe.proteins.sets.heads_table`), the per-chain table
  (``--chains-out``, :func:`probe.proteins.sets.chain_table`) and the per-head summary over the set
  (``--heads-summary``, :func:`probe.proteins.sets.summarize_heads`): parquet, the first two also .csv (by
  the extension).

:class:`ContactOutputs` builds every writer from the finished units (the runner calls them with a temporary
path and renames: a killed run never leaves half a file) and keeps the pooled best-head line of the summary it
wrote, for the command to print once the run is done. :func:`is_ours` tells an earlier output of ours from
someone else's file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from probe.errors import ProbeError
from probe.models import LoadedModel
from probe.proteins import sets
from probe.proteins.defaults import SUFFIXES
from probe.proteins.precision import FRACTIONS, RANGES, fraction_label
from probe.proteins.sets import ContactOptions, UnitOutcome
from probe.proteins.significance import ALPHA, best_significant

KINDS = ("out", "heads_out", "chains_out", "heads_summary")  # the outputs, in the order the CLI names them
# Columns (or npz keys) every earlier output of each kind has: an existing file without them is someone else's
SIGNATURES = {"out": {"ids", "sequences", "lengths", "model"},
              "heads_out": {"record", "id", "layer", "head", "name"},
              "chains_out": {"record", "id", "length", "sequence"},
              "heads_summary": {"layer", "head", "name", "n_proteins", "n_high"}}


def is_ours(path: Path, kind: str) -> bool:
    """Whether an existing output file of `kind` (:data:`KINDS`) was written by probe contacts (so overwriting
    it loses nothing foreign)."""
    try:
        if kind == "out":
            with np.load(path, allow_pickle=False) as data:
                names = set(data.files)
        elif path.suffix.lower() == ".csv":
            names = set(pd.read_csv(path, nrows=0).columns)
        else:
            names = set(pq.read_schema(path).names)
    except Exception:  # not a zip / not parquet / unreadable: not ours
        return False
    return SIGNATURES[kind] <= names


def refuse_foreign(paths: Mapping[str, Path], flags: Mapping[str, str], force: bool = False) -> None:
    """One-line ProbeError for an existing output (kind -> path) that :func:`is_ours` does not recognise,
    unless `force`: it would be overwritten."""
    for kind, path in paths.items():
        if path.exists() and not force and not is_ours(path, kind):
            raise ProbeError(f"{flags[kind]} {path} exists but is not a probe contacts output; pass --force "
                             "to overwrite it, or another file name")


def write_npz(path: Path, outcomes: Sequence[UnitOutcome], options: ContactOptions, model: str) -> None:
    """The contact maps of every unit as one .npz (layout in the module docstring)."""
    arrays = {
        "ids": np.array([outcome.spec.id for outcome in outcomes]),
        "sequences": np.array([outcome.result.sequence for outcome in outcomes]),
        "lengths": np.array([len(outcome.result.sequence) for outcome in outcomes]),
        "model": np.array(model),
        "threshold": np.array(options.threshold),
        "cb": np.array(options.cb),
        "ranges": np.array(list(RANGES)),
        "fractions": np.array([fraction_label(fraction) for fraction in FRACTIONS]),
    }
    for index, outcome in enumerate(outcomes):
        result = outcome.result
        if result.contacts is not None:
            arrays[f"contacts_{index}"] = result.contacts.astype(np.float32)
        if result.true_contacts is not None:
            arrays[f"true_contacts_{index}"] = result.true_contacts
        if result.precision is not None:
            arrays[f"precision_{index}"] = np.array(
                [[result.precision[f"p_at_{f}_{r}"] for f in FRACTIONS] for r in RANGES])  # [range fraction]
    with open(path, "wb") as handle:
        np.savez_compressed(handle, **arrays)


def write_table(table: pd.DataFrame, tmp: Path, path: Path) -> None:
    """A per-head or per-chain table to `tmp`, in the format of `path`'s extension (.csv or .parquet)."""
    if path.suffix.lower() == ".csv":
        table.to_csv(tmp, index=False)
    else:
        table.to_parquet(tmp, index=False)


class ContactOutputs:
    """The output files of one run (`paths`: kind -> path, kinds of :data:`KINDS`), rebuilt from the finished
    units.

    ``pooled`` is the best-head line of the last per-head summary written (None before one is written, or
    without ``--heads-summary``). `exchangeable` (``--hypergeometric-exchangeable-pairs``) adds the retired
    hypergeometric columns ``p_exchangeable_L_r, q_exchangeable_L_r`` to the per-head table and summary.
    """

    def __init__(self, paths: Mapping[str, Path], loaded: LoadedModel, options: ContactOptions, model: str, *,
                 min_count: int, min_total: float, exchangeable: bool = False) -> None:
        self.paths = dict(paths)
        self.loaded = loaded
        self.options = options
        self.model = model
        self.min_count = min_count
        self.min_total = min_total
        self.exchangeable = exchangeable
        self.pooled: str | None = None

    def writers(self, outcomes: list[UnitOutcome]) -> dict[Path, Callable[[Path], None]]:
        """{path: writer(tmp)} of every output asked for (probe.runs.atomic.write_atomically calls each)."""
        paths, writers = self.paths, {}
        if "out" in paths:
            writers[paths["out"]] = lambda tmp: write_npz(tmp, outcomes, self.options, self.model)
        heads = (sets.heads_table(outcomes, self.min_count, min_total=self.min_total,
                                  exchangeable=self.exchangeable) if self.options.per_head else None)
        chains = sets.chain_table(outcomes)
        if "heads_out" in paths:
            writers[paths["heads_out"]] = lambda tmp: write_table(heads, tmp, paths["heads_out"])
        if "chains_out" in paths:
            writers[paths["chains_out"]] = lambda tmp: write_table(chains, tmp, paths["chains_out"])
        if "heads_summary" in paths:
            summary = sets.summarize_heads(heads, chains, self.min_count, min_total=self.min_total,
                                           control=sets.control_table(outcomes),
                                           exchangeable=self.exchangeable)
            meta = {"model": self.loaded.name, "revision": self.loaded.revision,
                    "proteins": [outcome.spec.id for outcome in outcomes], "min_count": self.min_count,
                    "min_total": self.min_total, **dataclasses.asdict(self.options)}
            writers[paths["heads_summary"]] = lambda tmp: sets.write_heads_summary(tmp, summary, meta)
            self.pooled = f"{len(outcomes)} protein(s) pooled: {best_head_line(summary)}"
        return writers

    def written(self, count: int) -> list[str]:
        """What was written, one line per file (said on stderr after the last write)."""
        paths, lines = self.paths, []
        if "out" in paths:
            lines.append(f"wrote contacts of {count} sequence(s) to {paths['out']}")
        if "heads_out" in paths:
            lines.append(f"wrote per-head statistics to {paths['heads_out']}")
        if "chains_out" in paths:
            lines.append(f"wrote {count} row(s), one per record, to {paths['chains_out']}")
        if "heads_summary" in paths:
            lines.append(f"wrote the per-head summary over {count} protein(s) to {paths['heads_summary']}")
        return lines


def report_line(name: str, outcome: UnitOutcome) -> str:
    """One line per record: P@L, P@L/2, P@L/5 per range with a structure, else the top long-range pairs; for
    models without a contact regression, the best head."""
    result = outcome.result
    length = len(result.sequence)
    if result.precision is not None:
        parts = [f"{r}: " + " ".join(f"P@{fraction_label(f)} {result.precision[f'p_at_{f}_{r}']:.3f}"
                                     for f in FRACTIONS) for r in RANGES]
        return f"{name} ({length} residues)  " + "  |  ".join(parts)
    if result.contacts is None:
        heads = result.heads
        if heads is not None and heads["p_at_L_long"].notna().any():
            return f"{name} ({length} residues)  no contact regression; {best_head_line(heads)}"
        return (f"{name} ({length} residues)  no contact regression in this model: per-head statistics "
                "need a structure (--structure)")
    contacts = np.nan_to_num(np.triu(result.contacts, k=24), nan=0.0)  # [L L] long range only
    top = np.dstack(np.unravel_index(np.argsort(-contacts, axis=None)[:5], contacts.shape))[0]
    pairs = ", ".join(f"{i + 1}-{j + 1} ({result.contacts[i, j]:.2f})" for i, j in top if j - i >= 24)
    return f"{name} ({length} residues)  top long-range pairs: {pairs or 'none (shorter than 25 residues)'}"


def best_head_line(heads: pd.DataFrame, name: str = "long") -> str:
    """The best head of a per-head table or summary in range `name` — named only when it is significant
    (:mod:`probe.proteins.significance`: the shift test's p_fwer ≤ ALPHA over every head and range, and P@L
    above the untrained twins' 99th percentile where they ran), else "no significant contact head"."""
    precision = "pooled_p_at_L" if f"pooled_p_at_L_{name}" in heads else "p_at_L"
    bar = heads[f"untrained_p99_L_{name}"].max() if f"untrained_p99_L_{name}" in heads else float("nan")
    twins = f", untrained twins' p99 {bar:.3f}" if np.isfinite(bar) else ", no untrained control"
    best = best_significant(heads, name)
    if best is not None:
        return (f"best significant contact head ({name} range): {best['name']} "
                f"P@L {best[f'{precision}_{name}']:.3f}"
                f" = {best[f'enrichment_L_{name}']:.1f}× the base rate {best[f'base_rate_{name}']:.3f}"
                f"{twins} (p_fwer = {best[f'p_fwer_L_{name}']:.2g})")
    top = heads[f"{precision}_{name}"].max()
    base = heads[f"base_rate_{name}"].mean()
    return (f"no significant contact head ({name} range: best P@L {top:.3f}, base rate {base:.3f}{twins}; "
            f"family-wise p ≤ {ALPHA} over {len(heads)} heads × 3 ranges needed)")


__all__ = ["KINDS", "SIGNATURES", "SUFFIXES", "ContactOutputs", "best_head_line", "is_ours",
           "refuse_foreign", "report_line",
           "write_npz"]
