"""The head grid: every head's attention on the current input at a glance (layer rows × head columns).

One forward pass streams every head's α into a pooled grid on the server (`Service.thumbnails`); each head
becomes a small PNG; its atlas score (or label) is the badge. Click a thumbnail to select that head
everywhere.
"""

from __future__ import annotations

import numpy as np
from dash import ALL, Input, Output, State, ctx, html, no_update

from probe.errors import ProbeError
from probe.models import ModelKind
from probe.views import reading

from .. import ids
from ..errors import error_message, guarded
from ..panel import Panel, card_panel
from ..service import Service
from ..thumbnails import thumbnail_uri


def layout() -> html.Div:
    return card_panel("Every head on this input", [
        html.Div("click a thumbnail to select the head · badge: the atlas score, ✓ labelled, grey not "
                 "labelled (hover: why)", className="note"),
        html.Div(id=ids.GRID_MESSAGE, className="message"),
        html.Div(id=ids.GRID, className="head-grid"),
    ], className="grid-panel")


def badges(table, head_type: str) -> dict[tuple[int, int], tuple[str, str, str]]:
    """(layer, head) -> (badge text, css class, why not labelled) from the atlas table: the score, ✓ when
    labelled, grey when not labelled (:func:`probe.views.reading.label_reason` says why; "" when labelled)."""
    if table is None or table.empty:
        return {}
    rows = table[table["head_type"].astype(str) == head_type]
    out = {}
    for row in rows.itertuples(index=False):
        text = f"{float(row.score):.2f}"
        labelled = reading.is_labelled(getattr(row, "label", None))
        css = "badge labelled" if labelled else ("badge faint" if reading.is_grey(row) else "badge")
        out[(int(row.layer), int(row.head))] = (text + (" ✓" if labelled else ""), css,
                                                reading.label_reason(row))
    return out


def grid_children(service: Service, store: dict | None, head_type: str, per_head_max: bool,
                  selected: dict | None):
    """The grid's components for the current input: a header row of head numbers, then one row per layer."""
    if not isinstance(store, dict) or not store.get("ids"):
        return html.Div("run an input to see every head", className="note")
    spec = store.get("model")
    pooled = service.captures.thumbnails(spec, store["ids"])  # [layer head query_bin key_bin]

    causal = service.facts.model(spec).kind == ModelKind.CAUSAL_LM
    n_heads = pooled.shape[1]
    marks = badges(service.labels.table(spec), head_type)
    chosen = (selected or {}).get("layer"), (selected or {}).get("head")
    cells = [html.Div("", className="grid-corner")]
    cells += [html.Div(f"H{head}", className="grid-head") for head in range(n_heads)]
    layers = service.facts.model(spec).attention_layers  # the model's own numbers (a hybrid's softmax layers)
    for row, layer in enumerate(layers):
        cells.append(html.Div(service.facts.layer_label(spec, layer), className="grid-layer"))
        for head in range(n_heads):
            tile = pooled[row, head]
            vmax = head_max(tile, causal) if per_head_max else 1.0
            text, css, why = marks.get((layer, head), ("", "badge", ""))
            name = service.facts.head_label(spec, layer, head)
            cells.append(html.Button(
                [html.Img(src=thumbnail_uri(tile, vmax), alt=name), html.Span(text, className=css)],
                id={"type": ids.THUMB, "layer": layer, "head": head},
                title=f"{name} {head_type} {text}".strip() + (f" · not labelled: {why}" if why else ""),
                className="thumb selected" if (layer, head) == chosen else "thumb", n_clicks=0))
    # columns shrink to fit the panel (every head stays in view at 1280 px), up to 72 px each
    first = "52px" if service.facts.layer_names(spec) else "24px"  # room for "cross.L2"
    style = {"gridTemplateColumns": f"{first} repeat({n_heads}, minmax(0, 72px))"}
    factor = int(np.ceil(len(store["ids"]) / pooled.shape[-1]))
    note = (f"{len(store['ids'])} tokens" + (f", each thumbnail max-pooled {factor}×{factor}"
                                             if factor > 1 else "")
            + (" · colour: each head's own max" if per_head_max else " · colour: α on the fixed 0–1 scale"))
    return [html.Div(cells, className="head-grid-cells", style=style), html.Div(note, className="note")]


def head_max(tile: np.ndarray, causal: bool) -> float:
    """The colour maximum of a thumbnail scaled to its head: causal models leave out the first cell, which
    holds query 0 (it sees only itself, α = 1, on every head)."""
    values = tile.copy()
    if causal and values.size > 1:
        values[0, 0] = 0.0
    return float(max(np.nanmax(values), 1e-6))


def clicked_thumbnail(service: Service, spec: str, trigger, value) -> dict | None:
    """The head of a clicked thumbnail, checked; None when nothing was clicked (components being drawn)."""
    if not value:
        return None
    if not isinstance(trigger, dict):
        raise ProbeError("the click did not name a head; click a thumbnail")
    layer, head = service.facts.head_of(spec, trigger)
    return {"layer": layer, "head": head}


def register(app, service: Service) -> None:
    @app.callback(Output(ids.GRID, "children"), Output(ids.GRID_MESSAGE, "children"),
                  Input(ids.INPUT, "data"), Input(ids.HEAD_TYPE, "value"), Input(ids.ALPHA_SCALE, "value"),
                  Input(ids.LABEL_VERSION, "data"), State(ids.SELECTED, "data"))
    @guarded(outputs=2, message=1)
    def _grid(store, head_type, scale, _version, selected):
        try:
            return grid_children(service, store, head_type, bool(scale), selected), ""
        except Exception as error:  # noqa: BLE001 - the grid is cleared (never the previous model's heads)

            message = error_message(error)
            return html.Div("no grid: " + message, className="note"), message

    @app.callback(Output(ids.SELECTED, "data", allow_duplicate=True),
                  Output(ids.GRID_MESSAGE, "children", allow_duplicate=True),
                  Input({"type": ids.THUMB, "layer": ALL, "head": ALL}, "n_clicks"), State(ids.INPUT, "data"),
                  prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _select(_clicks, store):
        value = ctx.triggered[0]["value"] if ctx.triggered else None
        spec = store.get("model") if isinstance(store, dict) else None
        chosen = clicked_thumbnail(service, spec, ctx.triggered_id, value) if value else None
        return (chosen, "") if chosen else (no_update, no_update)

    app.clientside_callback(
        """function (selected, idList) {
            return idList.map(function (id) {
                return (selected && id.layer === selected.layer && id.head === selected.head) ? "thumb selected"
                                                                                                : "thumb";
            });
        }""",  # noqa: E501 - embedded JavaScript
        Output({"type": ids.THUMB, "layer": ALL, "head": ALL}, "className"),
        Input(ids.SELECTED, "data"), State({"type": ids.THUMB, "layer": ALL, "head": ALL}, "id"))


PANEL = Panel("grid", register=register, where="left", layout=lambda service, state: layout())
