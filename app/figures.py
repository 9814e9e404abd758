"""Pure figure builders: numpy arrays and tables in, plotly Figures out. No Dash, no models, no state.

Large matrices are max-pooled on the server (`downsample`) so a figure never carries more than `max_bins`²
cells: a 1024-token head becomes a 256 × 256 heatmap whose cells keep their block's strongest weight, so sharp
patterns (a previous-token diagonal, an induction stripe) stay visible.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from dash import Patch

from probe.naming import head_name
from probe.views.tables import number as _number  # a table cell as a finite number or None

HEATMAP_BINS = 256  # explorer heatmaps above this many tokens are max-pooled to this many rows and columns
CONTACT_BINS = 400  # contact maps above this many residues likewise
LINE_VIEW_TOKENS = 48  # the token-to-token line view is drawn up to this many tokens
SELECTION_COLOUR = "#d62728"
PATTERN_COLOUR = "#ff7f0e"
NOT_SIGNIFICANT = "#d9d9d9"  # atlas cells whose score is not clearly above chance
NO_DATA = "#f7f7f7"
NO_DATA_DARK = "#3b3b3b"  # the same "no score" cell on the dark theme
LABEL_COLOURS = {"labelled": "#2ca02c", "not labelled": "#d9d9d9", "no score": "#f7f7f7"}
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


def is_significant(row) -> bool:
    """Clearly above chance: the q-value below 0.05 where the table has one, else the CI's low end above
    chance."""
    q_value = getattr(row, "q_value", None)
    if q_value is not None and not pd.isna(q_value):
        return float(q_value) < 0.05
    low, chance = getattr(row, "ci_low", None), getattr(row, "chance", None)
    if low is None or chance is None or pd.isna(low) or pd.isna(chance):
        return True  # nothing to test against: show the score
    return float(low) > float(chance)


def _is_labelled(value) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return str(value).strip().lower() not in ("", "none", "nan", "false", "0", "unlabelled", "-")


def atlas_figure(
    # labels rows: layer, head, head_type, score (+ ci_low, ci_high, chance, label)
    table: pd.DataFrame | None,
    n_layers: int,
    n_heads: int,
    head_type: str,
    colour_by: str = "score",  # "score" | "label"
    selected: tuple[int, int] | None = None,
    theme: str = "light",
    # a hybrid's layers without α -> their kind (linear_attention, mamba)
    no_alpha: dict[int, str] | None = None,
    name: Callable[[int, int], str] = head_name,  # (layer, head) -> "L3H2"; an encoder–decoder's "enc.L1H2"
    layer_names: Sequence[str] | None = None,  # an encoder–decoder's layer axis: "enc.L0", …, "cross.L2"
    empty_title: str | None = None,  # the title without label rows (default: press 'Label heads')
) -> go.Figure:
    """The layer × head grid coloured by one head type's score (or label); hover gives the score and its CI.
    A hybrid's layers without attention weights (`no_alpha`) stay empty and say so.

    Scores use the fixed scale 0–1 (the colour of 0.3 is the same on every model and type); heads whose score
    is not clearly above chance are grey. By label: three categories with a legend, never a continuous bar.
    Trace 0 is always the clickable grid ("atlas", z = the score, NaN without one).
    """
    empty = NO_DATA_DARK if theme_of(theme) == "dark" else NO_DATA
    score = np.full((n_layers, n_heads), np.nan)  # [layer head]
    significant = np.zeros((n_layers, n_heads), dtype=bool)
    labelled = np.zeros((n_layers, n_heads), dtype=bool)
    text = [[f"{name(layer, head)}<br>" + (f"no attention weights ({no_alpha[layer]} layer)"
                                                 if no_alpha and layer in no_alpha else "no labels yet")
             for head in range(n_heads)] for layer in range(n_layers)]
    rows = None
    if table is not None and not table.empty:
        rows = table[table["head_type"].astype(str) == head_type]
    have_rows = rows is not None and not rows.empty
    if have_rows:
        for row in rows.itertuples(index=False):
            layer, head = int(row.layer), int(row.head)
            if not (0 <= layer < n_layers and 0 <= head < n_heads):
                continue
            score[layer, head] = float(row.score)
            significant[layer, head] = is_significant(row)
            labelled[layer, head] = _is_labelled(getattr(row, "label", None))
            text[layer][head] = _hover_text(row, head_type, name)
    xs, ys = list(range(n_heads)), list(range(n_layers))
    common = {"x": xs, "y": ys, "text": text, "xgap": 2, "ygap": 2, "hovertemplate": "%{text}<extra></extra>"}
    traces = []
    if have_rows and colour_by == "label":
        category = np.where(np.isnan(score), 2, np.where(labelled, 0, 1))  # 0 labelled, 1 not, 2 no score
        colours = list(LABEL_COLOURS.values())
        scale = [[0.0, colours[0]], [1 / 3, colours[0]], [1 / 3, colours[1]], [2 / 3, colours[1]],
                 [2 / 3, colours[2]], [1.0, colours[2]]]
        traces.append(go.Heatmap(z=category, zmin=-0.5, zmax=2.5, colorscale=scale, showscale=False,
                                 name="atlas", **common))
        for name, colour in LABEL_COLOURS.items():  # legend entries for the three categories
            traces.append(go.Scatter(x=[None], y=[None], mode="markers", name=name, showlegend=True,
                                     marker={"symbol": "square", "size": 12, "color": colour}))
        title = f"{head_type}: labelled heads (click to select)"
    elif have_rows:
        shown = np.where(significant, score, np.nan)
        grey = np.where(~significant & ~np.isnan(score), 0.0, np.nan)
        traces.append(go.Heatmap(z=score, zmin=0.0, zmax=1.0, colorscale=[[0, empty], [1, empty]],
                                 showscale=False, name="atlas", **common))
        traces.append(go.Heatmap(z=shown, zmin=0.0, zmax=1.0, colorscale=SCORE_SCALE, name="score",
                                 hoverinfo="skip",
                                 colorbar={"title": {"text": "score (fixed 0–1)", "side": "right"}},
                                 **{k: v for k, v in common.items() if k not in ("text", "hovertemplate")}))
        traces.append(go.Heatmap(z=grey, zmin=0.0, zmax=1.0,
                                 colorscale=[[0, NOT_SIGNIFICANT], [1, NOT_SIGNIFICANT]], showscale=False,
                                 name="not above chance", hoverinfo="skip",
                                 **{k: v for k, v in common.items() if k not in ("text", "hovertemplate")}))
        # the grey's meaning is in the page's legend above the atlas (once), not repeated in the figure
        title = f"{head_type}: score of every head (click to select)"
    else:
        traces.append(go.Heatmap(z=score, zmin=0.0, zmax=1.0, colorscale=[[0, empty], [1, empty]],
                                 showscale=False, name="atlas", **common))
        title = empty_title or f"no {head_type} labels yet: press 'Label heads'"
    if not have_rows:  # NaN cells are not drawn (nor clickable): give the empty grid a flat value
        traces[0].z = np.zeros((n_layers, n_heads))
    figure = go.Figure(traces)
    if selected is not None:
        figure.add_trace(go.Scatter(
            x=[selected[1]], y=[selected[0]], mode="markers", name="selected", showlegend=False,
            hoverinfo="skip",
            marker={"symbol": "square-open", "size": 22, "line": {"width": 3}, "color": SELECTION_COLOUR},
        ))
    figure.update_layout(
        # The title sits just above the grid, below the toolbar (which takes the figure's top edge).
        template=template(theme), title={"text": title, "font": {"size": 12}, "y": 1, "yref": "paper",
                                        "yanchor": "bottom", "pad": {"b": 6}},
        height=max(320, 40 * n_layers + 190),
        xaxis={"title": {"text": "head", "standoff": 4}, "dtick": 1, "range": [-0.5, n_heads - 0.5],
               "fixedrange": True},
        yaxis={"title": {"text": "layer"}, "dtick": 1, "range": [n_layers - 0.5, -0.5], "fixedrange": True},
        legend={"orientation": "h", "x": 0, "y": 0, "yref": "container", "yanchor": "bottom",
                "font": {"size": 11}},
        margin={"t": 80, "l": 50, "r": 20, "b": 90},
    )
    if layer_names:  # an encoder–decoder: its stacks' own layer names on the layer axis
        figure.update_yaxes(tickmode="array", tickvals=list(range(n_layers)), ticktext=list(layer_names))
        figure.update_layout(margin={"l": 80})
    return figure


def _hover_text(row, head_type: str, name: Callable[[int, int], str] = head_name) -> str:
    parts = [f"<b>{name(int(row.layer), int(row.head))}</b>", f"{head_type} score {float(row.score):.3f}"]
    low, high = getattr(row, "ci_low", None), getattr(row, "ci_high", None)
    if low is not None and high is not None and not (pd.isna(low) or pd.isna(high)):
        parts[-1] += f" [{float(low):.3f}, {float(high):.3f}] 95% CI"
    chance = getattr(row, "chance", None)
    if chance is not None and not pd.isna(chance):
        parts.append(f"chance {float(chance):.3f}")
    q_value = _number(row, "q_value")
    labelled = _is_labelled(getattr(row, "label", None))
    rule = f"q = {format_q(q_value)}" if q_value is not None else "no q-value"
    parts.append(("✓ labelled" if labelled else "not labelled") + f" ({rule}; labelled when q ≤ 0.05)")
    offset = _number(row, "offset")
    if offset is not None:
        parts.append(f"offset d = {int(offset):+d} (attends to j = i {'+' if offset >= 0 else '−'} "
                     f"{abs(int(offset))})")
    effect, z = _number(row, "ablation_effect"), _number(row, "ablation_z")
    if effect is not None:
        parts.append(
            f"ablation: loss +{effect:.3f}" + (f" (z = {z:.1f} vs random heads)" if z is not None else ""))
    share = _number(row, "output_share")
    if share is not None:
        role = getattr(row, "role", None)
        parts.append(
            f"output share {share:.2f}" + (f" · role: {role}" if isinstance(role, str) and role else ""))
    group, group_z = _number(row, "group_effect"), _number(row, "group_z")
    if group is not None:
        parts.append(
            f"group ablation: +{group:.3f}" + (f" (z = {group_z:.1f})" if group_z is not None else ""))
    if getattr(row, "n_examples", None) is not None:
        parts.append(f"{row.n_examples} examples")
    return "<br>".join(parts)




def format_q(value: float | None) -> str:
    """A q- or p-value for reading: 3 significant digits, '< 0.001' below; 'unknown' for NaN."""
    if value is None or not math.isfinite(value):
        return "unknown"
    return "< 0.001" if value < 0.001 else f"{value:.3g}"


def _pair_marks(pair: tuple[int, int] | None) -> tuple[list[float], list[float]]:
    """A residue pair (0-based) as marker coordinates (1-based residues), at (i, j) and its mirror (j, i)."""
    if pair is None:
        return [], []
    i, j = int(pair[0]) + 1, int(pair[1]) + 1
    return [j, i], [i, j]


def selection_trace(pair: tuple[int, int] | None) -> go.Scatter:
    xs, ys = _pair_marks(pair)
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
    xs, ys = _pair_marks(pair)
    contacts, head_map = Patch(), Patch()
    contacts["data"][CONTACT_PAIR_TRACE]["x"], contacts["data"][CONTACT_PAIR_TRACE]["y"] = xs, ys
    head_map["data"][HEAD_MAP_PAIR_TRACE]["x"], head_map["data"][HEAD_MAP_PAIR_TRACE]["y"] = xs, ys
    return contacts, head_map


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


def pair_from_point(point: dict | None, n: int) -> tuple[int, int] | None:
    """A clicked/hovered heatmap point (1-based residue axes) -> a 0-based residue pair, or None."""
    if not point or point.get("x") is None or point.get("y") is None:
        return None
    i, j = round(float(point["y"])) - 1, round(float(point["x"])) - 1
    if not (0 <= i < n and 0 <= j < n):
        return None
    return (i, j)
