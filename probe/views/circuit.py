"""`probe.show_circuit`: a head type's circuit (:func:`probe.circuits.find_circuit`) as a layered graph under
a notebook cell, in the one-file report and in ``probe circuit --html`` — drawn by the package's own views.js
(``mountCircuit``, inlined: offline), the same code the app's circuit panel runs.

Layers run left to right and a head's row is its index; nodes are coloured by their labels (the type's heads
ringed), edges by mode (Q, K, V) and as wide as their path-patching effect (their composition score where not
patched); hovering an edge gives its numbers, a click on a head lists its edges (in the app it also selects
the head). "candidate edges too" shows the candidates that did not beat their controls, dashed.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from probe.circuits.circuit import Circuit, CircuitConfig, find_circuit, shipped_labels
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



def write_circuit_page(circuit: Circuit, path: str | Path) -> Path:
    """One HTML page of `circuit`'s graph and findings that opens from file:// with no network."""
    return CircuitView(circuit).save_page(path)


def show_circuit(loaded, head_type: str | None = None, labels=None, config: CircuitConfig | None = None,
                 circuit: Circuit | None = None) -> CircuitView:
    """The circuit of a head type as an interactive graph for a notebook cell (offline).

    Parameters
    ----------
    loaded : probe.models.LoadedModel or str
        A loaded model, or what :func:`probe.load` takes; ignored with `circuit`.
    head_type : str
        The head type (``induction``, ``coreference``, …).
    labels : pandas.DataFrame or str, optional
        A label table (or its file); default: a zoo model's shipped table, else the type is labelled first.
    config : probe.circuits.CircuitConfig, optional
        Candidates, probes and controls.
    circuit : probe.circuits.Circuit, optional
        A circuit already found: drawn as it is.

    Returns
    -------
    CircuitView
        Draws itself under the cell; ``.circuit`` holds the numbers; ``.save("x.html")``.

    Examples
    --------
    >>> probe.show_circuit("zoo:induction", "induction")  # L0H1 (and L0H3) → L1H0–L1H3 by K-composition
    <probe circuit: zoo:induction · induction, 4 receivers, 8 edges in the circuit>
    """
    if circuit is None:
        if head_type is None:
            raise ProbeError("show_circuit needs a head_type (e.g. 'induction') or a circuit")
        if isinstance(loaded, (str, Path)):
            loaded = load(str(loaded))
        labels = labels if labels is not None else shipped_labels(loaded.name)
        circuit = find_circuit(loaded, head_type, labels, config or CircuitConfig())
    return CircuitView(circuit)


__all__ = ["CircuitView", "circuit_fragment", "show_circuit", "write_circuit_page"]
