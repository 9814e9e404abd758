"""Contact analysis unit by unit (a FASTA record or a structure chain, :mod:`probe.proteins.units`), and what
a set of units adds up to.

The unit functions here are what `probe contacts` runs (and what a distributed runner can run): each unit is
analysed on its own, persisted in a :class:`probe.runs.journal.Journal` under an identity of everything that
determines its result, and the outputs are built from the units:

* the **per-chain table** (:func:`chain_table`, ``--chains-out``): one row per unit — ``record, id, file,
  chain, length, sequence, structure_hash, ligands``, the nine precision columns of the checkpoint's predicted
  contacts (NaN without a contact regression), ``n_known_{range}`` / ``n_true_{range}`` (known pairs and
  contacts per range) and the background counts of :func:`probe.proteins.features.background_counts`
  (``n_pairs, n_residues, n_contact_pairs, n_known_pairs, n_binding_residues, n_helix_residues,
  n_strand_residues, n_turn_bend_residues, n_blank_residues``);
* the **per-head table** (:func:`heads_table`, ``--heads-out``): one row per unit × head, ``record, id`` and
  the columns of :mod:`probe.proteins.contacts`' per-head table (with the untrained control, the twins' heads
  are kept beside it, :func:`control_table`, for the summary's ``untrained_p99``);
* the **per-head summary** over the set (:func:`summarize_heads`, ``--heads-summary``), see
  :data:`HEAD_SUMMARY_COLUMNS` and :func:`read_heads_summary`.

Longer than 450 lines because the unit functions and the set's tables share one identity and one column
list, and every public table carries its running example (run by tests/project/test_doctests.py).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from probe.errors import ProbeError, first_line
from probe.hashing import identity_hash
from probe.models import LoadedModel
from probe.naming import head_name
from probe.proteins import features as vig
from probe.proteins import significance
from probe.proteins.analysis import protein_input
from probe.proteins.contacts import ContactResult, predict_contacts, predict_contacts_windowed
from probe.proteins.features import MIN_ATTENTION, MIN_COUNT, MIN_TOTAL, ResidueFeatures
from probe.proteins.precision import RANGES, known_pair_counts, precision_columns
from probe.proteins.regression_file import read_regression
from probe.proteins.structure import (
    BINDING_DISTANCE,
    CONTACT_THRESHOLD,
    DEFAULT_CB,
)
from probe.proteins.units import UnitSpec
from probe.untrained import DEFAULT_TWINS

FORMAT_VERSION = 4  # of a unit's stored form: bump to make old journals recompute
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95


@dataclass(frozen=True)
class ContactOptions:
    """What determines a unit's result (besides the model and the inputs); CLI flags mirror the fields."""

    threshold: float = CONTACT_THRESHOLD  # Å, Cβ–Cβ contact distance
    cb: str = DEFAULT_CB  # "virtual" (ESM's evaluation) or "real"
    window: int | None = None  # crop-and-average window for sequences longer than the model takes (ESM only)
    min_attention: float = MIN_ATTENTION  # θ of Vig et al.'s counts
    binding_distance: float = BINDING_DISTANCE  # Å, residue to ligand heavy atom
    per_head: bool = True  # compute the per-head table
    regression: str | None = None  # a fitted contact regression file (probe contacts --regression), or None
    # its probe.runs.journal.file_hash (a changed file recomputes the units)
    regression_hash: str | None = None
    control: int = DEFAULT_TWINS  # untrained twins run beside the model (--control untrained:K); 0: none


@dataclass(frozen=True, eq=False)
class UnitOutcome:
    """A finished unit: its result and its per-chain row."""

    spec: UnitSpec
    result: ContactResult
    row: dict


def unit_identity(loaded: LoadedModel, spec: UnitSpec, options: ContactOptions) -> str:
    """The identity of everything that determines a unit's result (probe.hashing.identity_hash)."""
    dtype = str(next(loaded.model.parameters()).dtype)
    return identity_hash({"format": FORMAT_VERSION, "model": loaded.name, "revision": loaded.revision,
                          "dtype": dtype, "sequence": spec.sequence, "structure": spec.structure_hash,
                          "chain": spec.chain, **asdict(options)})


# ------------------------------------------------------------------------------------------------------------
# One unit
# ------------------------------------------------------------------------------------------------------------


def analyse_unit(loaded: LoadedModel, spec: UnitSpec, options: ContactOptions) -> UnitOutcome:
    """Read the unit's structure (if any), build its true contacts and properties, and analyse it."""
    if spec.sequence is None and not spec.structure:
        raise ProbeError(f"{spec.id}: give a sequence or a structure")
    # the one protein input of the CLI, the app and the report (probe.proteins.analysis): the residues, the
    # true contacts [L L] and the residue properties (unknown is not 0)
    protein = protein_input(loaded, spec.sequence, spec.structure or None, chain=spec.chain,
                            threshold=options.threshold, cb=options.cb,
                            binding_distance=options.binding_distance)
    sequence, structure, true_map = protein.sequence, protein.structure, protein.true_map
    features = protein.features
    limit = loaded.max_tokens - 2
    if len(sequence) > limit:
        if options.window is None:
            raise ProbeError(f"{spec.id} has {len(sequence)} residues but {loaded.name} takes at most "
                             f"{limit}; shorten it or use --window {limit}")
        if options.per_head:
            raise ProbeError(f"{spec.id} has {len(sequence)} residues: per-head statistics need whole "
                             f"sequences (at most {limit}), not --window mode")
        result = predict_contacts_windowed(loaded, sequence, options.window, true_map=true_map)
    else:
        fitted = None
        if options.regression is not None:
            fitted = read_regression(options.regression).check_model(loaded).as_tuple()
        result = predict_contacts(loaded, sequence, true_map, per_head=options.per_head, features=features,
                                  min_attention=options.min_attention, regression=fitted,
                                  control=options.control)
    return UnitOutcome(spec, result, _chain_row(spec, result, features, structure))


def _chain_row(spec: UnitSpec, result: ContactResult, features: ResidueFeatures | None, structure) -> dict:
    row = {"record": spec.record, "id": spec.id, "file": spec.structure or "", "chain": spec.chain or "",
           "length": len(result.sequence), "sequence": result.sequence,
           "structure_hash": spec.structure_hash or "",
           "ligands": ",".join(structure.ligands) if structure is not None else ""}
    precision = result.precision or {}
    row.update({column: float(precision.get(column, np.nan)) for column in precision_columns()})
    known = known_pair_counts(result.true_contacts) if result.true_contacts is not None else {}
    for name in RANGES:
        row[f"n_known_{name}"], row[f"n_true_{name}"] = known.get(name, (0, 0))
    row.update(vig.background_counts(features, len(result.sequence)))
    return row


def pack(outcome: UnitOutcome) -> tuple[pd.DataFrame | None, dict[str, np.ndarray]]:
    """(table, arrays) to put in the journal."""
    arrays = {"row": np.frombuffer(json.dumps(outcome.row).encode("utf-8"), dtype=np.uint8)}
    if outcome.result.contacts is not None:
        arrays["contacts"] = outcome.result.contacts.astype(np.float32)
    if outcome.result.true_contacts is not None:
        arrays["true_contacts"] = outcome.result.true_contacts
    if outcome.result.control is not None:
        arrays.update({f"control_{column}": outcome.result.control[column].to_numpy()
                       for column in outcome.result.control.columns if column != "name"})
    return outcome.result.heads, arrays


def unpack(spec: UnitSpec, table: pd.DataFrame | None, arrays: dict[str, np.ndarray]) -> UnitOutcome:
    """The outcome a journal entry stands for (the inverse of :func:`pack`)."""
    row = json.loads(bytes(arrays["row"]).decode("utf-8"))
    precision = None
    if "contacts" in arrays and "true_contacts" in arrays:
        precision = {column: float(row[column]) for column in precision_columns()}
    control = None
    names = [name for name in arrays if name.startswith("control_")]
    if names:
        control = pd.DataFrame({name.removeprefix("control_"): np.asarray(arrays[name]) for name in names})
    result = ContactResult(row["sequence"], arrays.get("contacts"), arrays.get("true_contacts"),
                           precision, table, control=control)
    return UnitOutcome(spec, result, row)


# ------------------------------------------------------------------------------------------------------------
# Tables of a set
# ------------------------------------------------------------------------------------------------------------


def chain_table(outcomes: Sequence[UnitOutcome]) -> pd.DataFrame:
    """The per-chain table (``--chains-out``): one row per unit, in record order.

    Parameters
    ----------
    outcomes : sequence of UnitOutcome
        The finished units (:func:`analyse_unit`, or read back from the journal).

    Returns
    -------
    pandas.DataFrame
        One row per unit, with these columns:

        | column | dtype | meaning |
        |---|---|---|
        | `record` | int | position of the unit in the run |
        | `id` | str | the record's id, or `{file stem}_{chain}` for a structure chain (`pdb1ubi_A`) |
        | `file`, `chain` | str | the structure file and chain ("" without a structure) |
        | `length` | int | residues L |
        | `sequence` | str | the sequence analysed |
        | `structure_hash` | str | content hash of the structure file ("" without one) |
        | `ligands` | str | comma-separated ligand names of the structure |
        | `p_at_{L,L2,L5}_{short,medium,long}` | float | the nine precisions of the checkpoint's predicted contacts; NaN without a contact regression or a structure |
        | `n_known_{short,medium,long}`, `n_true_{short,medium,long}` | int | known pairs and true contacts per range |
        | `n_pairs`, `n_residues` | float | L², L |
        | `n_known_pairs` | float | pairs at least 6 apart whose contact state is known (provis' contact background's denominator); NaN without a structure |
        | `n_contact_pairs`, `n_{binding,helix,strand,turn_bend,blank}_residues` | float | the property counts behind the background rates; NaN where unknown |

    Examples
    --------
    >>> from pathlib import Path
    >>> from probe.proteins.units import structure_units
    >>> esm = probe.load("zoo:esm-random")  # random weights: the numbers mean nothing
    >>> units, skipped = structure_units([Path("tests/data/pdb1ejg.pdb")])  # one unit per protein chain
    >>> outcomes = [analyse_unit(esm, unit, ContactOptions(per_head=False)) for unit in units]
    >>> chain_table(outcomes)[["id", "chain", "length", "n_true_long", "p_at_L_long"]]
              id chain  length  n_true_long  p_at_L_long
    0  pdb1ejg_A     A      46           38     0.217391
    """  # noqa: E501 - markdown table rows cannot wrap
    return pd.DataFrame([outcome.row for outcome in outcomes])


def heads_table(outcomes: Sequence[UnitOutcome], min_count: int = MIN_COUNT, *,
                min_total: float = MIN_TOTAL, exchangeable: bool = False) -> pd.DataFrame:
    """The per-head table of a set (``--heads-out``): one row per unit × head.

    Parameters
    ----------
    outcomes : sequence of UnitOutcome
        The finished units; those without a per-head table are left out.
    min_count : int, default 100
        Vig et al.'s count shares are NaN for a head with fewer weights ≥ θ in that unit.
    min_total : float, default 100
        Vig et al.'s attention-weighted shares are NaN for a head whose Σα over the weights > θ is below this.
    exchangeable : bool, default False
        Also the retired hypergeometric test (``p_exchangeable_L_r``, ``q_exchangeable_L_r``: BH over each
        unit's heads; :func:`probe.proteins.significance.with_exchangeable`), which assumes exchangeable pairs
        (``probe contacts --hypergeometric-exchangeable-pairs``).

    Returns
    -------
    pandas.DataFrame
        ``record`` (int) and ``id`` (str), then the columns of
        :attr:`probe.proteins.contacts.ContactResult.heads` (and with `exchangeable` the two above, per
        range, at the end).

    Raises
    ------
    ProbeError
        No unit has a per-head table.

    Examples
    --------
    >>> from pathlib import Path
    >>> from probe.proteins.units import structure_units
    >>> esm = probe.load("zoo:esm-random")  # random weights: the numbers mean nothing
    >>> units, _ = structure_units([Path("tests/data/pdb1ejg.pdb")])  # crambin, 46 residues
    >>> heads = heads_table([analyse_unit(esm, unit, ContactOptions()) for unit in units])
    >>> heads.shape, heads[["record", "id", "name"]].head(2).values.tolist()  # one row per chain × head
    ((8, 91), [[0, 'pdb1ejg_A', 'L0H0'], [0, 'pdb1ejg_A', 'L0H1']])
    """
    tables = []
    for outcome in outcomes:
        if outcome.result.heads is None:
            continue
        table = vig.shares(outcome.result.heads, min_total=min_total, min_count=min_count)
        table = table.drop(columns=significance.exchangeable_columns(table))  # a journal from before 57
        if exchangeable:
            table = significance.with_exchangeable(table, by=None)
        table.insert(0, "id", outcome.spec.id)
        table.insert(0, "record", outcome.spec.record)
        tables.append(table)
    if not tables:
        raise ProbeError("no per-head statistics were computed")
    return pd.concat(tables, ignore_index=True)


def control_table(outcomes: Sequence[UnitOutcome]) -> pd.DataFrame | None:
    """The untrained twins' heads of a set: one row per unit × twin × head, ``record, id, seed, layer,
    head`` and per range ``hits_L_r, top_L_r, p_at_L_r``; None when no unit ran the control."""
    tables = []
    for outcome in outcomes:
        if outcome.result.control is None:
            continue
        table = outcome.result.control.copy()
        table.insert(0, "id", outcome.spec.id)
        table.insert(0, "record", outcome.spec.record)
        tables.append(table)
    return pd.concat(tables, ignore_index=True) if tables else None


# Per-head summary columns, in file order. For each precision column c of probe.proteins.contacts
# (p_at_L_long, ...): c (mean over the proteins with a value), c_low, c_high (percentile bootstrap interval of
# that mean, proteins resampled with replacement). Then, per range r, the pooled contact test of
# probe.proteins.significance (hits_L_r, top_L_r, pooled_p_at_L_r, base_rate_r, enrichment_L_r, strata_rate_r,
# z_L_r, p_value_L_r, p_fwer_L_r, untrained_p99_L_r, significant_L_r; the retired hypergeometric
# p_exchangeable_L_r, q_exchangeable_L_r only on request, EXCHANGEABLE_SUMMARY_COLUMNS, after everything).
# Then Vig et al.'s pooled sums, shares (weighted, Σ α < min_total: NaN),
# count shares (count < min_count: NaN) and backgrounds (probe.proteins.features); NaN where no protein of the
# set has data for the property.
SIGNIFICANCE_SUMMARY_COLUMNS: tuple[str, ...] = tuple(
    f"{column}_{name}" for name in RANGES for column in (
        "hits_L", "top_L", "pooled_p_at_L", "base_rate", "enrichment_L", "strata_rate", "z_L", "p_value_L",
        "p_fwer_L", "untrained_p99_L", "significant_L"))
EXCHANGEABLE_SUMMARY_COLUMNS: tuple[str, ...] = tuple(
    f"{column}_{name}" for name in RANGES for column in significance.EXCHANGEABLE)
HEAD_SUMMARY_COLUMNS: tuple[str, ...] = (
    "layer", "head", "name", "n_proteins", "weight", "logit_share",
    *(f"{column}{suffix}" for column in precision_columns() for suffix in ("", "_low", "_high")),
    *SIGNIFICANCE_SUMMARY_COLUMNS,
    "w_high", *(f"w_{name}" for name in vig.FEATURES), *(f"{name}_share" for name in vig.FEATURES),
    "n_high", *(f"n_{name}" for name in vig.FEATURES), *(f"{name}_count_share" for name in vig.FEATURES),
    *(f"{name}_background" for name in vig.FEATURES), "contact_background_all_pairs",
)
"""Columns of the per-head summary over a structure set (``probe contacts --heads-summary``), in file order.

| column | dtype | meaning |
|---|---|---|
| `layer`, `head` | int | 0-based |
| `name` | str | `L{layer}H{head}` |
| `n_proteins` | int | proteins with a known long-range pair |
| `weight`, `logit_share` | float | mean over proteins of the per-head columns of the same name |
| `p_at_{L,L2,L5}_{short,medium,long}{,_low,_high}` | float | for each of the nine precisions: the mean over the proteins with a value, and a 95 % percentile bootstrap interval of that mean (proteins resampled) |
| `{hits_L,top_L}_{short,medium,long}` | int | the head's top-L pairs that are contacts, and how many top-L pairs had a known state, pooled over the proteins |
| `pooled_p_at_L_{short,medium,long}` | float | hits_L / top_L |
| `base_rate_{short,medium,long}` | float | contact rate of the known pairs of the range, pooled over the proteins |
| `enrichment_L_{short,medium,long}` | float | pooled P@L / base rate |
| `strata_rate_{short,medium,long}` | float | the pooled P@L a predictor knowing only separation and residue types gets on the head's own strata |
| `z_L_{short,medium,long}` | float | the pooled excess over that predictor, standardised over the pooled shift null |
| `p_value_L_{short,medium,long}` | float | Monte Carlo permutation p-value of the pooled excess (one diagonal shift per protein per draw) |
| `p_fwer_L_{short,medium,long}` | float | Westfall–Young step-down maxT p-value over every head and range (family-wise) |
| `untrained_p99_L_{short,medium,long}` | float | 99th percentile of the untrained twins' heads' pooled P@L; NaN without twins |
| `significant_L_{short,medium,long}` | boolean | p_fwer ≤ 0.05 and pooled P@L above untrained_p99 (where there are twins); NA: untested |
| `w_high`, `w_{contact,binding,helix,strand,turn_bend,blank}` | float | Vig et al.'s attention-weighted sums pooled over the set: Σα over weights > θ, and Σα·f |
| `{contact,binding,helix,strand,turn_bend,blank}_share` | float | w_f / w_high (provis' first version, 34e6869; run there at θ = 0.1); NaN where w_high < `min_total` or the property is unknown |
| `n_high`, `n_{contact,binding,helix,strand,turn_bend,blank}` | float | the count variant: weights ≥ θ, and those on the property |
| `{contact,binding,helix,strand,turn_bend,blank}_count_share` | float | n_f / n_high (provis' ICLR 2021 version, 946e9b4; run there at θ = 0.3); NaN below the minimum count or where unknown |
| `{contact,binding,helix,strand,turn_bend,blank}_background` | float | the properties' rates over the set (contact: over the known pairs at least 6 apart, as provis' report_top_heads); NaN where unknown (no ligand: binding) |
| `contact_background_all_pairs` | float | contact pairs over all L² pairs of the set: what a head attending uniformly gets as its contact share |

With ``--hypergeometric-exchangeable-pairs`` (``summarize_heads(..., exchangeable=True)``) the file ends
with :data:`EXCHANGEABLE_SUMMARY_COLUMNS`, ``p_exchangeable_L_r`` and ``q_exchangeable_L_r`` per range: the
retired hypergeometric test of the pooled hits, which assumes exchangeable pairs, and its Benjamini–Hochberg
q. The parquet file's schema metadata holds the run's model, revision, options and proteins
(:func:`read_heads_summary` puts them in ``DataFrame.attrs``).

Examples
--------
>>> from probe.proteins.sets import HEAD_SUMMARY_COLUMNS
>>> len(HEAD_SUMMARY_COLUMNS), HEAD_SUMMARY_COLUMNS[:6]
(99, ('layer', 'head', 'name', 'n_proteins', 'weight', 'logit_share'))
"""  # noqa: E501 - markdown table rows cannot wrap


def bootstrap_means(values: np.ndarray, samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED,
                    confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, low, high) per column of `values` [protein column] (NaN = no value): the mean over the proteins
    with a value and a percentile bootstrap interval of it (proteins resampled with replacement, the same
    resamples for every column). Columns with fewer than two values get a NaN interval."""
    values = np.asarray(values, dtype=np.float64)
    n_proteins, n_columns = values.shape
    nan = np.full(n_columns, np.nan)
    with warnings.catch_warnings():  # columns without any value: nan means, no "mean of empty slice" noise
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(values, axis=0) if n_proteins else nan.copy()
        if n_proteins < 2:
            return mean, nan.copy(), nan.copy()
        rng = np.random.default_rng(seed)
        index = rng.integers(0, n_proteins, size=(samples, n_proteins))  # [sample protein]
        resampled = np.nanmean(values[index], axis=1)  # [sample column]
        tail = (1.0 - confidence) / 2.0
        low = np.nanquantile(resampled, tail, axis=0)
        high = np.nanquantile(resampled, 1.0 - tail, axis=0)
    few = (~np.isnan(values)).sum(0) < 2
    low[few], high[few] = np.nan, np.nan
    return mean, low, high


def summarize_heads(heads: pd.DataFrame, chains: pd.DataFrame, min_count: int = MIN_COUNT,
                    samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED, *,
                    min_total: float = MIN_TOTAL, control: pd.DataFrame | None = None,
                    exchangeable: bool = False) -> pd.DataFrame:
    """The per-head summary over a set (``--heads-summary``), one row per layer × head.

    Parameters
    ----------
    heads : pandas.DataFrame
        :func:`heads_table`: one row per protein × head.
    chains : pandas.DataFrame
        :func:`chain_table`: one row per protein.
    min_count : int, default 100
        Vig et al.'s pooled count shares are NaN for a head with fewer weights ≥ θ over the whole set.
    samples : int, default 2000
        Bootstrap resamples of the proteins.
    seed : int, default 0
        Seed of the resamples (the same resamples for every head and column).
    min_total : float, default 100
        Vig et al.'s pooled attention-weighted shares are NaN for a head whose Σα over the weights > θ is
        below this over the whole set.
    control : pandas.DataFrame, optional
        :func:`control_table`: the untrained twins' heads (None: no ``untrained_p99``, p_fwer decides alone).
    exchangeable : bool, default False
        Append :data:`EXCHANGEABLE_SUMMARY_COLUMNS`: the retired hypergeometric test, which assumes
        exchangeable pairs.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`HEAD_SUMMARY_COLUMNS` in that order (then, with `exchangeable`,
        :data:`EXCHANGEABLE_SUMMARY_COLUMNS`). ``n_proteins`` counts the proteins with a known
        long-range pair; precision means and intervals are over proteins; Vig et al.'s shares pool the sums
        over all proteins; the contact test pools each head's top-L hits and shift nulls over the proteins.

    Examples
    --------
    >>> from pathlib import Path
    >>> from probe.proteins.units import structure_units
    >>> esm = probe.load("zoo:esm-random")  # random weights: the numbers mean nothing
    >>> units, _ = structure_units([Path("tests/data/pdb1ubi.pdb"), Path("tests/data/pdb1ejg.pdb")])
    >>> outcomes = [analyse_unit(esm, unit, ContactOptions()) for unit in units]
    >>> summary = summarize_heads(heads_table(outcomes), chain_table(outcomes), samples=200)
    >>> summary[["name", "n_proteins", "p_at_L_long", "p_at_L_long_low", "p_at_L_long_high"]].head(2)
       name  n_proteins  p_at_L_long  p_at_L_long_low  p_at_L_long_high
    0  L0H0           2     0.091533         0.052632          0.130435
    1  L0H1           2     0.163616         0.131579          0.195652
    """
    grouped = heads.groupby(["layer", "head"], sort=True)
    summary = grouped[["weight", "logit_share"]].mean().reset_index()
    keys = pd.MultiIndex.from_frame(summary[["layer", "head"]])
    summary.insert(2, "name", [head_name(int(layer), int(head)) for layer, head in keys])
    summary["n_proteins"] = grouped["p_at_L_long"].count().to_numpy()
    for column in precision_columns():
        matrix = heads.pivot(index="record", columns=["layer", "head"], values=column).reindex(columns=keys)
        mean, low, high = bootstrap_means(matrix.to_numpy(), samples, seed)  # over proteins, per head
        summary[column], summary[f"{column}_low"], summary[f"{column}_high"] = mean, low, high
    summary = summary.merge(significance.pooled_rows(heads, control, exchangeable=exchangeable),
                            on=["layer", "head"], how="left")
    pooled = vig.pooled_shares(heads, min_total=min_total, min_count=min_count)
    summary = summary.merge(pooled, on=["layer", "head"], how="left")
    for name, value in vig.pooled_backgrounds(chains).items():
        summary[name] = value
    return summary[list(HEAD_SUMMARY_COLUMNS) + (list(EXCHANGEABLE_SUMMARY_COLUMNS) if exchangeable else [])]


def write_heads_summary(path: Path, summary: pd.DataFrame, meta: dict) -> None:
    """Write the summary as parquet with `meta` (model, options, proteins) as JSON in the schema metadata."""
    table = pa.Table.from_pandas(summary, preserve_index=False)
    metadata = dict(table.schema.metadata or {})
    metadata[b"probe"] = json.dumps(meta, default=str).encode("utf-8")
    pq.write_table(table.replace_schema_metadata(metadata), path)


def read_heads_summary(path: str | Path) -> pd.DataFrame:
    """A per-head summary written by `probe contacts --heads-summary`, checked; its metadata in ``.attrs``
    (model, revision, proteins, min_attention, min_total, min_count, threshold, cb, ...). One-line ProbeError
    otherwise.

    Parameters
    ----------
    path : str or pathlib.Path
        The parquet file.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`HEAD_SUMMARY_COLUMNS` (and any the file adds); ``.attrs`` holds the run's metadata.

    Raises
    ------
    ProbeError
        The file is missing, not parquet, or lacks a summary column.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from probe.proteins.units import structure_units
    >>> esm = probe.load("zoo:esm-random")  # random weights: the numbers mean nothing
    >>> units, _ = structure_units([Path("tests/data/pdb1ejg.pdb")])
    >>> outcomes = [analyse_unit(esm, unit, ContactOptions()) for unit in units]
    >>> summary = summarize_heads(heads_table(outcomes), chain_table(outcomes), samples=100)
    >>> with tempfile.TemporaryDirectory() as folder:  # what probe contacts --heads-summary writes
    ...     write_heads_summary(Path(folder) / "summary.parquet", summary, {"model": esm.name, "proteins": 1})
    ...     back = read_heads_summary(Path(folder) / "summary.parquet")
    >>> back.shape, back.attrs
    ((8, 99), {'model': 'zoo:esm-random', 'proteins': 1})
    >>> read_heads_summary("no/such/summary.parquet")
    Traceback (most recent call last):
    probe.errors.ProbeError: heads summary no/such/summary.parquet does not exist
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise ProbeError(f"heads summary {path} does not exist")
    try:
        table = pq.read_table(file)
    except Exception as error:  # pyarrow raises many types on a foreign or damaged file
        raise ProbeError(f"{path} is not a parquet per-head summary ({first_line(error)})") from None
    missing = [column for column in HEAD_SUMMARY_COLUMNS if column not in table.column_names]
    if missing:
        raise ProbeError(f"{path} is not a probe contacts --heads-summary file: it lacks "
                         f"{', '.join(missing[:4])}"
                         + (" ..." if len(missing) > 4 else ""))
    frame = table.to_pandas()
    raw = (table.schema.metadata or {}).get(b"probe")
    frame.attrs.update(json.loads(raw.decode("utf-8")) if raw else {})
    return frame


__all__ = ["EXCHANGEABLE_SUMMARY_COLUMNS", "HEAD_SUMMARY_COLUMNS", "ContactOptions", "UnitOutcome",
           "analyse_unit", "bootstrap_means", "chain_table", "control_table", "heads_table", "pack",
           "read_heads_summary", "summarize_heads", "unit_identity", "unpack", "write_heads_summary"]
