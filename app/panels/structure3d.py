"""The 3D structure view in the protein panel: the uploaded structure with the selected head's attention
(probe/views/assets/structure.js, 3Dmol.js), linked both ways with the 2D residue maps through the app's pair
store and with every panel through the selected-head store.

app/panels/proteins.py places :func:`layout` under the residue maps, calls :func:`register` and fills the
:data:`PAYLOAD` store from ``ProteinStore.structure_payload`` (docs/views.md, "The 3D view in the
dashboard"); the clientside bridge is ``app/assets/structure3d.js``. :func:`payload` builds the same payload
from an upload's bytes, for a host without a protein store.
"""

from __future__ import annotations

from dash import ClientsideFunction, Input, Output, dcc, html

from probe.errors import ProbeError

from .. import ids

CONTAINER = "protein-structure3d"  # the view's element (structure.js mounts in it)
DRAWN = CONTAINER + "-drawn"  # Store: the bridge's answer (the payload key drawn, "missing" without scripts)
PAYLOAD = "protein-structure3d-data"  # Store: probe.views.structure3d.structure_payload of the shown protein


def layout() -> html.Div:
    """The view's container, its payload store and the bridge's output; the container names the stores a pick
    in 3D writes (the residue pair of the 2D maps, the selected head)."""
    return html.Div([
        dcc.Store(id=PAYLOAD), dcc.Store(id=DRAWN),
        html.Div(id=CONTAINER, className="structure3d",
                 **{"data-pair-store": ids.PAIR, "data-selected-store": ids.SELECTED}),
    ])


def register(app) -> None:
    """The clientside callback that mounts the view and follows the theme, the 2D pair and the selected head
    (``window.dash_clientside.probeStructure.render`` in app/assets/structure3d.js)."""
    app.clientside_callback(ClientsideFunction("probeStructure", "render"), Output(DRAWN, "data"),
                            Input(PAYLOAD, "data"), Input(ids.THEME, "checked"), Input(ids.PAIR, "data"),
                            Input(ids.SELECTED, "data"))


def payload(loaded, structure: bytes, filename: str = "", chain: str | None = None, theme: str = "light",
            heads=None) -> dict:
    """The view's payload for an uploaded structure (the heads: every head when their residue maps fit the
    view's budget, else the best by long-range P@L; :func:`probe.views.structure_view.show_structure`).

    Raises ProbeError for a file that is not a protein structure, a chain it lacks, or a model that is not a
    protein model; run it under the app's inference gate (one forward pass at a time)."""
    from probe.proteins.structure import read_structure
    from probe.views.structure_view import show_structure

    if not structure:
        raise ProbeError("no structure: upload a .pdb or .cif file for the 3D view")
    fmt = "cif" if filename.lower().endswith((".cif", ".mmcif")) else "pdb"
    parsed = read_structure(structure, chain=chain, fmt=fmt)
    return show_structure(loaded, parsed, heads=heads, theme=theme).payload()


__all__ = ["CONTAINER", "DRAWN", "PAYLOAD", "layout", "payload", "register"]
