"""A model's training history as a timeline (issue 42): the in-context-learning score, the losses and every
head's previous-token and induction scores, copying and K-composition against the checkpoint's step —
Olsson et al. (2022)'s picture of the induction phase change, drawn from the table ``probe history`` writes
(:mod:`probe.runs.history`), optionally beside a control's (issue 54: the 1-layer twin, which cannot form an
induction head).

One static SVG, no script and no request: it draws the same under a notebook cell (:func:`show_history`), in
the one-file report and as a file for a paper. Steps run on a log axis from step 0 (drawn at 0, the others at
log10(step + 1)), as the checkpoints are log-spaced. Four panels, six where the history has copying or
K-composition values:

* **ICL score** (loss at token LATE − loss at token EARLY of held-out passages, the tokens in the title) with
  ±2 standard errors; Olsson et al. see it drop in the window where induction heads form. A control's ICL
  score is a dashed grey line named in the legend (its dots' class is ``control``);
* **loss**: the held-out loss and the training loss (NaN where the checkpoint's card has none); a control's
  held-out loss dashed;
* **previous-token** and **induction** scores of every head, one line per head; a filled dot where the head
  is labelled at that checkpoint, an open one where it is not. Heads that are never labelled are thin grey
  lines; labelled heads get a colour and a name in the legend;
* **copying** (Σλ/Σ|λ| of the OV circuit) and **K-composition with the previous-token head** of every head,
  the heads labelled induction coloured as in the induction panel (filled where labelled induction). The head
  panels hold the model's heads only, never a control's.

Unknown values (NaN) break the line: a missing checkpoint is a gap, never a 0. Every dot carries a
``<title>`` (hover in a browser) with the head, the step, the score and whether it is labelled.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from probe.errors import ProbeError
from probe.naming import display_name
from probe.runs.atomic import write_atomically
from probe.views.html_view import HtmlView, checked_path
from probe.views.svg_plot import (
    PANEL_H,
    PANEL_W,
    PlotArea,
    legend,
    log_ticks,
    nice_ticks,
    step_position,
    value_range,
)

HEAD_SCORES = ("previous_token", "induction")  # the labelled head scores, in panel order
HEAD_MEASURES = ("copying", "composition_prev_token")  # per-head measures without a label, in panel order
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
THEMES = {"light": {"background": "#ffffff", "text": "#222222", "axis": "#888888", "grid": "#eeeeee",
                    "muted": "#c8c8c8", "band": "#1f77b4"},
          "dark": {"background": "#111418", "text": "#e9ecef", "axis": "#8a8f98", "grid": "#262a30",
                   "muted": "#4a4f57", "band": "#6baed6"}}
LEFT, TOP, GAP_X, GAP_Y, BOTTOM = 48, 40, 150, 58, 40
CONTROL_DASH = "5 3"  # the control's lines


@dataclass(frozen=True, eq=False)
class TimelineView(HtmlView):
    """What :func:`show_history` returns: the timeline, drawn under a notebook cell (``_repr_html_``).

    Attributes
    ----------
    model : str
        The model whose checkpoints were measured.
    steps : numpy.ndarray, shape=(checkpoint,), int
        Each checkpoint's training step, ascending.
    checkpoints : tuple of str
        The checkpoints' names (``step-540``, a hub revision …), in step order.
    icl, icl_se, held_out, train : numpy.ndarray, shape=(checkpoint,), float
        The ICL score and its standard error, the held-out loss, the training loss (NaN: unknown).
    heads : tuple of str
        The heads' names (``L1H2``), in (layer, head) order.
    scores : dict of str to numpy.ndarray, shape=(checkpoint, head), float
        Per head type (:data:`HEAD_SCORES`) and per measure (:data:`HEAD_MEASURES`: copying, K-composition
        with the previous-token head) each head's value at each checkpoint (NaN: unknown).
    labelled : dict of str to numpy.ndarray, shape=(checkpoint, head), bool
        Whether the head carries the label at that checkpoint.
    icl_positions : (int, int) or None
        The ICL score's tokens (EARLY, LATE).
    theme : {"light", "dark"}
    marked : int or None
        A step marked by a dashed line on every panel (the checkpoint the dashboard shows); None: none.
    control : TimelineView or None
        Another model's history drawn beside it in the ICL-score and loss panels (dashed): its control, e.g.
        the 1-layer twin; None: none.

    Examples
    --------
    >>> table = pd.DataFrame([
    ...     {"model": "m", "checkpoint": f"step-{s}", "step": s, "row": "checkpoint", "icl_score": icl,
    ...      "icl_se": 0.05, "held_out_loss": 5.0 - s / 1000, "train_loss": 4.9 - s / 1000}
    ...     for s, icl in ((0, 0.0), (100, -0.1), (1000, -0.6))] + [
    ...     {"model": "m", "checkpoint": f"step-{s}", "step": s, "row": "head", "layer": 1, "head": 0,
    ...      "head_name": "L1H0", "previous_token": 0.1, "previous_token_label": False,
    ...      "induction": score, "induction_label": score > 0.3}
    ...     for s, score in ((0, 0.02), (100, 0.05), (1000, 0.45))])
    >>> view = probe.show_history(table)
    >>> view
    <probe timeline: m, 3 checkpoints (steps 0-1000), 1 head; induction labelled: L1H0 from step 1000>
    >>> view.scores["induction"][:, 0].tolist()
    [0.02, 0.05, 0.45]
    """

    model: str
    steps: np.ndarray
    checkpoints: tuple[str, ...]
    icl: np.ndarray
    icl_se: np.ndarray
    held_out: np.ndarray
    train: np.ndarray
    heads: tuple[str, ...]
    scores: dict[str, np.ndarray]
    labelled: dict[str, np.ndarray]
    icl_positions: tuple[int, int] | None = None
    theme: str = "light"
    marked: int | None = None
    control: TimelineView | None = None

    def first_labelled(self, head_type: str) -> dict[str, int]:
        """Per head labelled `head_type` at some checkpoint, the first step where it is."""
        marks = self.labelled[head_type]  # [checkpoint head]
        return {self.heads[h]: int(self.steps[np.flatnonzero(marks[:, h])[0]])
                for h in range(len(self.heads)) if marks[:, h].any()}

    def __repr__(self) -> str:
        first = self.first_labelled("induction")
        found = ", ".join(f"{name} from step {step}" for name, step in first.items()) or "none"
        span = f"steps {self.steps[0]}-{self.steps[-1]}" if len(self.steps) else "no step"
        heads = f"{len(self.heads)} head{'s' if len(self.heads) != 1 else ''}"
        beside = "" if self.control is None else f"; beside {control_label(self.control)}"
        return (f"<probe timeline: {self.model}, {len(self.steps)} checkpoints ({span}), {heads}; "
                f"induction labelled: {found}{beside}>")

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the SVG in px: two rows of panels, three with copying or K-composition."""
        rows = 1 + len(head_panels(self)) // 2
        return LEFT + 2 * PANEL_W + GAP_X + 110, TOP + rows * PANEL_H + (rows - 1) * GAP_Y + BOTTOM

    def svg(self) -> str:
        """The timeline as one standalone SVG document (text, lines and dots; no script)."""
        return timeline_svg(self)

    def html(self) -> str:
        """An HTML fragment: the SVG and a one-line caption."""
        icl = ("" if self.icl_positions is None else
               f" ICL score = loss at token {self.icl_positions[1]} − loss at token {self.icl_positions[0]}.")
        beside = ("" if self.control is None else
                  f" Dashed grey: {control_label(self.control)} ({len(self.control.steps)} checkpoints).")
        return (f'<figure class="probe-timeline" style="margin:0">{self.svg()}<figcaption style="font: 12px '
                f'sans-serif; color: #6b7280">{html.escape(display_name(self.model))}: {len(self.steps)} '
                f'checkpoints, log step axis.{html.escape(icl)} Filled dots: labelled at that checkpoint.'
                f"{html.escape(beside)}</figcaption></figure>")

    kind = "timeline"

    def page_title(self) -> str:
        return f"{display_name(self.model)} timeline"

    def save(self, path: str | Path) -> Path:
        """Write the timeline: ``.svg`` (the SVG alone) or ``.html`` (a page with it), atomically."""
        path = checked_path(path, self.kind, (".svg", ".html", ".htm"))
        if path.suffix.lower() != ".svg":
            return self.save_page(path)
        text = self.svg()
        write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        return path


def show_history(history, model: str | None = None, theme: str = "light", control=None) -> TimelineView:
    """A model's training history as a timeline, for a notebook cell or a file.

    Parameters
    ----------
    history : pandas.DataFrame, str or Path
        The table ``probe history`` writes (:func:`probe.runs.history.history`; .csv or .parquet).
    model : str, optional
        The model to draw when the table holds several (it must name it); default: the table's one model.
    theme : {"light", "dark"}, default "light"
    control : pandas.DataFrame, str or Path, optional
        Another model's history (one model's, read as `history` is), drawn beside it in the ICL-score and loss
        panels as a dashed grey line named in the legend — the 1-layer control, which cannot form an induction
        head (Olsson et al. 2022). Never drawn in the head panels.

    Returns
    -------
    TimelineView
        Draws itself under the cell; ``.save("x.svg")``.

    Raises
    ------
    ProbeError
        Not a history table, no checkpoint row, several models without `model`, or a `model` it does not
        hold (another model's history is refused, never drawn); a control of the same model, or one whose ICL
        score is at other tokens.

    Examples
    --------
    >>> table = pd.DataFrame([{"model": "m", "checkpoint": "step-0", "step": 0, "row": "checkpoint",
    ...                        "icl_score": 0.0, "icl_se": 0.1}])  # a history of one checkpoint, no head
    >>> probe.show_history(table).steps.tolist()
    [0]
    >>> probe.show_history(table, model="other")
    Traceback (most recent call last):
    probe.errors.ProbeError: the history holds no checkpoint of other (it has: m); give that model's history
    >>> twin = table.assign(model="m-1layer", icl_score=0.01)
    >>> probe.show_history(table, control=twin).control.icl.tolist()
    [0.01]
    >>> probe.show_history(table, control=table)
    Traceback (most recent call last):
    probe.errors.ProbeError: the control's history is of m, the model itself: give another model's history
    """
    if theme not in THEMES:
        raise ProbeError(f"theme {theme!r}: use one of {', '.join(THEMES)}")
    view = _read(history, model, theme)
    if control is None:
        return view
    from probe.runs.history import same_model

    twin = _read(control, None, theme, "the control's history")
    if same_model(view.model, twin.model):
        raise ProbeError(f"the control's history is of {display_name(twin.model)}, the model itself: give "
                         "another model's history")
    if None not in (view.icl_positions, twin.icl_positions) and view.icl_positions != twin.icl_positions:
        raise ProbeError(f"the control's ICL score is at tokens {twin.icl_positions}, the model's at "
                         f"{view.icl_positions}: measure both with the same `probe history --icl-positions`")
    return replace(view, control=twin)


def _read(history, model: str | None, theme: str, what: str = "the history") -> TimelineView:
    """One model's timeline from a history table or its file (see :func:`show_history`)."""
    if isinstance(history, (str, Path)):
        from probe.runs.history import read_history

        history = read_history(Path(history))
    if not isinstance(history, pd.DataFrame) or not {"model", "step", "row"} <= set(history.columns):
        raise ProbeError(f"{what} is not a history table: give what `probe history` writes (model, step, row "
                         "columns)")
    models = sorted(str(m) for m in history["model"].dropna().unique())
    if model is None:
        if len(models) != 1:
            raise ProbeError(f"{what} holds {len(models)} models ({', '.join(models[:3]) or 'none'}): "
                             + ("pass model=" if what == "the history" else "give one model's history"))
        model = models[0]
    elif model not in models:
        raise ProbeError(f"the history holds no checkpoint of {model} (it has: {', '.join(models[:3])}); "
                         "give that model's history")
    table = history[history["model"].astype(str) == model]
    points = table[table["row"] == "checkpoint"].sort_values("step", kind="stable")
    if points.empty:
        raise ProbeError(f"the history of {model} has no checkpoint row: run `probe history` again")
    steps = points["step"].to_numpy(dtype=np.int64)  # [checkpoint]

    def column(name: str) -> np.ndarray:
        return (points[name].to_numpy(dtype=np.float64) if name in points else np.full(len(points), np.nan))

    heads_rows = table[table["row"] == "head"]
    keys = sorted({(int(r.layer), int(r.head)) for r in heads_rows.itertuples(index=False)})
    names = tuple(f"L{layer}H{head}" for layer, head in keys)
    where = {key: index for index, key in enumerate(keys)}
    at = {int(step): index for index, step in enumerate(steps)}
    scores = {name: np.full((len(steps), len(keys)), np.nan) for name in HEAD_SCORES + HEAD_MEASURES}
    labelled = {name: np.zeros((len(steps), len(keys)), dtype=bool) for name in HEAD_SCORES}
    for row in heads_rows.itertuples(index=False):
        c, h = at.get(int(row.step)), where[(int(row.layer), int(row.head))]
        if c is None:
            continue
        for name in HEAD_SCORES + HEAD_MEASURES:
            value = getattr(row, name, np.nan)
            scores[name][c, h] = np.nan if value is None else float(value)
        for name in HEAD_SCORES:
            mark = getattr(row, f"{name}_label", False)
            labelled[name][c, h] = bool(mark) if isinstance(mark, (bool, np.bool_)) else str(mark) == "True"
    positions = None
    if {"icl_early", "icl_late"} <= set(points.columns) and points["icl_early"].notna().any():
        positions = (int(points["icl_early"].dropna().iloc[0]), int(points["icl_late"].dropna().iloc[0]))
    return TimelineView(model=model, steps=steps, checkpoints=tuple(points["checkpoint"].astype(str)),
                        icl=column("icl_score"), icl_se=column("icl_se"), held_out=column("held_out_loss"),
                        train=column("train_loss"), heads=names, scores=scores, labelled=labelled,
                        icl_positions=positions, theme=theme)


def history_model(history: pd.DataFrame, name: str) -> str:
    """The model of `history` that the model `name` belongs to: the same name, or the run folder holding it
    (``DIR`` for ``DIR/step-3000``; a zoo:NAME spec stands for its folder); ProbeError otherwise (another
    model's history is refused)."""
    from probe.runs.checkpoints import local_directory  # zoo:NAME -> its folder

    models = sorted(str(m) for m in history["model"].dropna().unique()) if "model" in history else []
    here = (local_directory(name) or Path(name).expanduser()).resolve()
    for model in models:
        folder = local_directory(model)
        if model == name or (folder is not None and here.is_relative_to(folder.resolve())):
            return model
    raise ProbeError(f"the history is of {', '.join(models[:3]) or 'no model'}, not of {name}: give the "
                     "history `probe history` wrote for this model's run")


def timeline_svg(view: TimelineView) -> str:
    """The SVG of :class:`TimelineView` (see the module docstring for what each panel shows).

    Examples
    --------
    >>> table = pd.DataFrame([{"model": "m", "checkpoint": "step-0", "step": 0, "row": "checkpoint",
    ...                        "icl_score": 0.0, "icl_se": 0.1, "icl_early": 12, "icl_late": 120}])
    >>> svg = timeline_svg(probe.show_history(table))
    >>> "ICL score: loss at token 120 − loss at token 12" in svg, "<script" in svg
    (True, False)
    """
    c, control = THEMES[view.theme], view.control
    xs = step_position(view.steps)  # [checkpoint]
    every_step = view.steps if control is None else np.concatenate([view.steps, control.steps])
    xmax = float(step_position(every_step).max()) if len(every_step) else 1.0
    panels = head_panels(view)
    rows = 1 + len(panels) // 2
    width, height = view.size
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10" '
             f'data-model="{html.escape(display_name(view.model))}">',
             f'<rect width="{width}" height="{height}" fill="{c["background"]}"/>']
    origin = [(LEFT + k * (PANEL_W + GAP_X), TOP + r * (PANEL_H + GAP_Y))
              for r in range(rows) for k in (0, 1)]
    # ICL score with ±2 SE (and the control's, dashed)
    low_band, high_band = view.icl - 2 * view.icl_se, view.icl + 2 * view.icl_se
    theirs = (control.icl,) if control is not None else ()
    panel = PlotArea(*origin[0], xmax, *value_range(view.icl, low_band, high_band, np.array([0.0]), *theirs),
                     c)
    title = ("in-context learning score" if view.icl_positions is None else
             f"ICL score: loss at token {view.icl_positions[1]} − loss at token {view.icl_positions[0]}")
    parts += panel.frame(title, "nats", every_step) + panel.mark(view.marked)
    band = [(x, lo, hi) for x, lo, hi in zip(xs, low_band, high_band, strict=True)
            if math.isfinite(lo) and math.isfinite(hi)]
    if len(band) >= 2:
        ring = [f"{panel.px(x):.1f},{panel.py(hi):.1f}" for x, _, hi in band]
        ring += [f"{panel.px(x):.1f},{panel.py(lo):.1f}" for x, lo, _ in reversed(band)]
        parts.append(f'<polygon points="{" ".join(ring)}" fill="{c["band"]}" fill-opacity="0.15" '
                     'data-name="icl ± 2 SE"/>')
    if control is not None:
        cx, label = step_position(control.steps), control_label(control)
        parts += panel.line(cx, control.icl, c["axis"], 1.5, "control icl_score", CONTROL_DASH)
        parts += panel.dots(cx, control.icl, c["axis"], [
            f"{label} · {name} (step {step:,}): ICL score {value:+.3f} ± {2 * se:.3f} nats"
            if math.isfinite(value) else ""
            for name, step, value, se in zip(control.checkpoints, control.steps, control.icl, control.icl_se,
                                             strict=True)], filled=False, kind="control")
        parts += legend(panel.x0 + PANEL_W + 12, panel.y0 + 6, [
            (short(display_name(view.model)), PALETTE[0]),
            (label.replace(": ", ":\n", 1) if len(label) > 24 else label, c["axis"], CONTROL_DASH)], c)
    parts += panel.line(xs, view.icl, PALETTE[0], 2, "icl_score")
    parts += panel.dots(xs, view.icl, PALETTE[0], [
        f"{name} (step {step:,}): ICL score {value:+.3f} ± {2 * se:.3f} nats" if math.isfinite(value) else ""
        for name, step, value, se in zip(view.checkpoints, view.steps, view.icl, view.icl_se, strict=True)],
        filled=True)
    # losses (and the control's held-out loss, dashed)
    theirs = (control.held_out,) if control is not None else ()
    panel = PlotArea(*origin[1], xmax, *value_range(view.held_out, view.train, *theirs), c)
    parts += panel.frame("loss", "nats", every_step) + panel.mark(view.marked)
    entries = [("held-out", PALETTE[1]), ("training", PALETTE[2])]
    if control is not None:
        parts += panel.line(step_position(control.steps), control.held_out, c["axis"], 1.5,
                            "control held-out loss", CONTROL_DASH)
        entries.append(("held-out,\ncontrol", c["axis"], CONTROL_DASH))
    for values, colour, name in ((view.held_out, PALETTE[1], "held-out loss"),
                                 (view.train, PALETTE[2], "training loss")):
        parts += panel.line(xs, values, colour, 2, name)
    parts += legend(panel.x0 + PANEL_W + 12, panel.y0 + 6, entries, c)
    # head panels: the model's heads only (a control's never)
    for index, (measure, head_type, title) in enumerate(panels):
        parts += _head_panel(view, PlotArea(*origin[2 + index], xmax, *value_range(
            view.scores[measure], np.array([0.0])), c), measure, head_type, title, xs, every_step)
    parts.append("</svg>")
    return "".join(parts)


def head_panels(view: TimelineView) -> list[tuple[str, str, str]]:
    """The head panels of `view`, in order: (the measure drawn, the head type whose labelled heads are
    coloured, the title); copying and K-composition only where the history has a value of either."""
    panels = [("previous_token", "previous_token", "previous-token score per head"),
              ("induction", "induction", "induction score per head")]
    if any(np.isfinite(view.scores[name]).any() for name in HEAD_MEASURES):
        panels += [("copying", "induction", "copying score per head"),
                   ("composition_prev_token", "induction", "K-composition with the previous-token head")]
    return panels


def _head_panel(view: TimelineView, panel: PlotArea, measure: str, head_type: str, title: str, xs: np.ndarray,
                every_step: np.ndarray) -> list[str]:
    """One panel of a per-head measure; the heads labelled `head_type` at some checkpoint coloured, their
    dots filled where labelled."""
    c = panel.colours
    scores, marks = view.scores[measure], view.labelled[head_type]  # [checkpoint head]
    parts = panel.frame(title, "score", every_step) + panel.mark(view.marked)
    if not np.isfinite(scores).any():
        parts += panel.note("unknown at every checkpoint" + (
            ": no previous-token head labelled in an earlier layer" if measure == "composition_prev_token"
            else ""))
    ever = [h for h in range(len(view.heads)) if marks[:, h].any()]
    colours = {h: PALETTE[(k + 1) % len(PALETTE)] for k, h in enumerate(ever)}
    said = (lambda on: " · labelled" if on else " · not labelled") if measure == head_type else (
        lambda on: f" · labelled {head_type}" if on else f" · not labelled {head_type}")
    for h in [h for h in range(len(view.heads)) if h not in colours] + ever:  # labelled heads on top
        colour = colours.get(h, c["muted"])
        parts += panel.line(xs, scores[:, h], colour, 2 if h in colours else 1, view.heads[h])
        cells = enumerate(zip(view.checkpoints, view.steps, scores[:, h], strict=True))
        titles = [f"{view.heads[h]} at {name} (step {step:,}): {measure} {value:.3f}" + said(marks[c_, h])
                  if math.isfinite(value) else "" for c_, (name, step, value) in cells]
        parts += panel.dots(xs, scores[:, h], colour, titles, filled=marks[:, h])
    none = f"no {head_type.replace('_', '-')} head\nlabelled" if measure != head_type else "no head labelled"
    entries = [(view.heads[h], colours[h]) for h in ever] or [(none, c["muted"])]
    return parts + legend(panel.x0 + PANEL_W + 12, panel.y0 + 6, entries[:8], c)


def control_label(control: TimelineView) -> str:
    """How the timeline names a control: ``"1-layer control: NAME"`` (its layer count read from its heads;
    ``"control: NAME"`` where it has none), never by a path of this machine."""
    layers = {int(name[1:name.index("H")]) for name in control.heads}
    kind = f"{max(layers) + 1}-layer control" if layers else "control"
    return f"{kind}: {short(display_name(control.model))}"


def short(name: str, most: int = 22) -> str:
    """`name` cut to `most` characters (an ellipsis marks the cut): legends sit in the gap between panels."""
    return name if len(name) <= most else name[:most - 1] + "…"


__all__ = ["HEAD_MEASURES", "HEAD_SCORES", "THEMES", "TimelineView", "control_label", "history_model",
           "log_ticks", "nice_ticks", "show_history", "step_position", "timeline_svg"]
