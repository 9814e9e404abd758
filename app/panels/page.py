"""Page-wide controls and state: the header (title, glossary, theme), the sidebar (model, head type, head
selector, toolbar image format, the model's facts), and the URL that holds every state — model, head type,
head, overlay, colour scale, zoom, pinned token, and the input (short text in the link, a long one through a
server-side key) — so a reload or a shared link restores it. A link that names something unknown gets a
visible note."""

from __future__ import annotations

from urllib.parse import urlencode

import dash_mantine_components as dmc
from dash import Input, Output, State, dcc, html, no_update

from probe.heads.registry import REGISTRY
from probe.naming import display_name, file_stem
from probe.views.reading import is_labelled

from .. import figures, ids
from ..errors import guarded
from ..panel import Panel, radio
from ..service import Service
from .glossary import glossary_button

URL_TEXT_CHARS = 300  # inputs up to this long go into the URL as text; longer ones through a server-side key
GRAPHS = (ids.ATLAS, ids.HEATMAP, ids.LINES, ids.CONTACTS, ids.HEAD_MAP)


def model_label(spec: str) -> str:
    """all-MiniLM-L6-v2 by name, a local directory by its folder's name; hub ids and zoo:NAME as given."""
    return display_name(spec)


# what each figure shows, in the name its toolbar's camera saves it under
IMAGE_KINDS = {ids.ATLAS: "atlas", ids.HEATMAP: "attention", ids.LINES: "lines", ids.CONTACTS: "contacts",
               ids.HEAD_MAP: "head-map"}


def image_name(spec: str | None, graph: str, head_type: str | None = None) -> str:
    """The file name (no extension) a figure is downloaded as: the model's display name, the head type for the
    atlas, and what the figure shows ("all-MiniLM-L6-v2_previous_token_atlas"); the head is in the figure's
    title (the heatmap and the line view name it there)."""
    parts = [display_name(spec) if spec else "probe", (head_type or "") if graph == ids.ATLAS else "",
             IMAGE_KINDS.get(graph, graph)]
    return file_stem("_".join(part for part in parts if part))


def readable(head_type: str) -> str:
    """"previous_token" -> "previous token" (the snake_case name stays in the tooltip and the URL)."""
    return head_type.replace("_", " ")


def head_types_for(service: Service, spec: str) -> tuple[str, ...]:
    """The head types that apply to the model: protein models have no text-only types (coreference,
    delimiter)."""
    from probe.heads.registry import REGISTRY
    from probe.models import ModelKind

    if service.facts.unusable(spec):
        return tuple(REGISTRY)
    kind = service.facts.model(spec).kind
    # no type is defined for it (probe label refuses it): the bidirectional
    if service.facts.is_seq2seq(spec):
        kind = ModelKind.MASKED_LM  # text types, to outline targets on the encoder's tokens; atlas says why
    return tuple(name for name, spec_ in REGISTRY.items() if kind in spec_.kinds)


def type_options(types) -> list[dict]:
    """Readable labels ("previous token"); plain strings, since the options are replaced by a callback when
    the model changes (components inside options do not survive that in the renderer). The snake_case names
    and descriptions are in the glossary and the labels' tooltip (the radio list's title)."""
    return [{"label": readable(name), "value": name} for name in types]


def types_tooltip(types) -> str:
    return "\n".join(f"{name}: {REGISTRY[name].description}" for name in types if name in REGISTRY)


SHOWCASE = ("induction", "previous_token", "next_token", "coreference", "duplicate_token", "delimiter")


def default_head_type(types, table=None) -> str:
    """The type the page opens on: the first of SHOWCASE with a labelled head in `table` (a real model opens
    on a pattern it has, never on an empty atlas); without labels induction where it applies, else the first
    type."""
    if table is not None and not table.empty and "label" in table.columns:
        labelled = {str(kind) for kind, label in zip(table["head_type"], table["label"], strict=True)
                    if is_labelled(label)}
        for name in (*SHOWCASE, *types):
            if name in types and name in labelled:
                return name
    return "induction" if "induction" in types else types[0]


def initial_state(service: Service, query) -> dict:
    """The page's first state from the URL's query (a dict-like): each unknown or malformed value is replaced
    by its default and named in a visible note, never an error page."""
    notes = []
    usable = service.registry.usable_specs or service.facts.specs
    spec = service.registry.spec_of(query.get("model") or usable[0])  # a served name (or the spec itself)
    if spec not in service.facts.specs:
        notes.append(f"model {spec!r} is not served here: showing {model_label(usable[0])}")
        spec = usable[0]
    types = head_types_for(service, spec)
    default = default_head_type(types, None if service.facts.unusable(spec) else service.labels.table(spec))
    head_type = query.get("type") or default
    if head_type not in types:
        notes.append(f"head type {head_type!r} does not apply to {model_label(spec)}: showing {default}")
        head_type = default
    layer, head = _default_head(service, spec, head_type)
    if "layer" in query or "head" in query:
        try:
            layer, head = service.facts.head_of(spec,
                                          {"layer": query.get("layer", 0), "head": query.get("head", 0)})
        except Exception:  # noqa: BLE001 - a bad link is a note, not an error page
            fallback = _default_head(service, spec, head_type)
            notes.append(f"head L{query.get('layer', 0)}H{query.get('head', 0)} is not a head of "
                         f"{model_label(spec)}: showing {service.facts.head_label(spec, *fallback)}")
            layer, head = fallback
    text = query.get("text")
    key = query.get("input")
    if key:
        text = service.texts.get(key)
        if text is None:
            notes.append(f"input {key!r} is no longer on this server (it restarted?): showing an example")
    zoom = None
    if query.get("zoom"):
        try:
            q0, q1, k0, k1 = (int(part) for part in str(query["zoom"]).split(","))
            zoom = {"q0": q0, "q1": q1, "k0": k0, "k1": k1}
            if not (0 <= q0 < q1 and 0 <= k0 < k1):
                raise ValueError
        except ValueError:
            notes.append(f"zoom {query['zoom']!r} is not q0,q1,k0,k1: showing the whole input")
            zoom = None
    token = None
    if query.get("token"):
        try:
            token = int(query["token"])
            if token < 0:
                raise ValueError
        except ValueError:
            notes.append(f"token {query['token']!r} is not a position: no token pinned")
            token = None
    direction = query.get("dir") or "from"
    if direction not in ("from", "to"):
        notes.append(f"token direction {direction!r} is not from or to: from")
        direction = "from"
    theme = query.get("theme") or "light"
    if theme not in ("light", "dark"):
        notes.append(f"theme {theme!r} is not light or dark: light")
        theme = "light"
    return {"model": spec, "head_type": head_type, "layer": layer, "head": head, "text": text,
            "as_ids": query.get("ids") == "1", "overlay": query.get("overlay") == "1",
            "scale": query.get("scale") == "head", "zoom": zoom, "token": token, "direction": direction,
            "theme": theme,
            "note": ("This link named something this server does not have — " + "; ".join(notes) + ".")
            if notes else ""}


def _default_head(service: Service, spec: str, head_type: str) -> tuple[int, int]:
    """The head the page opens on: the best-scoring labelled head of the type (else the best score), the
    model's first head with α without labels (L0H0; a hybrid's first softmax layer), L0H0 for a card-only
    model."""
    if service.facts.unusable(spec):
        return 0, 0
    first = service.facts.model(spec).heads[0]
    table = service.labels.table(spec)
    if table is None or table.empty:
        return first
    rows = table[table["head_type"].astype(str) == head_type]
    if rows.empty:
        return first
    if "label" in rows.columns:
        labelled = rows[[is_labelled(value) for value in rows["label"]]]
        rows = labelled if not labelled.empty else rows
    best = rows.sort_values("score", ascending=False).iloc[0]
    return int(best["layer"]), int(best["head"])


def labelled_opening(service: Service, spec: str, head_type: str, selected) -> dict | None:
    """Where the page moves when labels arrive (a labelling job of `spec` just finished): from the head it
    opened on without labels (the model's first head, L0H0) to the best labelled head of the type — None
    (stay) when the user has moved elsewhere, when the model has no finished job or no labelled head of the
    type."""
    if service.facts.unusable(spec) or not isinstance(selected, dict) or not isinstance(head_type, str):
        return None
    job = service.labels.jobs.job(spec)
    first = service.facts.model(spec).heads[0]
    if job is None or job.state != "done" or (selected.get("layer"), selected.get("head")) != tuple(first):
        return None
    table = service.labels.table(spec)
    if table is None or "label" not in table.columns or not any(
            is_labelled(label) for kind, label in zip(table["head_type"].astype(str), table["label"],
                                                      strict=True) if kind == head_type):
        return None
    best = _default_head(service, spec, head_type)
    return {"layer": best[0], "head": best[1]} if tuple(best) != tuple(first) else None


def url_search(service: Service, spec: str, head_type: str, selected: dict | None, store: dict | None,
               overlay=None, scale=None, zoom: dict | None = None, focus: dict | None = None,
               theme: str | None = None, direction: str | None = None) -> str:
    """The query string of the current state; an input longer than URL_TEXT_CHARS is saved on the server and
    the link carries its key."""
    params = {"model": service.registry.name_of(spec), "type": head_type}  # its served name: no path
    if isinstance(selected, dict):
        params.update(layer=selected.get("layer", 0), head=selected.get("head", 0))
    if isinstance(store, dict) and store.get("model") == spec:
        text = store.get("text") or ""
        if len(text) <= URL_TEXT_CHARS:
            params["text"] = text
        else:
            params["input"] = service.texts.save(text)
        if store.get("as_ids"):
            params["ids"] = "1"
    if overlay:
        params["overlay"] = "1"
    if scale:
        params["scale"] = "head"
    if isinstance(zoom, dict) and all(isinstance(zoom.get(k), int) for k in ("q0", "q1", "k0", "k1")):
        params["zoom"] = ",".join(str(zoom[k]) for k in ("q0", "q1", "k0", "k1"))
    if isinstance(focus, dict) and isinstance(focus.get("index"), int):
        params["token"] = focus["index"]
    if direction == "to":
        params["dir"] = "to"
    if theme == "dark":
        params["theme"] = "dark"
    return "?" + urlencode(params)


def header(state: dict) -> dmc.Group:
    return dmc.Group(justify="space-between", h="100%", px="md", children=[
        dmc.Group(
            [dmc.Title("probe", order=3), dmc.Text("what each attention head does", c="dimmed", size="sm")]),
        dmc.Group([
            dmc.Switch(id=ids.THEME, label="dark", size="sm", checked=state["theme"] == "dark"),
        ]),
    ])


def sidebar(service: Service, state: dict) -> dmc.Stack:
    spec = state["model"]
    options = [{"label": model_label(s), "value": service.registry.name_of(s)} for s in service.facts.specs]
    return dmc.Stack(gap="sm", children=[
        dcc.Location(id=ids.URL, refresh=False),
        dcc.Store(id=ids.SHAPE, data=_shape(service, spec)),
        dcc.Store(id=ids.KEYS_SINK), dcc.Store(id=ids.IMAGE_APPLIED),
        glossary_button(),
        dmc.Text("Model", fw=600, size="sm"),
        dcc.RadioItems(id=ids.MODEL, options=options, value=service.registry.name_of(spec),
                       className="radio-list"),
        html.Div(service.facts.describe(spec), id=ids.MODEL_INFO, className="note"),
        dmc.Text("Head type", fw=600, size="sm"),
        html.Div(dcc.RadioItems(id=ids.HEAD_TYPE, options=type_options(head_types_for(service, spec)),
                                value=state["head_type"], className="radio-list"),
                 title=types_tooltip(head_types_for(service, spec))),
        dmc.Text("Head", fw=600, size="sm"),
        dmc.Group(gap=4, children=[
            html.Button("◀ layer", id=ids.LAYER_PREV, className="step", **{"data-step": "layer:-1"}),
            html.Button("layer ▶", id=ids.LAYER_NEXT, className="step", **{"data-step": "layer:1"}),
            html.Button("◀ head", id=ids.HEAD_PREV, className="step", **{"data-step": "head:-1"}),
            html.Button("head ▶", id=ids.HEAD_NEXT, className="step", **{"data-step": "head:1"}),
        ]),
        html.Div("keys: ←/→ head, ↑/↓ layer, Ctrl+Enter run", className="note"),
        dmc.Text("Toolbar camera saves", fw=600, size="sm"),
        radio(ids.IMAGE_FORMAT, [{"label": "PNG", "value": "png"}, {"label": "SVG", "value": "svg"}], "png"),
    ])


def _shape(service: Service, spec: str) -> dict:
    if service.facts.unusable(spec):
        return {"layers": 1, "heads": 1}
    loaded = service.facts.model(spec)
    shape = {"layers": loaded.n_layers, "heads": loaded.n_heads}
    if list(loaded.attention_layers) != list(range(loaded.n_layers)):  # a hybrid: keys step its layers with α
        shape["attention_layers"] = [int(layer) for layer in loaded.attention_layers]
    if service.facts.layer_names(spec):  # an encoder–decoder: "enc.L0", …, "cross.L2" by flat layer number
        shape["layer_names"] = service.facts.layer_names(spec)
    return shape


def register(app, service: Service) -> None:
    @app.callback(Output(ids.MODEL_INFO, "children"), Output(ids.SHAPE, "data"),
                  Output(ids.LIMITS, "children"), Output(ids.CARD_ONLY, "children"),
                  Output(ids.EXPLORER_SECTION, "style"), Output(ids.PROTEIN_SECTION, "style"),
                  Input(ids.MODEL, "value"))
    @guarded(outputs=6, message=3)
    def _model(spec):
        why = service.facts.unusable(spec) or ""
        limits = "" if why else service.facts.limits(spec)
        hidden = {"display": "none"}
        return (service.facts.describe(spec), _shape(service, spec), limits, why, hidden if why else {},
                {} if service.facts.is_protein(spec) else hidden)

    @app.callback(Output(ids.SELECTED, "data", allow_duplicate=True), Output(ids.HEAD_TYPE, "options"),
                  Output(ids.HEAD_TYPE, "value"), Output(ids.PAGE_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.MODEL, "value"), State(ids.HEAD_TYPE, "value"), prevent_initial_call=True)
    @guarded(outputs=4, message=3)
    def _model_changed(spec, head_type):
        types = head_types_for(service, spec)
        head_type = head_type if head_type in types else default_head_type(
            types, service.labels.table(spec) if not service.facts.unusable(spec) else None)
        layer, head = _default_head(service, spec, head_type)
        return {"layer": layer, "head": head}, type_options(types), head_type, ""

    @app.callback(Output(ids.SELECTED, "data", allow_duplicate=True), Input(ids.LABEL_VERSION, "data"),
                  State(ids.MODEL, "value"), State(ids.HEAD_TYPE, "value"), State(ids.SELECTED, "data"),
                  prevent_initial_call=True)
    def _labels_arrived(_version, spec, head_type, selected):
        try:  # a view's convenience: whatever goes wrong, the selection stays
            moved = labelled_opening(service, spec, head_type, selected)
        except Exception:  # noqa: BLE001
            return no_update
        return moved if moved is not None else no_update

    @app.callback(Output(ids.URL, "search"), Output(ids.PAGE_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.MODEL, "value"), Input(ids.HEAD_TYPE, "value"), Input(ids.SELECTED, "data"),
                  Input(ids.INPUT, "data"), Input(ids.OVERLAY, "value"), Input(ids.ALPHA_SCALE, "value"),
                  Input(ids.ZOOM, "data"), Input(ids.TOKEN_FOCUS, "data"), Input(ids.THEME, "checked"),
                  Input(ids.TOKEN_DIRECTION, "value"), prevent_initial_call=True)
    @guarded(outputs=2, message=1)
    def _url(spec, head_type, selected, store, overlay, scale, zoom, focus, dark, direction):
        return url_search(service, spec, head_type, selected, store, overlay, scale, zoom, focus,
                          "dark" if dark else "light", direction), ""

    @app.callback([Output(graph, "config") for graph in GRAPHS if graph != ids.ATLAS],
                  Input(ids.IMAGE_FORMAT, "value"), Input(ids.MODEL, "value"))
    def _configs(image_format, spec):
        fmt = image_format if image_format in ("png", "svg") else "png"
        return [figures.graph_config(fmt, image_name(spec, graph)) for graph in GRAPHS if graph != ids.ATLAS]

    @app.callback(Output(ids.ATLAS, "config"), Input(ids.IMAGE_FORMAT, "value"), Input(ids.MODEL, "value"),
                  Input(ids.HEAD_TYPE, "value"))
    def _atlas_config(image_format, spec, head_type):
        fmt = image_format if image_format in ("png", "svg") else "png"
        return figures.graph_config(fmt, image_name(spec, ids.ATLAS, head_type), atlas=True)

    # plotly reads the camera's format at click time from the drawn plot: set it there now
    app.clientside_callback(
        "function (fmt) { return window.dash_clientside.probe.setImageFormat(fmt); }",
        Output(ids.IMAGE_APPLIED, "data"), Input(ids.IMAGE_FORMAT, "value"))

    app.clientside_callback(  # mirror the selection for the keyboard script (assets/keys.js)
        "function (selected, shape) { window.probeState = {selected: selected, shape: shape}; return null; }",
        Output(ids.KEYS_SINK, "data"), Input(ids.SELECTED, "data"), Input(ids.SHAPE, "data"))

    app.clientside_callback(  # light / dark theme
        "function (dark) { return dark ? 'dark' : 'light'; }",
        Output("mantine-provider", "forceColorScheme"), Input(ids.THEME, "checked"),
        prevent_initial_call=True)


# the page frame (header, sidebar) is placed by app/layout.py itself; here only its callbacks
PANEL = Panel("page", register=register)
