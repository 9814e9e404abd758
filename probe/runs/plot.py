"""The sweep figure: each labelled head's score across training checkpoints (`probe label --plot`)."""

from __future__ import annotations

import pandas as pd

from probe.errors import ProbeError
from probe.heads.tables import labelled_mask


def sweep_figure(table: pd.DataFrame, title: str | None = None):
    """plotly Figure: one panel per head type that some checkpoint labels; in it, one line per labelled head
    (score and its bootstrap interval at every checkpoint), the uniform-attention chance level dashed and,
    where the run had untrained twins (``--control untrained:K``), their bar ``untrained_p99`` dotted
    beside it (types whose bar is on the score; coreference's is on its accuracy); without twins the title
    says they were not run. x is the training step when every checkpoint has one, else the checkpoints in
    order. Where a table holds several rows per head and type (several probe lengths), the row of the
    longest probes is plotted."""
    # plotly is about a second of import and only this figure (probe label --plot) needs it: imported here
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    if table.empty:
        raise ProbeError("no labelled checkpoints to plot")
    keys = ["checkpoint", "head_type", "head_name"]
    if table.duplicated(keys).any():  # several probe lengths / sets per head: plot the longest probes' row
        order_by = [c for c in ("seq_len",) if c in table.columns]
        table = table.sort_values(order_by, kind="stable") if order_by else table
        table = table.drop_duplicates(keys, keep="last")
    by_step = table["step"].notna().all()
    x_column = "step" if by_step else "checkpoint"
    labelled = table[labelled_mask(table["label"])]
    types = [t for t in dict.fromkeys(table["head_type"]) if t in set(labelled["head_type"])]
    if not types:
        raise ProbeError("no head is labelled at any checkpoint: nothing to plot")
    figure = make_subplots(rows=len(types), cols=1, shared_xaxes=True, subplot_titles=types,
                           vertical_spacing=0.25 / max(len(types), 1))
    order = list(dict.fromkeys(table["checkpoint"]))
    heads_of = {t: sorted(set(labelled.loc[labelled["head_type"] == t, "head_name"]), key=_head_order)
                for t in types}
    every_head = sorted(set().union(*heads_of.values()), key=_head_order)
    palette = qualitative.Plotly + qualitative.Dark24
    # one colour per head
    colors = {head: palette[index % len(palette)] for index, head in enumerate(every_head)}
    shown: set[str] = set()
    for row, head_type in enumerate(types, start=1):
        rows = table[table["head_type"] == head_type]
        for head in heads_of[head_type]:
            line = rows[rows["head_name"] == head]
            line = (line.sort_values("step") if by_step
                    else line.set_index("checkpoint").loc[order].reset_index())
            figure.add_trace(go.Scatter(
                x=line[x_column], y=line["score"], mode="lines+markers", name=head, legendgroup=head,
                showlegend=head not in shown, line={"color": colors[head]}, marker={"color": colors[head]},
                error_y={"type": "data", "symmetric": False, "array": line["ci_high"] - line["score"],
                         "arrayminus": line["score"] - line["ci_low"], "thickness": 1},
                hovertemplate=f"{head} {head_type}<br>{x_column} %{{x}}<br>score %{{y:.3f}}<extra></extra>",
            ), row=row, col=1)
            shown.add(head)
        chance = rows.groupby(x_column, sort=False)["chance"].mean()
        chance = chance.sort_index() if by_step else chance.loc[order]
        figure.add_trace(go.Scatter(x=chance.index, y=chance.values, mode="lines", name="chance (uniform)",
                                    line={"dash": "dash", "color": "grey"}, legendgroup="chance",
                                    showlegend=row == 1), row=row, col=1)
        bars = pd.to_numeric(rows["untrained_p99"], errors="coerce") if "untrained_p99" in rows else None
        on_score = "accuracy" not in rows or rows["accuracy"].isna().all()  # accuracy types: bar not on y
        if bars is not None and bars.notna().any() and on_score:
            bar = bars.groupby(rows[x_column], sort=False).max()
            bar = bar.sort_index() if by_step else bar.reindex(order)
            figure.add_trace(go.Scatter(x=bar.index, y=bar.values, mode="lines", name="untrained twins' p99",
                                        line={"dash": "dot", "color": "black"}, legendgroup="twins",
                                        showlegend="twins" not in shown), row=row, col=1)
            shown.add("twins")
        figure.update_yaxes(title_text="score", range=[0, 1.05], row=row, col=1)
    figure.update_xaxes(title_text="training step" if by_step else "checkpoint", row=len(types), col=1)
    twins = "untrained_p99" in table and pd.to_numeric(table["untrained_p99"], errors="coerce").notna().any()
    title = title or ("Head scores across checkpoints (heads labelled at some checkpoint)"
                      + ("" if twins else "; untrained twins not run"))
    figure.update_layout(title=title,
                         height=260 * len(types) + 140, width=900, template="plotly_white")
    return figure


def _head_order(name: str) -> tuple[int, ...]:
    """"L10H2" -> (10, 2): heads in layer, head order."""
    return tuple(int(part) for part in name[1:].split("H"))


__all__ = ["sweep_figure"]
