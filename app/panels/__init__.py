"""The dashboard's panels: each module owns its layout (`layout(...)`) and its callbacks (`register(app, service)`).

page      model choice, head type, image format, URL state, model facts (everything page-wide)
atlas     the layer × head grid of scores or labels, labelling on demand
grid      every head's pattern on the current input as thumbnails
explorer  one head's attention: heatmap, token view, line view, overlay, downloads
proteins  predicted and true contacts beside one head's APC map, per-head leaderboard
card      the architecture card (MHA/GQA/MQA/MLA, KV-cache bytes) of the model
"""

from __future__ import annotations

from dash import dcc

from .. import figures


def radio(component_id: str, options, value) -> dcc.RadioItems:
    return dcc.RadioItems(id=component_id, options=list(options), value=value, inline=True,
                          labelStyle={"marginRight": "12px"})


def graph(component_id: str, message: str = "loading…") -> dcc.Graph:
    return dcc.Graph(id=component_id, config=figures.graph_config("png", f"probe_{component_id}"),
                     figure=figures.empty_figure(message))


def head_or_default(selected) -> dict:
    """The selection store's value, or L0H0 (the service checks it against the model before use)."""
    return selected if isinstance(selected, dict) else {"layer": 0, "head": 0}
