"""The head atlas: the layer × head grid of one head type, coloured by score (grey where the head is not
labelled, the reason on hover) or by label, with each head's score, interval, q-value, role and ablation on
hover. Pure: a label table in, a plotly Figure out; the table is read by the rules of
:mod:`probe.views.reading`, shared with the notebook views and the report."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from probe.naming import head_name
from probe.views.reading import format_q, is_grey, is_labelled, label_reason, number, twins_ran, twins_text

from .figures import NO_DATA, NO_DATA_DARK, NOT_SIGNIFICANT, SCORE_SCALE, SELECTION_COLOUR, template, theme_of

LABEL_COLOURS = {"labelled": "#2ca02c", "not labelled": "#d9d9d9", "no score": "#f7f7f7"}


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

    Scores use the fixed scale 0–1 (the colour of 0.3 is the same on every model and type); heads that are
    not labelled are grey, and their hover says why (:func:`probe.views.reading.label_reason`). By label:
    three categories with a legend, never a continuous bar.
    Trace 0 is always the clickable grid ("atlas", z = the score, NaN without one).
    """
    empty = NO_DATA_DARK if theme_of(theme) == "dark" else NO_DATA
    score = np.full((n_layers, n_heads), np.nan)  # [layer head]
    coloured = np.zeros((n_layers, n_heads), dtype=bool)  # labelled: drawn in the score's colour
    labelled = np.zeros((n_layers, n_heads), dtype=bool)
    text = [[f"{name(layer, head)}<br>" + (f"no attention weights ({no_alpha[layer]} layer)"
                                                 if no_alpha and layer in no_alpha else "no labels yet")
             for head in range(n_heads)] for layer in range(n_layers)]
    rows = None
    if table is not None and not table.empty:
        rows = table[table["head_type"].astype(str) == head_type]
    have_rows = rows is not None and not rows.empty
    if have_rows:
        ran = twins_ran(table)  # the untrained twins' bar beside chance, or "not run"
        for row in rows.itertuples(index=False):
            layer, head = int(row.layer), int(row.head)
            if not (0 <= layer < n_layers and 0 <= head < n_heads):
                continue
            score[layer, head] = float(row.score)
            coloured[layer, head] = not is_grey(row)
            labelled[layer, head] = is_labelled(getattr(row, "label", None))
            text[layer][head] = _hover_text(row, head_type, name, ran)
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
        shown = np.where(coloured, score, np.nan)
        grey = np.where(~coloured & ~np.isnan(score), 0.0, np.nan)
        traces.append(go.Heatmap(z=score, zmin=0.0, zmax=1.0, colorscale=[[0, empty], [1, empty]],
                                 showscale=False, name="atlas", **common))
        traces.append(go.Heatmap(z=shown, zmin=0.0, zmax=1.0, colorscale=SCORE_SCALE, name="score",
                                 hoverinfo="skip",
                                 colorbar={"title": {"text": "score (fixed 0–1)", "side": "right"}},
                                 **{k: v for k, v in common.items() if k not in ("text", "hovertemplate")}))
        traces.append(go.Heatmap(z=grey, zmin=0.0, zmax=1.0,
                                 colorscale=[[0, NOT_SIGNIFICANT], [1, NOT_SIGNIFICANT]], showscale=False,
                                 name="not labelled", hoverinfo="skip",
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


def _hover_text(row, head_type: str, name: Callable[[int, int], str] = head_name, ran: bool = False) -> str:
    parts = [f"<b>{name(int(row.layer), int(row.head))}</b>", f"{head_type} score {float(row.score):.3f}"]
    low, high = getattr(row, "ci_low", None), getattr(row, "ci_high", None)
    if low is not None and high is not None and not (pd.isna(low) or pd.isna(high)):
        parts[-1] += f" [{float(low):.3f}, {float(high):.3f}] 95% CI"
    chance = getattr(row, "chance", None)
    if chance is not None and not pd.isna(chance):
        parts.append(f"chance {float(chance):.3f} · untrained twins' p99 {twins_text(row, ran)}")
    q_value = number(row, "q_value")
    labelled = is_labelled(getattr(row, "label", None))
    rule = f"q = {format_q(q_value)}" if q_value is not None else "no q-value"
    parts.append(("✓ labelled" if labelled else "not labelled: " + label_reason(row))
                 + f" ({rule})")
    offset = number(row, "offset")
    if offset is not None:
        parts.append(f"offset d = {int(offset):+d} (attends to j = i {'+' if offset >= 0 else '−'} "
                     f"{abs(int(offset))})")
    effect, z = number(row, "ablation_effect"), number(row, "ablation_z")
    if effect is not None:
        parts.append(
            f"ablation: loss +{effect:.3f}" + (f" (z = {z:.1f} vs random heads)" if z is not None else ""))
    share = number(row, "output_share")
    if share is not None:
        role = getattr(row, "role", None)
        parts.append(
            f"output share {share:.2f}" + (f" · role: {role}" if isinstance(role, str) and role else ""))
    group, group_z = number(row, "group_effect"), number(row, "group_z")
    if group is not None:
        parts.append(
            f"group ablation: +{group:.3f}" + (f" (z = {group_z:.1f})" if group_z is not None else ""))
    if getattr(row, "n_examples", None) is not None:
        parts.append(f"{row.n_examples} examples")
    return "<br>".join(parts)
