"""Pure figure builders: numpy arrays and tables in, plotly Figures out. No Dash, no models, no state.

Large matrices are max-pooled on the server (`downsample`) so a figure never carries more than `max_bins`²
cells: a 1024-token head becomes a 256 × 256 heatmap whose cells keep their block's strongest weight, so sharp
patterns (a previous-token diagonal, an induction stripe) stay visible.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

HEATMAP_BINS = 256  # explorer heatmaps above this many tokens are max-pooled to this many rows and columns
CONTACT_BINS = 400  # contact maps above this many residues likewise
LINE_VIEW_TOKENS = 48  # the token-to-token line view is drawn up to this many tokens
SELECTION_COLOUR = "#d62728"
PATTERN_COLOUR = "#ff7f0e"
NOT_SIGNIFICANT = "#d9d9d9"  # atlas cells whose head is not labelled (the grey of probe.views.reading)
NO_DATA = "#f7f7f7"
NO_DATA_DARK = "#3b3b3b"  # the same "no score" cell on the dark theme
SCORE_SCALE = "Viridis"
ALPHA_SCALE = "Blues"
CLOUD_BUTTONS = ["sendDataToCloud", "editInChartStudio"]  # Plotly's cloud links: never on an offline tool


THEMES = ("light", "dark")
TRUE_CONTACT_SCALES = {"light": [[0, "#ffffff"], [1, "#444444"]],
                       "dark": [[0, "rgba(0,0,0,0)"], [1, "#c8c8c8"]]}


@functools.cache
def template(theme: str = "light") -> go.layout.Template:
    """The one plotly template of each page theme, used by every figure (server-drawn, and the explorer's
    heatmap drawn in the browser from `template_json`): plotly_white or plotly_dark on a transparent
    background (the figure sits on its card), with the page's text colours."""
    dark = theme == "dark"
    base = go.layout.Template(pio.templates["plotly_dark" if dark else "plotly_white"])
    text = "#e9ecef" if dark else "#212529"
    base.layout.update(paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)", font={"color": text},
                       title={"font": {"color": text}}, legend={"font": {"color": text}},
                       hoverlabel={"font": {"color": "#f8f9fa" if dark else "#212529"},
                                   "bgcolor": "#343a40" if dark else "#ffffff"})
    return base


def template_json() -> dict:
    """Both templates as plain JSON, for the browser ({"light": …, "dark": …})."""
    return {theme: template(theme).to_plotly_json() for theme in THEMES}


def theme_of(dark) -> str:
    """The theme switch's value (checked or not) -> "dark" | "light"."""
    return "dark" if dark is True or dark == "dark" else "light"


# Toolbar buttons that never apply here: plotly's cloud links, lasso/box selection, spike lines, hover modes.
TRIMMED_BUTTONS = CLOUD_BUTTONS + ["select2d", "lasso2d", "toggleSpikelines", "hoverClosestCartesian",
                                   "hoverCompareCartesian", "autoScale2d"]
ATLAS_BUTTONS = ["zoom2d", "pan2d", "zoomIn2d", "zoomOut2d", "resetScale2d"]  # the atlas does not zoom


def graph_config(image_format: str = "png", filename: str = "probe", atlas: bool = False) -> dict:
    """dcc.Graph config: the toolbar's camera button saves PNG or SVG (`image_format`); no cloud links, no
    tools that do not apply. The atlas (`atlas`) has fixed axes: no zoom tools and no double-click reset, so a
    double-click never selects a head by accident."""
    image = {"format": image_format, "filename": filename}
    if image_format == "png":
        image["scale"] = 2
    config = {"displaylogo": False, "toImageButtonOptions": image, "showSendToCloud": False,
              "showEditInChartStudio": False,
              "modeBarButtonsToRemove": TRIMMED_BUTTONS + (ATLAS_BUTTONS if atlas else [])}
    if atlas:
        config["doubleClick"] = False
    return config


def empty_figure(message: str, theme: str = "light") -> go.Figure:
    """A blank figure that says why it is blank."""
    figure = go.Figure()
    figure.update_layout(
        template=template(theme), xaxis={"visible": False}, yaxis={"visible": False}, height=320,
        annotations=[{"text": message, "showarrow": False, "font": {"size": 14}, "x": 0.5, "y": 0.5,
                      "xref": "paper", "yref": "paper"}],
    )
    return figure


def downsample(matrix: np.ndarray, max_bins: int) -> tuple[np.ndarray, int]:
    """Max-pool a [row col] matrix by an integer factor so neither side exceeds `max_bins`; (pooled, factor).

    NaN cells are ignored; a block of only NaN stays NaN. The input is never changed.
    """
    rows, cols = matrix.shape
    factor = max(1, math.ceil(max(rows, cols) / max_bins))
    if factor == 1:
        return matrix.copy(), 1
    out_rows, out_cols = math.ceil(rows / factor), math.ceil(cols / factor)
    padded = np.full((out_rows * factor, out_cols * factor), np.nan, dtype=np.float64)
    padded[:rows, :cols] = matrix
    blocks = padded.reshape(out_rows, factor, out_cols, factor)  # [row_bin row_in col_bin col_in]
    with np.errstate(all="ignore"), _quiet_nan_warnings():
        pooled = np.nanmax(blocks, axis=(1, 3))  # [row_bin col_bin]
    return pooled.astype(matrix.dtype if matrix.dtype.kind == "f" else np.float64), factor


class _quiet_nan_warnings:
    """Silence numpy's 'All-NaN slice' RuntimeWarning inside the block."""

    def __enter__(self):
        self._context = warnings.catch_warnings()
        self._context.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._context.__exit__(*exc)


def token_labels(tokens: Sequence[str], factor: int = 1, start: int = 0) -> list[str]:
    """Unique axis labels: "3·the" per token, or "8–11·went" per pooled block of `factor` tokens; positions
    count from `start` (the first token of a zoom window)."""
    if factor == 1:
        return [f"{start + index}·{token}" for index, token in enumerate(tokens)]
    labels = []
    for first in range(0, len(tokens), factor):
        last = min(first + factor, len(tokens)) - 1
        labels.append(f"{start + first}–{start + last}·{tokens[first]}")
    return labels


def line_view(alpha: np.ndarray, tokens: Sequence[str], title: str = "", threshold: float = 0.1,
              max_tokens: int = LINE_VIEW_TOKENS, theme: str = "light",
              query_tokens: Sequence[str] | None = None) -> go.Figure:
    """Token-to-token lines (query on the left, key on the right), opacity and width growing with α; the left
    side shows `query_tokens` where the queries read other tokens (cross-attention: the decoder's)."""
    n = len(tokens)
    if n > max_tokens:
        return empty_figure(
            f"{title}: the line view is drawn up to {max_tokens} tokens; this input has {n}", theme)
    figure = go.Figure()
    levels = np.linspace(threshold, 1.0, 6)  # five opacity bands
    queries, keys = np.nonzero(alpha >= threshold)
    for low, high in zip(levels[:-1], levels[1:], strict=True):
        inside = (alpha[queries, keys] >= low) & (alpha[queries, keys] < high if high < 1.0 else True)
        xs, ys = [], []
        for query, key in zip(queries[inside], keys[inside], strict=True):
            xs += [0.0, 1.0, None]
            ys += [-float(query), -float(key), None]
        if xs:
            strength = (low + high) / 2
            figure.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                line={"width": 1 + 5 * strength,
                      "color": f"rgba(31, 119, 180, {0.15 + 0.85 * strength:.2f})"},
            ))
    positions = [-float(i) for i in range(n)]
    for side, anchor in ((0.0, "left"), (1.0, "right")):
        figure.add_trace(go.Scatter(
            x=[side] * n, y=positions, mode="text", showlegend=False,
            text=list(query_tokens if side == 0.0 and query_tokens is not None else tokens),
            textposition=f"middle {anchor}" if anchor == "right" else "middle left",
            hovertemplate="%{text}<extra></extra>",
        ))
    figure.update_layout(
        template=template(theme), title={"text": f"{title} · lines: α ≥ {threshold}"},
        height=max(300, 16 * n + 80), margin={"l": 20, "r": 20},
        xaxis={"visible": False, "range": [-0.6, 1.6]}, yaxis={"visible": False},
    )
    return figure


def zoom_ranges(relayout: dict | None):
    """The axis ranges a zoom set ({"xaxis": [a, b], "yaxis": [c, d]}, either may be missing), "reset" after a
    double-click / autoscale, or None when the relayout event changed no axis (a pan mode switch, a
    resize)."""
    if not isinstance(relayout, dict):
        return None
    ranges = {}
    for axis in ("xaxis", "yaxis"):
        low, high = relayout.get(f"{axis}.range[0]"), relayout.get(f"{axis}.range[1]")
        if isinstance(relayout.get(f"{axis}.range"), list) and len(relayout[f"{axis}.range"]) == 2:
            low, high = relayout[f"{axis}.range"]
        if _finite(low) and _finite(high):
            ranges[axis] = [low, high]
        elif relayout.get(f"{axis}.autorange"):
            return "reset"
    return ranges or None


def _finite(value) -> bool:
    """A real, finite number (NaN, ±Infinity, booleans and strings from a crafted payload are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def apply_zoom(figure: go.Figure, ranges: dict | None) -> go.Figure:
    """Set a stored residue-map zoom ({"xaxis": [...], "yaxis": [...]}) on a freshly drawn map."""
    if isinstance(ranges, dict):
        for axis in ("xaxis", "yaxis"):
            values = ranges.get(axis)
            if isinstance(values, list) and len(values) == 2 and all(_finite(v) for v in values):
                figure.layout[axis].range = values
    return figure
