"""The dashboard's panels: each module owns its layout (`layout(...)`) and its callbacks
(`register(app, service)`).

page      model choice, head type, image format, URL state, model facts (everything page-wide)
atlas     the layer × head grid of scores or labels, labelling on demand
circuit   the head type's circuit (which earlier heads feed its labelled heads) as a graph
grid      every head's pattern on the current input as thumbnails
explorer  one head's attention: heatmap, token view, line view, overlay, downloads
proteins  predicted and true contacts beside one head's APC map, per-head leaderboard
card      the architecture card (MHA/GQA/MQA/MLA, KV-cache bytes) of the model
"""

from __future__ import annotations

import dash_mantine_components as dmc
from dash import dcc, html

from .. import figures

# DataTable cells and headers in the page's theme (inline styles read the theme's CSS variables)
TABLE_CELL = {"backgroundColor": "var(--mantine-color-body)", "color": "var(--mantine-color-text)",
              "border": "1px solid var(--mantine-color-default-border)"}
TABLE_HEADER = {"backgroundColor": "var(--mantine-color-default-hover)", "color": "var(--mantine-color-text)"}


def card_panel(title, children, className: str = "", extra=None) -> dmc.Card:
    """One panel of the page: a card with a title row (and optional controls at its right)."""
    head = dmc.Group([dmc.Title(title, order=4), *(extra or [])], justify="space-between", mb="xs")
    return dmc.Card([head, html.Div(children)], withBorder=True, shadow="sm", radius="md", padding="md",
                    className=("panel-card " + className).strip())


def radio(component_id: str, options, value) -> dcc.RadioItems:
    return dcc.RadioItems(id=component_id, options=list(options), value=value, inline=True,
                          labelStyle={"marginRight": "12px"})


def graph(component_id: str, message: str = "loading…", atlas: bool = False,
          theme: str = "light") -> dcc.Graph:
    return dcc.Graph(id=component_id,
                     config=figures.graph_config("png", f"probe_{component_id}", atlas=atlas),
                     figure=figures.empty_figure(message, theme))


def head_or_default(selected) -> dict:
    """The selection store's value, or L0H0 (the service checks it against the model before use)."""
    return selected if isinstance(selected, dict) else {"layer": 0, "head": 0}
