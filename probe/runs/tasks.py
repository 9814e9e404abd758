"""The tasks of :func:`probe.runs.runner.run`: what one unit of ``probe label`` and of ``probe contacts`` is.

* :class:`LabelTask`: one unit = one :class:`~probe.runs.checkpoints.Checkpoint` (a model, or a revision of
  it). Its identity is :func:`label_identity` — the configuration's identity, the model's name, the **content
  hash of its weights** and the dtype — computed before anything is loaded, the same on every path (one model,
  several, a models file, revisions, Ray). The worker loads the checkpoint and calls
  :func:`probe.heads.label.label_model`; a sweep's rows gain two columns, ``checkpoint`` (the revision as
  named, or the directory's name) and ``step`` (its training step when known). :func:`label_output` is where
  the table goes.
* :class:`ContactsTask`: one unit = one FASTA record or structure chain
  (:class:`probe.proteins.sets.UnitSpec`), every unit sharing one model; the structure is read inside the
  worker, so an unreadable file fails only its unit.

Everything here is picklable: tasks and payloads travel to Ray workers; models never do.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from probe import models
from probe.errors import ProbeError
from probe.hashing import identity_hash
from probe.heads.label import LabelConfig, config_identity, label_model
from probe.heads.stage_times import StageTimes
from probe.heads.tables import COLUMNS, REQUIRED, is_label_table, read_table_file, save_table
from probe.proteins import sets as contact_sets
from probe.runs.checkpoints import Checkpoint, checkpoint_revision, checkpoint_weights
from probe.runs.hub import load_checkpoint
from probe.runs.journal import parts_directory
from probe.runs.progress import BatchBar
from probe.runs.runner import Out, Unit, UnitOutput, UnitResult
from probe.runs.same_weights import mark_same_weights
from probe.runs.steps import unit_steps
from probe.runs.weight_cache import cached_copying_scores

# added after the label table's own columns in a sweep (weights: the identity of the checkpoint's weight
# bytes; same_weights_as: the first checkpoint of the sweep with the same weights, probe.runs.same_weights)
SWEEP_COLUMNS = ["checkpoint", "step", "weights", "same_weights_as"]


def label_identity(config: LabelConfig, model: str, revision: str | None, dtype: str | None) -> str | None:
    """The identity of a model's label rows: everything that determines them (None when the revision is
    unknown)."""
    if revision is None:
        return None
    return identity_hash({**config_identity(config), "model": model, "revision": revision, "dtype": dtype,
                          "columns": COLUMNS})


def label_units(checkpoints: list[Checkpoint]) -> list[Unit]:
    """One unit per checkpoint (its key: spec or spec@revision)."""
    return [Unit(key=c.key, group=c, payload=c) for c in checkpoints]


@dataclass(frozen=True)
class LabelTask:
    """Label every head of one checkpoint per unit. `sweep`: add the checkpoint and step columns to the
    rows."""

    config: LabelConfig = field(default_factory=LabelConfig)
    device: str = "cpu"
    dtype: str | None = None
    sweep: bool = False
    progress: bool = False  # a per-batch bar on stderr while a unit runs (in-process)
    # models.load's engine / device_map keywords
    placement: Mapping[str, object] = field(default_factory=dict)
    # also each labelled head's strongest upstream edge (the fed_by columns, probe.circuits)
    circuits: bool = False
    # in-process only: called with each model a unit labelled (probe label --report draws it without a
    # second load)
    on_loaded: Callable[[object], None] | None = None
    # the output table: each unit's finished steps (probe batches, ablations) are kept in its journal folder
    # (probe.runs.journal.parts_directory) while it runs, so an interrupted run resumes inside a model
    out: str | None = None

    def _identity(self, identity: str | None) -> str | None:
        """The rows' identity, with the circuit search's settings when --circuits adds its columns."""
        if identity is None or not self.circuits:
            return identity
        from probe.circuits.circuit import CircuitConfig

        return identity_hash({"label": identity, "circuits": asdict(CircuitConfig(seed=self.config.seed))})

    def identity(self, unit: Unit) -> str | None:
        checkpoint: Checkpoint = unit.payload
        return self._identity(label_identity(self.config, checkpoint.spec, checkpoint_revision(checkpoint),
                                             self.dtype))

    def load(self, group: Checkpoint):
        return load_checkpoint(group, self.device, self.dtype, **self.placement)

    def _say(self, message: str) -> None:
        if self.progress:  # in-process: at once (a Ray worker's lines would come without order)
            print(f"probe label: {message}", file=sys.stderr, flush=True)

    def compute(self, state, unit: Unit) -> UnitOutput:
        bar = BatchBar(unit.key, enabled=self.progress)
        identity = self._identity(label_identity(self.config, state.name, state.revision, self.dtype))
        store = unit_steps(self.out, unit.key, identity, self._say)
        if self.on_loaded is not None:
            self.on_loaded(state)
        notes: list[str] = []  # said by the runner once the unit succeeded (from Ray workers too)
        kept = (f"; each finished batch is journalled in {parts_directory(self.out)}/, where a rerun resumes"
                if store is not None else "; without --out nothing is kept: an interrupted run starts again")

        def plan(line: str) -> None:  # the unit's first line: after every check, before the first forward
            self._say(line + kept)

        try:
            table = label_model(state, self.config, bar, note=notes.append,
                                copying_of=cached_copying_scores,  # copying: once per weights, on disk
                                memo=bar.memo(store.memo) if store is not None else None, plan=plan)
            if self.circuits:  # opt-in: the default label run's cost is unchanged
                from probe.circuits.circuit import CircuitConfig, fed_by_columns

                started = time.perf_counter()
                table = fed_by_columns(state, table, CircuitConfig(seed=self.config.seed), self.config,
                                       note=notes.append)
                seconds = dict(table.attrs.get("stage_seconds") or {})
                table.attrs["stage_seconds"] = {**seconds, "circuits": time.perf_counter() - started}
            seconds = table.attrs.get("stage_seconds")
            if seconds:  # per-stage seconds in the run's summary (issue 31)
                notes.append(StageTimes(dict(seconds)).line(unit.key))
        finally:
            bar.close()
        if store is not None and store.read:
            notes.append(f"{unit.key}: {store.read} step(s) read back from the interrupted run, "
                         f"{store.written} computed")
        table = table.reindex(columns=COLUMNS)
        if self.sweep:
            table["weights"] = checkpoint_weights(unit.payload)
        return UnitOutput(table=table, identity=identity, notes=notes)

    def rows(self, unit: Unit, result: UnitResult) -> pd.DataFrame | None:
        if result.table is None:
            return None
        table = result.table.reindex(columns=COLUMNS)
        if self.sweep:
            checkpoint: Checkpoint = unit.payload
            table["checkpoint"] = checkpoint.name
            table["step"] = pd.array([checkpoint.step] * len(table), dtype="Int64")
            weights = result.table["weights"] if "weights" in result.table else None
            table["weights"] = weights.to_numpy() if weights is not None else None
            table["same_weights_as"] = None  # filled across units by probe.runs.same_weights (label_output)
        return table

    def owners(self, table: pd.DataFrame) -> pd.Series:
        """The unit of each row: the model, or model@checkpoint when the row is a revision of it."""
        models = table["model"].astype(str)
        if "checkpoint" not in table.columns:
            return models
        checkpoints = table["checkpoint"]
        plain = checkpoints.isna() | (
            checkpoints.astype(str) == models.map(lambda m: Path(m.rstrip("/")).name))
        return models.where(plain, models + "@" + checkpoints.astype(str))


def read_label_table(path: Path) -> pd.DataFrame:
    """A label table with its sweep columns if it has them (a foreign file: one-line ProbeError naming
    --force)."""
    table = read_table_file(path)
    if not is_label_table(table):
        missing = [column for column in REQUIRED if column not in table.columns]
        raise ProbeError(f"{path} exists and is not a probe label table (no {', '.join(missing[:3])} "
                         "column): pass another --out, or --force to overwrite it")
    extra = [column for column in SWEEP_COLUMNS if column in table.columns]
    table = table.reindex(columns=COLUMNS + extra)
    if "step" in extra:
        table["step"] = table["step"].astype("Int64")
    return table


def label_output(path: Path | None, force: bool = False, noun: str = "model") -> Out:
    """Where `probe label` writes: one label table at `path` (parquet, csv or json), rows of other models
    kept."""

    def write(table: pd.DataFrame, finished) -> dict:
        return {path: lambda tmp: save_table(table, tmp)}

    def written(table: pd.DataFrame, finished) -> list[str]:
        return [f"wrote {len(table)} rows ({len(finished)} {noun}(s) of this run) to {path}"]

    return Out(path=path, write=write, read=(lambda: read_label_table(path)) if path is not None else None,
               force=force, written=written, finish=mark_same_weights, command="probe label", noun=noun)


# ------------------------------------------------------------------------------------------------------------
# Contacts: the unit function is probe.proteins.sets.analyse_unit
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContactsTask:
    """`probe contacts`' work, one record or structure chain (a probe.proteins.sets.UnitSpec payload) per
    unit; every unit shares the model named by the group, loaded once per worker. `identities`: each unit's
    identity, computed by the command with :func:`probe.proteins.sets.unit_identity` (it needs the loaded
    model's dtype)."""

    options: object  # probe.proteins.sets.ContactOptions (as the command resolved it)
    device: str = "cpu"
    dtype: str | None = None
    identities: Mapping[str, str] = field(default_factory=dict)
    # models.load's engine / device_map keywords
    placement: Mapping[str, object] = field(default_factory=dict)

    def identity(self, unit: Unit) -> str | None:
        return self.identities.get(unit.key)

    def load(self, group: str):
        loaded = models.load(group, device=self.device, dtype=self.dtype, **self.placement)
        models.require_protein(loaded, "probe contacts")
        return loaded

    def compute(self, state, unit: Unit) -> UnitOutput:
        table, arrays = contact_sets.pack(contact_sets.analyse_unit(state, unit.payload, self.options))
        return UnitOutput(table=table, arrays=arrays)

    def rows(self, unit: Unit, result: UnitResult) -> pd.DataFrame | None:
        return None  # the outputs are built from the units' outcomes (probe.proteins.sets.unpack)

    def owners(self, table: pd.DataFrame) -> pd.Series:
        return pd.Series([None] * len(table), index=table.index, dtype=object)


def contact_units(model: str, specs) -> list[Unit]:
    """One unit per probe.proteins.sets.UnitSpec (same key), all in the model's group."""
    return [Unit(key=spec.key, group=model, payload=spec) for spec in specs]


__all__ = ["SWEEP_COLUMNS", "ContactsTask", "LabelTask", "contact_units", "label_identity", "label_output",
           "label_units", "read_label_table"]
