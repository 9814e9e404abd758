"""`probe.show_circuit`: a head type's circuit (:func:`probe.circuits.find_circuit`), or a task's circuit over
every edge of the model (:func:`probe.circuits.task_search.task_circuit`), as a layered graph under a
notebook cell, in the one-file report and in ``probe circuit --html`` — drawn by the package's own views.js
(``mountCircuit``, inlined: offline), the same code the app's circuit panel runs.

Layers run left to right and a head's row is its index; nodes are coloured by their labels (the type's heads
ringed), edges by mode (Q, K, V) and as wide as their path-patching effect (their composition score where not
patched); hovering an edge gives its numbers, a click on a head lists its edges (in the app it also selects
the head). "candidate edges too" shows the candidates that did not beat their controls, dashed.

A task's circuit (:class:`TaskCircuitView`) runs left to right from the embeddings through each layer's heads
and MLP to the logits; an edge is coloured by its score's sign, as wide as |score|, dashed by the input it
enters (q solid, k dashed, v dotted, at that input's port); the circuit is drawn, the strongest other edges
on request (:meth:`~probe.circuits.task_search.TaskCircuit.payload`: a few hundred of a 32k-edge model);
hovering an edge gives its score and rank; the faithfulness curve is drawn beside it, the circuit's size
marked.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from probe.circuits.circuit import Circuit, CircuitConfig, find_circuit, shipped_labels
from probe.circuits.task import Task
from probe.circuits.task_search import TaskCircuit, task_circuit
from probe.errors import ProbeError
from probe.models import load
from probe.views.bundle import inline_script, mounting_html
from probe.views.html_view import HtmlView


def circuit_fragment(payload: dict, element_id: str | None = None) -> str:
    """HTML that mounts the circuit graph of `payload` (:meth:`probe.circuits.Circuit.payload`) where it is
    placed: the style, the data, views.js and the call."""
    return mounting_html("circuit", payload, inline_script(), "window.probeViews.mountAll();", element_id)


@dataclass(frozen=True, eq=False)
class CircuitView(HtmlView):
    """What :func:`show_circuit` returns: draws itself in a notebook (``_repr_html_``), saves as HTML.

    Attributes
    ----------
    circuit : probe.circuits.Circuit
        The circuit drawn (its ``edges``, ``nodes`` and ``lines()`` are there to read).
    """

    circuit: Circuit
    kind = "circuit view"

    def html(self, element_id: str | None = None) -> str:
        """A self-contained HTML fragment of the graph."""
        return circuit_fragment(self.circuit.payload(), element_id)

    def page_title(self) -> str:
        return f"probe circuit · {self.circuit.model} · {self.circuit.head_type}"

    def page_body(self) -> str:
        title = f"circuit · {html.escape(self.circuit.head_type)} · {html.escape(self.circuit.model)}"
        return (f"<h1>{title}</h1>" + circuit_fragment(self.circuit.payload(), "probe-circuit-view"))

    def __repr__(self) -> str:
        found = self.circuit.found
        return (f"<probe circuit: {self.circuit.model} · {self.circuit.head_type}, "
                f"{len(self.circuit.receivers)} receivers, {len(found)} edges in the circuit>")



@dataclass(frozen=True, eq=False)
class TaskCircuitView(HtmlView):
    """A task's circuit drawn (what :func:`show_circuit` returns for a
    :class:`~probe.circuits.task_search.TaskCircuit`): ``_repr_html_`` under a cell, ``save("x.html")``.

    Attributes
    ----------
    found : probe.circuits.task_search.TaskCircuit
        The scored edges, the curve and the circuit (``found.table``, ``found.curve``, ``found.lines()``).
    top : int
        The strongest edges outside the circuit that the toggle adds (the rest are counted, not drawn).
    """

    found: TaskCircuit
    top: int = 300
    kind = "circuit view"

    def html(self, element_id: str | None = None) -> str:
        """A self-contained HTML fragment of the graph and its faithfulness curve."""
        return circuit_fragment(self.found.payload(self.top), element_id)

    def page_title(self) -> str:
        return f"probe circuit · {self.found.model} · task"

    def page_body(self) -> str:
        title = f"circuit · task · {html.escape(self.found.model)}"
        return f"<h1>{title}</h1>" + circuit_fragment(self.found.payload(self.top), "probe-circuit-view")

    def __repr__(self) -> str:
        size = "no circuit" if self.found.size is None else f"{self.found.size} edges in the circuit"
        return f"<probe task circuit: {self.found.model}, {len(self.found.table)} edges scored, {size}>"


def write_circuit_page(circuit: Circuit | TaskCircuit, path: str | Path) -> Path:
    """One HTML page of `circuit`'s graph and findings (a head type's or a task's) that opens from file://
    with no network."""
    view = TaskCircuitView(circuit) if isinstance(circuit, TaskCircuit) else CircuitView(circuit)
    return view.save_page(path)


def show_circuit(loaded, head_type: str | None = None, labels=None, config: CircuitConfig | None = None,
                 circuit: Circuit | TaskCircuit | None = None, task: Task | str | Path | None = None,
                 top: int = 300) -> CircuitView | TaskCircuitView:
    """The circuit of a head type, or of a task over every edge, as an interactive graph for a notebook cell
    (offline).

    Parameters
    ----------
    loaded : probe.models.LoadedModel or str or TaskCircuit
        A loaded model, or what :func:`probe.load` takes; ignored with `circuit`. A
        :class:`~probe.circuits.task_search.TaskCircuit` (what ``task_circuit`` returned) is drawn as it is.
    head_type : str
        The head type (``induction``, ``coreference``, …).
    labels : pandas.DataFrame or str, optional
        A label table (or its file); default: a zoo model's shipped table, else the type is labelled first.
    config : probe.circuits.CircuitConfig, optional
        Candidates, probes and controls.
    circuit : probe.circuits.Circuit or TaskCircuit, optional
        A circuit already found: drawn as it is.
    task : probe.circuits.task.Task or str or Path, optional
        Your own task (a Task, or its CSV/JSONL file): every edge scored with
        :func:`~probe.circuits.task_search.task_circuit`'s defaults (EAP-IG, logit difference), instead of
        a head type.
    top : int
        A task's circuit: the strongest other edges the "… other edges too" toggle adds.

    Returns
    -------
    CircuitView or TaskCircuitView
        Draws itself under the cell; ``.circuit`` (``.found`` for a task) holds the numbers;
        ``.save("x.html")``.

    Examples
    --------
    >>> probe.show_circuit("zoo:induction", "induction")  # L0H1 (and L0H3) → L1H0–L1H3 by K-composition
    <probe circuit: zoo:induction · induction, 4 receivers, 8 edges in the circuit>
    >>> from probe.circuits.task import repeat_task
    >>> loaded = probe.load("zoo:induction")
    >>> probe.show_circuit(loaded, task=repeat_task(loaded.tokenizer, pairs=4))  # doctest: +ELLIPSIS
    <probe task circuit: zoo:induction, 110 edges scored, ... edges in the circuit>
    """
    if isinstance(loaded, TaskCircuit) or isinstance(circuit, TaskCircuit):
        return TaskCircuitView(circuit if isinstance(circuit, TaskCircuit) else loaded, top)
    if task is not None:
        if head_type is not None:
            raise ProbeError("show_circuit: give a head_type or a task, not both")
        if isinstance(loaded, (str, Path)):
            loaded = load(str(loaded))
        return TaskCircuitView(task_circuit(loaded, task), top)
    if circuit is None:
        if head_type is None:
            raise ProbeError("show_circuit needs a head_type (e.g. 'induction') or a circuit")
        if isinstance(loaded, (str, Path)):
            loaded = load(str(loaded))
        labels = labels if labels is not None else shipped_labels(loaded.name)
        circuit = find_circuit(loaded, head_type, labels, config or CircuitConfig())
    return CircuitView(circuit)


__all__ = ["CircuitView", "TaskCircuitView", "circuit_fragment", "show_circuit", "write_circuit_page"]
