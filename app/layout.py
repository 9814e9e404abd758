"""The page: page-wide controls on top; the head atlas and the grid of every head beside the attention explorer;
the proteins below; the architecture card at the end. Built per request, from the URL's query (shared links)."""

from __future__ import annotations

from dash import dcc, html

from . import ids
from .panels import atlas, card, explorer, grid, page, proteins
from .service import Service


def page_layout(service: Service, query=None) -> html.Div:
    """The whole page for one visit; `query` is the URL's query (model, type, layer, head, text, ids)."""
    state = page.initial_state(service, query or {})
    config = service.config
    text = state["text"]
    if text is None or len(text) > page.URL_TEXT_CHARS:
        text = explorer.example_text(service.model(state["model"]))
    return html.Div([
        dcc.Store(id=ids.SELECTED, data={"layer": state["layer"], "head": state["head"]}),
        dcc.Store(id=ids.INPUT), dcc.Store(id=ids.LABEL_VERSION, data=service.finished_jobs()),
        dcc.Store(id=ids.PROTEIN), dcc.Store(id=ids.PAIR),
        page.layout(service, state),
        html.Div(className="row", children=[
            html.Div([atlas.layout(), grid.layout()], className="column left-column"),
            html.Div([explorer.layout(text, state["as_ids"])], className="column right-column"),
        ]),
        proteins.layout(config.upload_bytes, config.max_residues),
        card.layout(),
    ])


def register(app, service: Service) -> None:
    """Every panel's callbacks."""
    for panel in (page, atlas, grid, explorer, proteins, card):
        panel.register(app, service)
