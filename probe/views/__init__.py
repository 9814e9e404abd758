"""Views of attention for a notebook, a file and the app: one view layer, three hosts.

* :func:`show` — the grid of every head, one head's α with the token view, keys to step heads and layers,
  drawn under a notebook cell by the package's own ``views.js`` (inlined: offline); ``.save("x.svg" | "x.png"
  | "x.html")``.
* :func:`label_table` — the labels table as a readable, sortable HTML table.
* :func:`show_circuit` — a head type's circuit (:mod:`probe.circuits`), or a task's circuit over every edge
  (``probe circuit --task``), as a layered graph.
* :func:`show_structure` — a protein model's attention on the 3D structure (3Dmol.js, inlined): a head's top
  pairs as edges through the fold, residues coloured by the attention from / to a residue, the true and the
  predicted contacts, a pick in 3D selecting a pair.
* :func:`write_report` — one self-contained HTML file: card, atlas, labelled heads, every head's thumbnail, a
  few full maps, and for protein models the contact maps, the head leaderboard and the 3D view.

The clientside code (``probe/views/assets/views.js``) is the same file the Dash app's explorer loads
(:mod:`probe.views.bundle`). Nothing heavy happens at import.

Examples
--------
>>> import tempfile
>>> view = probe.show(loaded, "rada ruga buse rada ruga buse")  # in a notebook: drawn under the cell
>>> view
<probe view: zoo:induction, 7 tokens, 2×4 heads, 8 full maps of 7² cells>
>>> with tempfile.TemporaryDirectory() as folder:
...     svg = view.save(f"{folder}/L0H1.svg", head="L0H1").read_text()
>>> svg.startswith("<svg"), "L0H1" in svg
(True, True)
"""

from __future__ import annotations

from probe.lazy import lazy_exports

_LAZY = {
    "show": "probe.views.view",
    "View": "probe.views.view",
    "show_structure": "probe.views.structure_view",
    "StructureView": "probe.views.structure_view",
    "label_table": "probe.views.tables",
    "LabelTable": "probe.views.tables",
    "show_circuit": "probe.views.circuit",
    "CircuitView": "probe.views.circuit",
    "write_report": "probe.views.report",
    "report_html": "probe.views.report",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
