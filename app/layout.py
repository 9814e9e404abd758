"""The page: an app shell (dash-mantine-components) with the page-wide controls in the sidebar — model, head
type, head selector, theme — and one card per panel in the main area: the head atlas and labelled heads, the
circuit of the head type, the grid of every head beside the attention explorer, the proteins (protein models
only) and the architecture card. Built per request, from the URL's query (shared links).

The panels are the list ``PANELS`` of ``app/panels/__init__.py``, read here at every call: each sits in its
place (``Panel.where``, ``app/panel.py``), in the list's order, and registers its callbacks. Nothing here
names a panel but the page frame (``page``: header, sidebar, the URL's state) and the explorer's example
input."""

from __future__ import annotations

import dash_mantine_components as dmc
from dash import dcc, html

from . import figures, ids, panels
from .panel import PLACES, check_panels
from .panels import explorer, page
from .served import ServedNames
from .service import Service


def page_layout(service: Service, query=None):
    """The whole page for one visit; `query` is the URL's query (model, type, layer, head, text or input key,
    overlay, scale, zoom, token)."""
    state = page.initial_state(service, query or {})
    if state["text"] is None and not service.facts.unusable(state["model"]):
        state["text"] = explorer.example_text(service.facts.model(state["model"]))
    protein = service.facts.is_protein(state["model"])
    usable = not service.facts.unusable(state["model"])
    placed = {where: [panel.layout(service, state) for panel in panels.PANELS if panel.where == where]
              for where in PLACES}
    stores = [
        dcc.Store(id=ids.SELECTED, data={"layer": state["layer"], "head": state["head"]}),
        dcc.Store(id=ids.LAYER), dcc.Store(id=ids.LAYER_DATA), dcc.Store(id=ids.PATTERN),
        dcc.Store(id=ids.TOKENS_SINK), dcc.Store(id=ids.THEME_SINK),
        dcc.Store(id=ids.INPUT), dcc.Store(id=ids.LABEL_VERSION, data=service.labels.jobs.finished()),
        dcc.Store(id=ids.PROTEIN), dcc.Store(id=ids.PAIR),
        dcc.Store(id=ids.TEMPLATES, data=figures.template_json()),
    ]
    main = dmc.Stack(gap="md", children=[
        html.Div(state["note"], id=ids.URL_NOTE, className="url-note" if state["note"] else "url-note empty"),
        html.Div(id=ids.PAGE_MESSAGE, className="message"),
        html.Div(service.facts.unusable(state["model"]) or "", id=ids.CARD_ONLY, className="card-only"),
        *placed["top"],
        html.Div(id=ids.EXPLORER_SECTION, style={} if usable else {"display": "none"}, children=[
            html.Div(className="row", children=[
                html.Div(placed["left"], className="column left-column"),
                html.Div(placed["right"], className="column right-column"),
            ]),
        ]),
        html.Div(placed["proteins"], id=ids.PROTEIN_SECTION, style={} if protein else {"display": "none"}),
        *placed["bottom"],
    ])
    shell = dmc.AppShell(
        header={"height": 52}, navbar={"width": 300, "breakpoint": "sm"}, padding="md",
        children=[
            dmc.AppShellHeader(page.header(state)),
            dmc.AppShellNavbar(page.sidebar(service, state), p="md", className="sidebar"),
            dmc.AppShellMain([*stores, main]),
        ])
    return dmc.MantineProvider(shell, id="mantine-provider", forceColorScheme=state["theme"],
                               theme={"fontFamily": "Inter, system-ui, -apple-system, 'Segoe UI', sans-serif",
                                      "primaryColor": "indigo", "defaultRadius": "md"})


def register(app, service: Service) -> None:
    """Every panel's callbacks, with model values as served names at the browser's side (app/served.py); a
    list with a name twice, or an id two panels claim, is refused here, before the app serves anything."""
    check_panels(panels.PANELS, shared_ids={value for name, value in vars(ids).items()
                                            if name.isupper() and isinstance(value, str)})
    served = ServedNames(app, service.registry)
    for panel in panels.PANELS:
        panel.register(served, service)
