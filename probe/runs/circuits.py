"""`probe circuit --type` on the runner (:func:`probe.runs.runner.run`): one unit per model and head type.

:class:`CircuitTask` runs :func:`probe.circuits.find_circuit` for one unit (a
:class:`~probe.runs.checkpoints.Checkpoint` and the task's head type). Its identity
(:func:`circuit_identity`) is everything that determines the edge table — the search's settings
(:class:`~probe.circuits.circuit.CircuitConfig`: modes, top_k, examples, controls, seed …), the head type,
the model's name and the content hash of its weights, the dtype and the content hash of the label table —
computed before anything is loaded, so a rerun with the same flags reuses the journalled unit and one with
other flags recomputes it.

Inside a unit the resumable steps (:class:`probe.runs.steps.StepStore`, as ``probe label``'s probe
batches) are a fresh labelling's batches, the composition scores, each paired batch's clean and corrupted
forwards and each patched forward (a batch of candidate, control and type patches); a SIGKILL loses at most
the step in flight, and the rerun's table equals an uninterrupted run's: a step read back is bit for bit what
was computed, and the random controls are drawn from the seed alone
(:func:`probe.circuits.patching.control_patches`), so a resumed run patches the same controls.

A unit's result is its edge table (``model`` and ``head_type`` columns added) and, as arrays, the rest of
the :class:`~probe.circuits.circuit.Circuit` (:func:`circuit_arrays`), so that a unit read back from the
journal or computed on a Ray worker gives the command the same circuit (:func:`circuit_of`: its lines,
``--composition`` and ``--html``). Everything here is picklable: the task travels to Ray workers.
"""

from __future__ import annotations

import io
import json
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from probe.circuits.circuit import EDGE_COLUMNS, Circuit, CircuitConfig, find_circuit
from probe.hashing import file_hash, identity_hash
from probe.heads.tables import save_table
from probe.runs.checkpoints import Checkpoint, checkpoint_revision
from probe.runs.hub import load_checkpoint
from probe.runs.journal import parts_directory
from probe.runs.steps import unit_steps
from probe.runs.units import Out, Unit, UnitOutput, UnitResult

# the Circuit's scalar fields kept in a unit's arrays (the tables travel as parquet bytes)
_SCALARS = ("model", "head_type", "n_layers", "n_heads", "corruption", "probe_set", "type_effect",
            "total_effect", "clean_loss", "examples", "forwards", "controls")


def circuit_identity(config: CircuitConfig, head_type: str, model: str, revision: str | None,
                     dtype: str | None, labels: str | None) -> str | None:
    """The identity of a unit's edge table: everything that determines it (None when the weights' revision
    is unknown before loading: the unit is then always computed).

    Examples
    --------
    >>> a = circuit_identity(CircuitConfig(), "induction", "zoo:induction", "abc", None, None)
    >>> a == circuit_identity(CircuitConfig(seed=1), "induction", "zoo:induction", "abc", None, None)
    False
    >>> circuit_identity(CircuitConfig(), "induction", "m", None, None, None) is None
    True
    """
    if revision is None:
        return None
    return identity_hash({"circuit": asdict(config), "head_type": head_type, "model": model,
                          "revision": revision, "dtype": dtype,
                          "labels": file_hash(labels) if labels is not None else None,
                          "columns": EDGE_COLUMNS})


def circuit_units(model: str, head_type: str) -> list[Unit]:
    """One unit: the model's circuit of `head_type` (key ``MODEL · TYPE``, as the circuit's lines begin)."""
    checkpoint = Checkpoint(model)
    return [Unit(key=f"{model} · {head_type}", group=checkpoint, payload=checkpoint)]


def _frame_bytes(frame: pd.DataFrame) -> np.ndarray:
    buffer = io.BytesIO()
    frame.to_parquet(buffer)
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8)


def _frame(data: np.ndarray) -> pd.DataFrame:
    return pd.read_parquet(io.BytesIO(np.asarray(data, dtype=np.uint8).tobytes()))


def _plain(value):
    return value.item()  # numpy scalars


def circuit_arrays(circuit: Circuit) -> dict[str, np.ndarray]:
    """A circuit's nodes, composition and scalar fields as arrays (what the journal and Ray carry); its edges
    are the unit's table."""
    scalars = {name: getattr(circuit, name) for name in _SCALARS}
    scalars = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in scalars.items()}
    header = {**scalars, "receivers": [list(head) for head in circuit.receivers],
              "notes": list(circuit.notes)}
    composition = circuit.composition.copy()
    composition.attrs = {}
    return {"circuit": np.frombuffer(json.dumps(header, default=_plain).encode("utf-8"), dtype=np.uint8),
            "nodes": _frame_bytes(circuit.nodes), "composition": _frame_bytes(composition)}


def circuit_of(edges: pd.DataFrame, arrays: Mapping[str, np.ndarray]) -> Circuit:
    """The :class:`~probe.circuits.circuit.Circuit` a unit's table and arrays describe
    (:func:`circuit_arrays`)."""
    header = json.loads(np.asarray(arrays["circuit"], dtype=np.uint8).tobytes().decode("utf-8"))
    scalars = {k: math.nan if header[k] is None and k.endswith(("_effect", "_loss")) else header[k]
               for k in _SCALARS}
    table = edges.reindex(columns=EDGE_COLUMNS).reset_index(drop=True)
    table["in_circuit"] = table["in_circuit"].astype(bool)
    return Circuit(**scalars, receivers=tuple(tuple(head) for head in header["receivers"]),
                   nodes=_frame(arrays["nodes"]), edges=table, composition=_frame(arrays["composition"]),
                   notes=tuple(header["notes"]))


@dataclass(frozen=True)
class CircuitTask:
    """Find one head type's circuit per unit (a Checkpoint payload); see the module doc. `labels`: a label
    table file (None: the type is labelled first); `out`: the edge table, beside which the unit's steps are
    journalled (None: nothing is kept); `progress`: in-process, lines and forwards counted on stderr."""

    head_type: str
    config: CircuitConfig = field(default_factory=CircuitConfig)
    labels: str | None = None
    device: str = "cpu"
    dtype: str | None = None
    placement: Mapping[str, object] = field(default_factory=dict)  # models.load's engine / device_map
    out: str | None = None
    progress: bool = False

    def _identity(self, model: str, revision: str | None) -> str | None:
        return circuit_identity(self.config, self.head_type, model, revision, self.dtype, self.labels)

    def identity(self, unit: Unit) -> str | None:
        checkpoint: Checkpoint = unit.payload
        return self._identity(checkpoint.spec, checkpoint_revision(checkpoint))

    def load(self, group: Checkpoint):
        return load_checkpoint(group, self.device, self.dtype, **self.placement)

    def _say(self, message: str, end: str = "\n") -> None:
        if self.progress:  # in-process: at once (a Ray worker's lines come back as the unit's notes)
            print(f"probe circuit: {message}", end=end, file=sys.stderr, flush=True)

    def compute(self, state, unit: Unit) -> UnitOutput:
        identity = self._identity(unit.payload.spec, state.revision)
        store = unit_steps(self.out, unit.key, identity, self._say)
        kept = (f"each finished step is journalled in {parts_directory(self.out)}/, where a rerun resumes"
                if store is not None else "without --out nothing is kept: an interrupted run starts again")
        self._say(f"{unit.key}: composition scores, then path patching of the candidates against "
                  f"{self.config.controls} random sender–receiver controls; {kept}")
        notes: list[str] = []

        def note(text: str) -> None:
            self._say(text) if self.progress else notes.append(text)

        shown = [0.0]

        def progress(done: int, total: int) -> None:  # twice a second
            if done == total or time.perf_counter() - shown[0] > 0.5:
                shown[0] = time.perf_counter()
                self._say(f"{unit.key}: forward {done}/{total}", end="\n" if done == total else "\r")

        circuit = find_circuit(state, self.head_type, self.labels, self.config, note=note,
                               progress=progress if self.progress else None,
                               memo=store.memo if store is not None else None)
        if store is not None and store.read:
            notes.append(f"{unit.key}: {store.read} step(s) read back from the interrupted run, "
                         f"{store.written} computed")
        edges = circuit.edges.assign(model=state.name, head_type=self.head_type)
        return UnitOutput(table=edges, arrays=circuit_arrays(circuit), identity=identity, notes=notes)

    def rows(self, unit: Unit, result: UnitResult) -> pd.DataFrame | None:
        return result.table

    def owners(self, table: pd.DataFrame) -> pd.Series:
        return table["model"].astype(str) + " · " + table["head_type"].astype(str)


def circuit_output(path: Path | None, force: bool = False) -> Out:
    """Where ``probe circuit --out`` writes: the edge table of this run's units (an earlier table is replaced,
    as before the runner: no rows of it are kept)."""

    def write(table: pd.DataFrame, finished) -> dict:
        return {path: lambda tmp: save_table(table, tmp)}

    def written(table: pd.DataFrame, finished) -> list[str]:
        circuit = int(table["in_circuit"].astype(bool).sum()) if len(table) else 0
        return [f"wrote {path} ({len(table)} candidate edges, {circuit} in the circuit)"]

    return Out(path=path, write=write, force=force, written=written, command="probe circuit",
               noun="circuit")


__all__ = ["CircuitTask", "circuit_arrays", "circuit_identity", "circuit_of", "circuit_output",
           "circuit_units"]
