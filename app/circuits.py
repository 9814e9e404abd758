"""The circuit panel's data: a head type's circuit (:func:`probe.circuits.find_circuit`) on a served model's
label table, computed once per (model, type, label table) through the inference gate and kept while the table
stays the same."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pandas as pd

from probe.circuits import CircuitConfig, find_circuit
from probe.circuits.circuit import Circuit
from probe.errors import ProbeError

from .facts import ModelFacts
from .gate import InferenceGate

EXAMPLES = 16  # paired probes per circuit in the app (probe circuit --examples)


class CircuitStore:
    """Circuits of the served models, by (spec, head type), for the label table each was found on.

    Parameters
    ----------
    facts : ModelFacts
        The models.
    gate : InferenceGate
        One forward pass at a time in the process (the patching forwards pass it as a view).
    labels_of : callable
        spec -> the model's label table or None.
    """

    def __init__(self, facts: ModelFacts, gate: InferenceGate,
                 labels_of: Callable[[str], pd.DataFrame | None]) -> None:
        self.facts, self.gate, self.labels_of = facts, gate, labels_of
        self._found: dict[tuple[str, str], tuple[int, Circuit]] = {}  # key -> (id of its table, circuit)
        self._lock = threading.Lock()

    def cached(self, spec: str, head_type: str) -> Circuit | None:
        """The circuit already found for the model's current label table, or None."""
        table = self.labels_of(spec)
        with self._lock:
            found = self._found.get((spec, head_type))
        return found[1] if found is not None and table is not None and found[0] == id(table) else None

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
        found = self.cached(spec, head_type)
        if found is not None:
            return found
        loaded = self.facts.model(spec)
        with self.gate.foreground():
            found = find_circuit(loaded, head_type, table, CircuitConfig(examples=EXAMPLES))
        with self._lock:
            self._found[(spec, head_type)] = (id(table), found)
        return found
