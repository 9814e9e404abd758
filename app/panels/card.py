"""The architecture card panel: the selected model's attention variant, heads, positions and KV-cache size."""

from __future__ import annotations

from dash import Input, Output, html

from probe.card import architecture_card

from .. import ids
from ..errors import guarded
from ..service import Service


def layout() -> html.Div:
    return html.Div(className="panel card-panel", children=[
        html.H2("Architecture card"),
        html.Div(id=ids.CARD_MESSAGE, className="message"),
        html.Div(id=ids.CARD),
    ])


def card_table(service: Service, spec: str) -> html.Table:
    """The card of `spec` (from its config) as a two-column table."""
    card = architecture_card(service.model(spec).config)
    return html.Table(className="card", children=[
        html.Tbody([html.Tr([html.Th(name), html.Td(value)]) for name, value in card.rows()])])


def register(app, service: Service) -> None:
    @app.callback(Output(ids.CARD, "children"), Output(ids.CARD_MESSAGE, "children"), Input(ids.MODEL, "value"))
    @guarded(outputs=2, message=1)
    def _card(spec):
        return card_table(service, spec), ""
