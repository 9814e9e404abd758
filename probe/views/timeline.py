"""A model's training history as a timeline (issue 42): the in-context-learning score, the losses and every
head's previous-token and induction scores against the checkpoint's step — Olsson et al. (2022)'s picture of
the induction phase change, drawn from the table ``probe history`` writes (:mod:`probe.runs.history`).

One static SVG, no script and no request: it draws the same under a notebook cell (:func:`show_history`), in
the one-file report and as a file for a paper. Steps run on a log axis from step 0 (drawn at 0, the others at
log10(step + 1)), as the checkpoints are log-spaced. Four panels:

* **ICL score** (loss at token LATE − loss at token EARLY of held-out passages) with ±2 standard errors;
  Olsson et al. see it drop in the window where induction heads form;
* **loss**: the held-out loss and the training loss (NaN where the checkpoint's card has none);
* **previous-token** and **induction** scores of every head, one line per head; a filled dot where the head
  is labelled at that checkpoint, an open one where it is not. Heads that are never labelled are thin grey
  lines; labelled heads get a colour and a name in the legend.

Unknown values (NaN) break the line: a missing checkpoint is a gap, never a 0. Every dot carries a
``<title>`` (hover in a browser) with the head, the step, the score and whether it is labelled.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from probe.errors import ProbeError
from probe.runs.atomic import write_atomically
from probe.views.html_view import HtmlView, checked_path

HEAD_SCORES = ("previous_token", "induction")  # the head panels, in order
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
THEMES = {"light": {"background": "#ffffff", "text": "#222222", "axis": "#888888", "grid": "#eeeeee",
                    "muted": "#c8c8c8", "band": "#1f77b4"},
          "dark": {"background": "#111418", "text": "#e9ecef", "axis": "#8a8f98", "grid": "#262a30",
                   "muted": "#4a4f57", "band": "#6baed6"}}
PANEL_W, PANEL_H = 300, 190  # one panel's plot area, px
LEFT, TOP, GAP_X, GAP_Y, BOTTOM = 48, 40, 150, 58, 40


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
        Per head type (:data:`HEAD_SCORES`) each head's score at each checkpoint.
    labelled : dict of str to numpy.ndarray, shape=(checkpoint, head), bool
        Whether the head carries the label at that checkpoint.
    icl_positions : (int, int) or None
        The ICL score's tokens (EARLY, LATE).
    theme : {"light", "dark"}
    marked : int or None
        A step marked by a dashed line on every panel (the checkpoint the dashboard shows); None: none.

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
        return (f"<probe timeline: {self.model}, {len(self.steps)} checkpoints ({span}), {heads}; "
                f"induction labelled: {found}>")

    def svg(self) -> str:
        """The timeline as one standalone SVG document (text, lines and dots; no script)."""
        return timeline_svg(self)

    def html(self) -> str:
        """An HTML fragment: the SVG and a one-line caption."""
        icl = ("" if self.icl_positions is None else
               f" ICL score = loss at token {self.icl_positions[1]} − loss at token {self.icl_positions[0]}.")
        return (f'<figure class="probe-timeline" style="margin:0">{self.svg()}<figcaption style="font: 12px '
                f'sans-serif; color: #6b7280">{html.escape(self.model)}: {len(self.steps)} checkpoints, '
                f'log step axis.{html.escape(icl)} Filled dots: labelled at that checkpoint.</figcaption>'
                "</figure>")

    kind = "timeline"

    def page_title(self) -> str:
        return f"{self.model} timeline"

    def save(self, path: str | Path) -> Path:
        """Write the timeline: ``.svg`` (the SVG alone) or ``.html`` (a page with it), atomically."""
        path = checked_path(path, self.kind, (".svg", ".html", ".htm"))
        if path.suffix.lower() != ".svg":
            return self.save_page(path)
        text = self.svg()
        write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        return path


def show_history(history, model: str | None = None, theme: str = "light") -> TimelineView:
    """A model's training history as a timeline, for a notebook cell or a file.

    Parameters
    ----------
    history : pandas.DataFrame, str or Path
        The table ``probe history`` writes (:func:`probe.runs.history.history`; .csv or .parquet).
    model : str, optional
        The model to draw when the table holds several (it must name it); default: the table's one model.
    theme : {"light", "dark"}, default "light"

    Returns
    -------
    TimelineView
        Draws itself under the cell; ``.save("x.svg")``.

    Raises
    ------
    ProbeError
        Not a history table, no checkpoint row, several models without `model`, or a `model` it does not
        hold (another model's history is refused, never drawn).

    Examples
    --------
    >>> table = pd.DataFrame([{"model": "m", "checkpoint": "step-0", "step": 0, "row": "checkpoint",
    ...                        "icl_score": 0.0, "icl_se": 0.1}])  # a history of one checkpoint, no head
    >>> probe.show_history(table).steps.tolist()
    [0]
    >>> probe.show_history(table, model="other")
    Traceback (most recent call last):
    probe.errors.ProbeError: the history holds no checkpoint of other (it has: m); give that model's history
    """
    if theme not in THEMES:
        raise ProbeError(f"theme {theme!r}: use one of {', '.join(THEMES)}")
    if isinstance(history, (str, Path)):
        from probe.runs.history import read_history

        history = read_history(Path(history))
    if not isinstance(history, pd.DataFrame) or not {"model", "step", "row"} <= set(history.columns):
        raise ProbeError("not a history table: give what `probe history` writes (model, step, row columns)")
    models = sorted(str(m) for m in history["model"].dropna().unique())
    if model is None:
        if len(models) != 1:
            raise ProbeError(f"the history holds {len(models)} models ({', '.join(models[:3]) or 'none'}): "
                             "pass model=")
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
    scores = {name: np.full((len(steps), len(keys)), np.nan) for name in HEAD_SCORES}
    labelled = {name: np.zeros((len(steps), len(keys)), dtype=bool) for name in HEAD_SCORES}
    for row in heads_rows.itertuples(index=False):
        c, h = at.get(int(row.step)), where[(int(row.layer), int(row.head))]
        if c is None:
            continue
        for name in HEAD_SCORES:
            value = getattr(row, name, np.nan)
            scores[name][c, h] = np.nan if value is None else float(value)
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
    (``DIR`` for ``DIR/step-3000``); ProbeError otherwise (another model's history is refused)."""
    models = sorted(str(m) for m in history["model"].dropna().unique()) if "model" in history else []
    here = Path(name).expanduser().resolve()
    for model in models:
        folder = Path(model).expanduser()
        if model == name or (folder.is_dir() and here.is_relative_to(folder.resolve())):
            return model
    raise ProbeError(f"the history is of {', '.join(models[:3]) or 'no model'}, not of {name}: give the "
                     "history `probe history` wrote for this model's run")


def step_position(steps: np.ndarray) -> np.ndarray:
    """[checkpoint] float: where each step sits on the log axis (log10(step + 1): step 0 at 0)."""
    return np.log10(np.asarray(steps, dtype=np.float64) + 1.0)


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """About `count` round tick values covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    base = 10 ** math.floor(math.log10(raw))
    step = next(m * base for m in (1, 2, 2.5, 5, 10) if m * base >= raw)
    first = math.floor(low / step) * step
    return [round(first + i * step, 10) for i in range(count + 3) if first + i * step <= high + step * 0.999]


class _Panel:
    """One plot area: maps (x, y) data to pixels and writes SVG pieces."""

    def __init__(self, x0: float, y0: float, xmax: float, ylow: float, yhigh: float, colours: dict) -> None:
        self.x0, self.y0, self.xmax, self.colours = x0, y0, max(xmax, 1e-9), colours
        ticks = nice_ticks(ylow, yhigh)
        self.ylow, self.yhigh = (ticks[0], ticks[-1]) if len(ticks) >= 2 else (ylow, yhigh + 1.0)
        self.yticks = ticks

    def px(self, x: float) -> float:
        return self.x0 + x / self.xmax * PANEL_W

    def py(self, y: float) -> float:
        return self.y0 + PANEL_H - (y - self.ylow) / (self.yhigh - self.ylow) * PANEL_H

    def mark(self, step: int | None) -> list[str]:
        """A dashed vertical line at `step` (the checkpoint shown elsewhere); nothing for None."""
        if step is None:
            return []
        x = self.px(float(step_position(np.array([step]))[0]))
        return [f'<line class="marked-step" data-step="{int(step)}" x1="{x:.1f}" x2="{x:.1f}" y1="{self.y0}" '
                f'y2="{self.y0 + PANEL_H}" stroke="{self.colours["text"]}" stroke-dasharray="4 3"/>']

    def frame(self, title: str, ylabel: str, steps: np.ndarray) -> list[str]:
        c = self.colours
        parts = [f'<text x="{self.x0}" y="{self.y0 - 10}" font-weight="bold" fill="{c["text"]}">'
                 f'{html.escape(title)}</text>']
        for tick in self.yticks:
            y = self.py(tick)
            parts.append(f'<line x1="{self.x0}" x2="{self.x0 + PANEL_W}" y1="{y:.1f}" y2="{y:.1f}" '
                         f'stroke="{c["grid"]}"/>')
            parts.append(f'<text x="{self.x0 - 5}" y="{y + 3:.1f}" text-anchor="end" fill="{c["text"]}">'
                         f'{tick:g}</text>')
        for step in log_ticks(int(steps.max()) if len(steps) else 0):
            x = self.px(float(step_position(np.array([step]))[0]))
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{self.y0}" y2="{self.y0 + PANEL_H}" '
                         f'stroke="{c["grid"]}"/>')
            parts.append(f'<text x="{x:.1f}" y="{self.y0 + PANEL_H + 14}" text-anchor="middle" '
                         f'fill="{c["text"]}">{step:,}</text>')
        parts.append(f'<rect x="{self.x0}" y="{self.y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" '
                     f'stroke="{c["axis"]}"/>')
        parts.append(f'<text x="{self.x0 + PANEL_W / 2}" y="{self.y0 + PANEL_H + 30}" text-anchor="middle" '
                     f'fill="{c["text"]}">training step (log)</text>')
        parts.append(f'<text transform="translate({self.x0 - 36},{self.y0 + PANEL_H / 2}) rotate(-90)" '
                     f'text-anchor="middle" fill="{c["text"]}">{html.escape(ylabel)}</text>')
        return parts

    def line(self, xs: np.ndarray, ys: np.ndarray, colour: str, width: float, name: str = "") -> list[str]:
        """A polyline per run of finite values (NaN breaks the line)."""
        parts, run = [], []
        for x, y in zip(xs, ys, strict=True):
            if math.isfinite(y):
                run.append(f"{self.px(x):.1f},{self.py(y):.1f}")
                continue
            if run:
                parts.append(run)
            run = []
        if run:
            parts.append(run)
        attribute = f' data-name="{html.escape(name)}"' if name else ""
        return [f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}" '
                f'stroke-width="{width}"{attribute}/>' for points in parts]


def log_ticks(largest: int) -> list[int]:
    """0, 1, 10, 100 … up to the largest step."""
    ticks, value = [0], 1
    while value <= max(largest, 1):
        ticks.append(value)
        value *= 10
    return ticks


def _range(*arrays: np.ndarray) -> tuple[float, float]:
    values = np.concatenate([np.ravel(a) for a in arrays]) if arrays else np.array([])
    values = values[np.isfinite(values)]
    if values.size == 0:
        return 0.0, 1.0
    return float(values.min()), float(values.max())


def timeline_svg(view: TimelineView) -> str:
    """The SVG of :class:`TimelineView` (see the module docstring for what each panel shows)."""
    c = THEMES[view.theme]
    xs = step_position(view.steps)  # [checkpoint]
    xmax = float(xs.max()) if len(xs) else 1.0
    width = LEFT + 2 * PANEL_W + GAP_X + 110
    height = TOP + 2 * PANEL_H + GAP_Y + BOTTOM
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10" '
             f'data-model="{html.escape(view.model)}">',
             f'<rect width="{width}" height="{height}" fill="{c["background"]}"/>']
    origin = [(LEFT, TOP), (LEFT + PANEL_W + GAP_X, TOP), (LEFT, TOP + PANEL_H + GAP_Y),
              (LEFT + PANEL_W + GAP_X, TOP + PANEL_H + GAP_Y)]
    # ICL score with ±2 SE
    low_band, high_band = view.icl - 2 * view.icl_se, view.icl + 2 * view.icl_se
    panel = _Panel(*origin[0], xmax, *_range(view.icl, low_band, high_band, np.array([0.0])), c)
    parts += panel.frame("in-context learning score", "nats", view.steps) + panel.mark(view.marked)
    band = [(x, lo, hi) for x, lo, hi in zip(xs, low_band, high_band, strict=True)
            if math.isfinite(lo) and math.isfinite(hi)]
    if len(band) >= 2:
        ring = [f"{panel.px(x):.1f},{panel.py(hi):.1f}" for x, _, hi in band]
        ring += [f"{panel.px(x):.1f},{panel.py(lo):.1f}" for x, lo, _ in reversed(band)]
        parts.append(f'<polygon points="{" ".join(ring)}" fill="{c["band"]}" fill-opacity="0.15" '
                     'data-name="icl ± 2 SE"/>')
    parts += panel.line(xs, view.icl, PALETTE[0], 2, "icl_score")
    parts += _dots(panel, xs, view.icl, PALETTE[0], [
        f"{name} (step {step:,}): ICL score {value:+.3f} ± {2 * se:.3f} nats" if math.isfinite(value) else ""
        for name, step, value, se in zip(view.checkpoints, view.steps, view.icl, view.icl_se, strict=True)],
        filled=True)
    # losses
    panel = _Panel(*origin[1], xmax, *_range(view.held_out, view.train), c)
    parts += panel.frame("loss", "nats", view.steps) + panel.mark(view.marked)
    for values, colour, name in ((view.held_out, PALETTE[1], "held-out loss"),
                                 (view.train, PALETTE[2], "training loss")):
        parts += panel.line(xs, values, colour, 2, name)
    parts += _legend(panel.x0 + PANEL_W + 12, panel.y0 + 6, [("held-out", PALETTE[1]), ("training",
                                                                                         PALETTE[2])], c)
    # head scores
    for index, head_type in enumerate(HEAD_SCORES):
        scores, marks = view.scores[head_type], view.labelled[head_type]  # [checkpoint head]
        panel = _Panel(*origin[2 + index], xmax, *_range(scores, np.array([0.0])), c)
        parts += panel.frame(f"{head_type.replace('_', '-')} score per head", "score", view.steps)
        parts += panel.mark(view.marked)
        ever = [h for h in range(len(view.heads)) if marks[:, h].any()]
        colours = {h: PALETTE[(k + 1) % len(PALETTE)] for k, h in enumerate(ever)}
        for h in [h for h in range(len(view.heads)) if h not in colours] + ever:  # labelled heads on top
            colour = colours.get(h, c["muted"])
            parts += panel.line(xs, scores[:, h], colour, 2 if h in colours else 1, view.heads[h])
            cells = enumerate(zip(view.checkpoints, view.steps, scores[:, h], strict=True))
            titles = [f"{view.heads[h]} at {name} (step {step:,}): {head_type} {value:.3f}"
                      + (" · labelled" if marks[c_, h] else " · not labelled") if math.isfinite(value) else ""
                      for c_, (name, step, value) in cells]
            parts += _dots(panel, xs, scores[:, h], colour, titles, filled=marks[:, h])
        entries = [(view.heads[h], colours[h]) for h in ever] or [("no head labelled", c["muted"])]
        parts += _legend(panel.x0 + PANEL_W + 12, panel.y0 + 6, entries[:8], c)
    parts.append("</svg>")
    return "".join(parts)


def _dots(panel: _Panel, xs, ys, colour: str, titles: list[str], filled) -> list[str]:
    filled = np.broadcast_to(np.asarray(filled, dtype=bool), (len(xs),))
    parts = []
    for x, y, title, full in zip(xs, ys, titles, filled, strict=True):
        if not math.isfinite(y):
            continue
        fill = colour if full else panel.colours["background"]
        parts.append(f'<circle cx="{panel.px(x):.1f}" cy="{panel.py(y):.1f}" r="{3 if full else 2.5}" '
                     f'fill="{fill}" stroke="{colour}" class="{"labelled" if full else "dot"}">'
                     f'<title>{html.escape(title)}</title></circle>')
    return parts


def _legend(x: float, y: float, entries: list[tuple[str, str]], c: dict) -> list[str]:
    parts = []
    for k, (name, colour) in enumerate(entries):
        parts.append(f'<line x1="{x}" x2="{x + 16}" y1="{y + 14 * k}" y2="{y + 14 * k}" stroke="{colour}" '
                     'stroke-width="2"/>')
        parts.append(f'<text x="{x + 20}" y="{y + 14 * k + 3}" fill="{c["text"]}">{html.escape(name)}</text>')
    return parts


__all__ = ["HEAD_SCORES", "THEMES", "TimelineView", "history_model", "log_ticks", "nice_ticks",
           "show_history", "step_position", "timeline_svg"]
