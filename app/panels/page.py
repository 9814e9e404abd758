"""Page-wide controls: the model every panel follows, the head type, the toolbar image format, the model's facts and
limits, and the URL that holds the state (model, head type, layer, head, a short input) so a reload restores it."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

from dash import Input, Output, State, dcc, html

from probe.models import ModelKind

from .. import ids
from ..errors import guarded
from ..service import Service
from . import radio

URL_TEXT_CHARS = 300  # inputs up to this long go into the URL; longer ones are left out of it
GRAPHS = (ids.ATLAS, ids.HEATMAP, ids.LINES, ids.CONTACTS, ids.HEAD_MAP)


def model_label(spec: str) -> str:
    """A local directory is shown by its name; hub ids and zoo:NAME as given."""
    path = Path(spec)
    return path.name if path.is_absolute() or spec.startswith(".") else spec


def head_types_for(service: Service, spec: str) -> tuple[str, ...]:
    """The head types that apply to the model: protein models have no coreference (sentences)."""
    from probe.heads.registry import HEAD_TYPES, TOKEN_TYPES

    return tuple(TOKEN_TYPES) if service.model(spec).kind == ModelKind.PROTEIN_MLM else tuple(HEAD_TYPES)


def initial_state(service: Service, query) -> dict:
    """The page's first state from the URL's query (a dict-like): unknown or malformed values fall back to the
    defaults with a one-line note, never an error page."""
    notes = []
    spec = query.get("model") or service.specs[0]
    if spec not in service.specs:
        notes.append(f"the link's model {spec!r} is not served here; showing {service.specs[0]}")
        spec = service.specs[0]
    types = head_types_for(service, spec)
    head_type = query.get("type") or types[0]
    if head_type not in types:
        notes.append(f"the link's head type {head_type!r} does not apply to {spec}")
        head_type = types[0]
    try:
        layer, head = service.head_of(spec, {"layer": query.get("layer", 0), "head": query.get("head", 0)})
    except Exception as error:  # noqa: BLE001 - a bad link is a note, not an error page
        notes.append(str(error))
        layer, head = 0, 0
    return {"model": spec, "head_type": head_type, "layer": layer, "head": head,
            "text": query.get("text"), "as_ids": query.get("ids") == "1", "note": " · ".join(notes)}


def url_search(spec: str, head_type: str, selected: dict | None, store: dict | None) -> str:
    """The query string of the current state (the input only when it is short)."""
    params = {"model": spec, "type": head_type}
    if isinstance(selected, dict):
        params.update(layer=selected.get("layer", 0), head=selected.get("head", 0))
    if isinstance(store, dict) and store.get("model") == spec and len(store.get("text") or "") <= URL_TEXT_CHARS:
        params["text"] = store.get("text") or ""
        if store.get("as_ids"):
            params["ids"] = "1"
    return "?" + urlencode(params)


def layout(service: Service, state: dict) -> html.Div:
    spec = state["model"]
    options = [{"label": model_label(s), "value": s} for s in service.specs]
    return html.Div([
        dcc.Location(id=ids.URL, refresh=False),
        dcc.Store(id=ids.SHAPE, data=_shape(service, spec)),
        dcc.Store(id=ids.KEYS_SINK), dcc.Store(id=ids.IMAGE_APPLIED),
        html.H1("probe — what each attention head does"),
        html.Div(["model: ", radio(ids.MODEL, options, spec)], className="controls"),
        html.Div(id=ids.MODEL_INFO, className="note"),
        html.Div(state["note"], id=ids.PAGE_MESSAGE, className="message"),
        html.Div(["head type: ", radio(ids.HEAD_TYPE, head_types_for(service, spec), state["head_type"])],
                 className="controls"),
        html.Div(["toolbar camera saves: ", radio(ids.IMAGE_FORMAT, [
            {"label": "PNG", "value": "png"}, {"label": "SVG", "value": "svg"}], "png")], className="controls"),
    ])


def _shape(service: Service, spec: str) -> dict:
    loaded = service.model(spec)
    return {"layers": loaded.n_layers, "heads": loaded.n_heads}


def register(app, service: Service) -> None:
    from .. import figures

    @app.callback(Output(ids.MODEL_INFO, "children"), Output(ids.SHAPE, "data"), Output(ids.LIMITS, "children"),
                  Output(ids.PAGE_MESSAGE, "children"), Input(ids.MODEL, "value"))
    @guarded(outputs=4, message=3)
    def _model(spec):
        return service.describe(spec), _shape(service, spec), service.limits(spec), ""

    @app.callback(Output(ids.SELECTED, "data", allow_duplicate=True), Output(ids.HEAD_TYPE, "options"),
                  Output(ids.HEAD_TYPE, "value"), Output(ids.PAGE_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.MODEL, "value"), State(ids.HEAD_TYPE, "value"), prevent_initial_call=True)
    @guarded(outputs=4, message=3)
    def _model_changed(spec, head_type):
        types = head_types_for(service, spec)
        return {"layer": 0, "head": 0}, list(types), head_type if head_type in types else types[0], ""

    @app.callback(Output(ids.URL, "search"), Output(ids.PAGE_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.MODEL, "value"), Input(ids.HEAD_TYPE, "value"), Input(ids.SELECTED, "data"),
                  Input(ids.INPUT, "data"), prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _url(spec, head_type, selected, store):
        from dash import no_update

        return url_search(spec, head_type, selected, store), no_update

    @app.callback([Output(graph, "config") for graph in GRAPHS], Input(ids.IMAGE_FORMAT, "value"))
    def _configs(image_format):
        fmt = image_format if image_format in ("png", "svg") else "png"
        return [figures.graph_config(fmt, f"probe_{graph}") for graph in GRAPHS]

    app.clientside_callback(  # plotly reads the camera's format at click time from the drawn plot: set it there now
        "function (fmt) { return window.dash_clientside.probe.setImageFormat(fmt); }",
        Output(ids.IMAGE_APPLIED, "data"), Input(ids.IMAGE_FORMAT, "value"))

    app.clientside_callback(  # mirror the selection for the keyboard script (assets/keys.js)
        "function (selected, shape) { window.probeState = {selected: selected, shape: shape}; return null; }",
        Output(ids.KEYS_SINK, "data"), Input(ids.SELECTED, "data"), Input(ids.SHAPE, "data"))

