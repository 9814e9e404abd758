"""The protein panel's figures: predicted and true contacts in one map, a head's APC-corrected attention over
residues, the selected residue pair marked in both (and moved by a Patch). Pure: arrays in, plotly Figures
out; residue axes are 1-based."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from dash import Patch

from .figures import CONTACT_BINS, SELECTION_COLOUR, TRUE_CONTACT_SCALES, downsample, template, theme_of


def pair_marks(pair: tuple[int, int] | None) -> tuple[list[float], list[float]]:
    """A residue pair (0-based) as marker coordinates (1-based residues), at (i, j) and its mirror (j, i)."""
    if pair is None:
        return [], []
    i, j = int(pair[0]) + 1, int(pair[1]) + 1
    return [j, i], [i, j]


def selection_trace(pair: tuple[int, int] | None) -> go.Scatter:
    xs, ys = pair_marks(pair)
    return go.Scatter(x=xs, y=ys, mode="markers", name="selected pair", showlegend=False, hoverinfo="skip",
                      marker={"symbol": "circle-open", "size": 16, "line": {"width": 3},
                              "color": SELECTION_COLOUR})


def _residue_heatmap(matrix: np.ndarray, name: str, colourscale, max_bins: int, **extra) -> go.Heatmap:
    """A [residue residue] heatmap on 1-based residue axes, max-pooled above `max_bins` residues."""
    z, factor = downsample(matrix, max_bins)
    start = 1 + (factor - 1) / 2  # centre of the first block, in residue numbers
    return go.Heatmap(z=z, x0=start, dx=factor, y0=start, dy=factor, name=name, colorscale=colourscale,
                      hoverongaps=False, **extra)


def contact_figure(
    predicted: np.ndarray,  # [residue residue] contact probabilities
    true: np.ndarray | None,  # [residue residue] bool, or None without a structure
    pair: tuple[int, int] | None = None,  # residue pair (0-based) marked in both maps
    title: str = "contacts",
    max_bins: int = CONTACT_BINS,
    uirevision: str | None = None,
    theme: str = "light",
) -> go.Figure:
    """Predicted contacts in the upper triangle, true contacts in the lower one; data = [predicted, true,
    pair]."""
    n = predicted.shape[0]
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    shown = np.where(upper, predicted, np.nan)  # [residue residue] i < j only
    truth = np.full((n, n), np.nan)
    if true is not None:
        truth = np.where(upper.T, np.asarray(true, dtype=float), np.nan)  # [residue residue] i > j only
    figure = go.Figure([
        _residue_heatmap(shown, "predicted", "Blues", max_bins, zmin=0.0, zmax=1.0,
                         colorbar={"title": {"text": "p(contact)"}, "x": 1.02},
                         hovertemplate="residues %{y:.0f}, %{x:.0f}<br>predicted %{z:.3f}<extra></extra>"),
        _residue_heatmap(truth, "true", TRUE_CONTACT_SCALES[theme_of(theme)], max_bins, zmin=0.0, zmax=1.0,
                         showscale=False,
                         hovertemplate="residues %{y:.0f}, %{x:.0f}<br>true contact %{z:.0f}<extra></extra>"),
        selection_trace(pair),
    ])
    annotations = []
    if true is None:
        annotations.append({"text": "upload a structure for true contacts (lower triangle)",
                            "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.02, "y": 0.02,
                            "xanchor": "left"})
    figure.update_layout(
        template=template(theme), title={"text": title}, height=520, annotations=annotations,
        xaxis={"title": {"text": "residue"}, "range": [0.5, n + 0.5]},
        yaxis={"title": {"text": "residue"}, "range": [n + 0.5, 0.5]},
        margin={"t": 50}, uirevision=uirevision or title,
    )
    return figure


def head_map_figure(apc: np.ndarray, pair: tuple[int, int] | None = None, title: str = "",
                    max_bins: int = CONTACT_BINS, uirevision: str | None = None,
                    theme: str = "light") -> go.Figure:
    """One head's APC-corrected symmetrised attention over residues; data = [map, pair]."""
    n = apc.shape[0]
    figure = go.Figure([
        _residue_heatmap(apc.astype(np.float32), "apc attention", "Viridis", max_bins,
                         colorbar={"title": {"text": "APC"}},
                         hovertemplate="residues %{y:.0f}, %{x:.0f}<br>APC attention "
                                       "%{z:.4f}<extra></extra>"),
        selection_trace(pair),
    ])
    figure.update_layout(
        template=template(theme), title={"text": title}, height=520,
        xaxis={"title": {"text": "residue"}, "range": [0.5, n + 0.5]},
        yaxis={"title": {"text": "residue"}, "range": [n + 0.5, 0.5]}, margin={"t": 50},
        uirevision=uirevision,
    )
    return figure


CONTACT_PAIR_TRACE = 2  # contact_figure's traces: predicted, true, selected pair
HEAD_MAP_PAIR_TRACE = 1  # head_map_figure's traces: map, selected pair


def pair_patches(pair: tuple[int, int] | None):
    """(contact figure patch, head map patch) that move the selected-pair marker of both figures to `pair`."""
    xs, ys = pair_marks(pair)
    contacts, head_map = Patch(), Patch()
    contacts["data"][CONTACT_PAIR_TRACE]["x"], contacts["data"][CONTACT_PAIR_TRACE]["y"] = xs, ys
    head_map["data"][HEAD_MAP_PAIR_TRACE]["x"], head_map["data"][HEAD_MAP_PAIR_TRACE]["y"] = xs, ys
    return contacts, head_map


def pair_from_point(point: dict | None, n: int) -> tuple[int, int] | None:
    """A clicked/hovered heatmap point (1-based residue axes) -> a 0-based residue pair, or None."""
    if not point or point.get("x") is None or point.get("y") is None:
        return None
    i, j = round(float(point["y"])) - 1, round(float(point["x"])) - 1
    if not (0 <= i < n and 0 <= j < n):
        return None
    return (i, j)
