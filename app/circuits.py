"""The circuit panel's data: a head type's circuit (:func:`probe.circuits.find_circuit`) on a served model's
label table, computed once per (model, type, label table) through the inference gate and kept in an LRU cache
(:meth:`probe_app.cache.LRUCache.get_or_compute`) while the table stays the same; and an uploaded task's
circuit over every edge (:func:`probe.circuits.task_search.task_circuit`), once per (model, file content),
kept as the graph's bounded payload (:meth:`~probe.circuits.task_search.TaskCircuit.payload`)."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from probe.circuits import CircuitConfig, find_circuit
from probe.circuits.circuit import Circuit
from probe.errors import ProbeError

from .cache import LRUCache
from .facts import ModelFacts
from .gate import InferenceGate
from .jobs import JobSlots

EXAMPLES = 16  # paired probes per circuit in the app (probe circuit --examples)
CIRCUITS = 16  # circuits kept (a circuit is its tables: kilobytes)
TASK_SUFFIXES = (".csv", ".jsonl")  # an uploaded task (probe.circuits.task.load_task)


def table_key(table: pd.DataFrame) -> int:
    """A content hash of a label table: a relabelled model's circuit is found again, an unchanged one is
    not."""
    return int(pd.util.hash_pandas_object(table.astype(str), index=False).sum())


class CircuitStore:
    """Circuits of the served models, by (spec, head type, label table).

    Parameters
    ----------
    facts : ModelFacts
        The models.
    gate : InferenceGate
        One forward pass at a time in the process (the patching forwards pass it as a view).
    labels_of : callable
        spec -> the model's label table or None.
    cache : LRUCache, optional
        Where the circuits are kept (default: :data:`CIRCUITS` entries).
    slots : JobSlots, optional
        The server's bound on queued work, held by a search from its start to its end (default: 4 slots).
    """

    def __init__(self, facts: ModelFacts, gate: InferenceGate,
                 labels_of: Callable[[str], pd.DataFrame | None], cache: LRUCache | None = None,
                 slots: JobSlots | None = None) -> None:
        self.facts, self.gate, self.labels_of = facts, gate, labels_of
        self.cache = cache if cache is not None else LRUCache(CIRCUITS, 64 * 2**20)
        self.slots = slots if slots is not None else JobSlots(4)

    def _key(self, spec: str, head_type: str) -> tuple | None:
        table = self.labels_of(spec)
        return None if table is None else ("circuit", spec, head_type, table_key(table))

    def cached(self, spec: str, head_type: str) -> Circuit | None:
        """The circuit already found for the model's current label table, or None."""
        key = self._key(spec, head_type)
        return None if key is None else self.cache.peek(key)

    def circuit(self, spec: str, head_type: str) -> Circuit:
        """The circuit of `head_type` on `spec` (found now if not cached); ProbeError in one line when the
        model has no label table or no views."""
        reason = self.facts.unusable(spec)
        if reason:
            raise ProbeError(reason)
        table = self.labels_of(spec)
        if table is None:
            raise ProbeError("no labels yet: press 'Label heads' in the atlas first (the circuit starts from "
                             "the type's labelled heads)")
        key = ("circuit", spec, head_type, table_key(table))
        found = self.cache.get(key)
        if found is not None:
            return found
        self.slots.take("the circuit search")  # a search waiting for the model counts too: refused past it
        try:
            return self.cache.get_or_compute(
                key, lambda: find_circuit(self.facts.model(spec), head_type, table,
                                          CircuitConfig(examples=EXAMPLES)), self.gate.foreground)
        finally:
            self.slots.give()

    def task_payload(self, spec: str, filename: str, data: bytes) -> dict:
        """The graph of an uploaded task's circuit on `spec` (every edge scored by EAP-IG on the logit
        difference; scored now unless the same file was scored on this model before): the payload views.js
        draws. A file that is not .csv/.jsonl, or a bad row, is refused in one line."""
        reason = self.facts.unusable(spec)
        if reason:
            raise ProbeError(reason)
        suffix, shown = Path(str(filename or "")).suffix.lower(), str(filename or "the upload")[:60]
        if suffix not in TASK_SUFFIXES:
            raise ProbeError(f"{shown}: upload a task as .csv or .jsonl (clean, corrupted, correct, "
                             "incorrect; docs/circuits.md)")
        key = ("task", spec, hashlib.sha256(data).hexdigest())
        found = self.cache.get(key)
        if found is not None:
            return found
        self.slots.take("the task's circuit")

        def compute() -> dict:
            from probe.circuits.task_search import task_circuit

            with tempfile.TemporaryDirectory() as folder:  # load_task reads a file: the upload's bytes, once
                path = Path(folder) / f"task{suffix}"
                path.write_bytes(data)
                try:
                    return task_circuit(self.facts.model(spec), path).payload()
                except ProbeError as error:  # named as uploaded, not by the server's scratch path
                    raise ProbeError(str(error).replace(str(path), shown)) from None

        try:
            return self.cache.get_or_compute(key, compute, self.gate.foreground)
        finally:
            self.slots.give()
