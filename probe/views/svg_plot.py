"""The pieces of the timeline's static SVG (:mod:`probe.views.timeline`): a plot area against the training
step on a log axis (step 0 drawn at 0, the others at log10(step + 1)), its frame and ticks, lines that break
at unknown values (NaN: a gap, never 0), dots with a hover ``<title>``, and a legend. Text, lines and circles
only: no script, no request.
"""

from __future__ import annotations

import html
import math

import numpy as np

PANEL_W, PANEL_H = 300, 170  # one panel's plot area, px


def step_position(steps: np.ndarray) -> np.ndarray:
    """[checkpoint] float: where each step sits on the log axis (log10(step + 1): step 0 at 0).

    Examples
    --------
    >>> step_position(np.array([0, 9, 99])).tolist()
    [0.0, 1.0, 2.0]
    """
    return np.log10(np.asarray(steps, dtype=np.float64) + 1.0)


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """About `count` round tick values covering [low, high].

    Examples
    --------
    >>> nice_ticks(-0.55, 0.02)
    [-0.6, -0.4, -0.2, 0.0, 0.2]
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    base = 10 ** math.floor(math.log10(raw))
    step = next(m * base for m in (1, 2, 2.5, 5, 10) if m * base >= raw)
    first = math.floor(low / step) * step
    return [round(first + i * step, 10) for i in range(count + 3) if first + i * step <= high + step * 0.999]


def log_ticks(largest: int) -> list[int]:
    """0, 1, 10, 100 … up to the largest step.

    Examples
    --------
    >>> log_ticks(3000)
    [0, 1, 10, 100, 1000]
    """
    ticks, value = [0], 1
    while value <= max(largest, 1):
        ticks.append(value)
        value *= 10
    return ticks


def value_range(*arrays: np.ndarray) -> tuple[float, float]:
    """(min, max) of the finite values of `arrays` together; (0, 1) where none is finite.

    Examples
    --------
    >>> value_range(np.array([0.5, np.nan]), np.array([-1.0]))
    (-1.0, 0.5)
    """
    values = np.concatenate([np.ravel(a) for a in arrays]) if arrays else np.array([])
    values = values[np.isfinite(values)]
    if values.size == 0:
        return 0.0, 1.0
    return float(values.min()), float(values.max())


class PlotArea:
    """One plot area: maps (x, y) data to pixels and writes SVG pieces.

    Parameters
    ----------
    x0, y0 : float
        The plot area's top-left corner, px.
    xmax : float
        The largest x (a log step position, :func:`step_position`) drawn at the right edge.
    ylow, yhigh : float
        The values to cover; the axis runs over round ticks around them (:func:`nice_ticks`).
    colours : dict of str to str
        The theme's colours (text, grid, axis, background, muted …).

    Examples
    --------
    >>> area = PlotArea(0, 0, 2.0, 0.0, 1.0, {"text": "#222"})
    >>> area.px(1.0), area.py(1.0)
    (150.0, 0.0)
    >>> lines = area.line(np.array([0.0, 1.0, 2.0]), np.array([0.0, np.nan, 1.0]), "#000", 1)
    >>> [line.split('"')[1] for line in lines]  # NaN: a gap, two polylines
    ['0.0,170.0', '300.0,0.0']
    """

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
        """The title, the grid with its ticks (y: values, x: 0, 1, 10 … up to the largest of `steps`), the
        box and the axis labels."""
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

    def note(self, text: str) -> list[str]:
        """A line of text in the middle of the area (what an empty panel says)."""
        return [f'<text x="{self.x0 + PANEL_W / 2}" y="{self.y0 + PANEL_H / 2}" text-anchor="middle" '
                f'fill="{self.colours["text"]}">{html.escape(text)}</text>']

    def line(self, xs: np.ndarray, ys: np.ndarray, colour: str, width: float, name: str = "",
             dash: str = "") -> list[str]:
        """A polyline per run of finite values (NaN breaks the line); `dash`: an SVG stroke-dasharray."""
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
        attribute = (f' data-name="{html.escape(name)}"' if name else "") + (
            f' stroke-dasharray="{dash}"' if dash else "")
        return [f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}" '
                f'stroke-width="{width}"{attribute}/>' for points in parts]

    def dots(self, xs: np.ndarray, ys: np.ndarray, colour: str, titles: list[str], filled,
             kind: str = "") -> list[str]:
        """A circle with a hover title at each finite value: filled (class ``labelled``) or open (``dot``);
        `kind` replaces the class (the control's dots: ``control``)."""
        filled = np.broadcast_to(np.asarray(filled, dtype=bool), (len(xs),))
        parts = []
        for x, y, title, full in zip(xs, ys, titles, filled, strict=True):
            if not math.isfinite(y):
                continue
            fill = colour if full else self.colours["background"]
            parts.append(f'<circle cx="{self.px(x):.1f}" cy="{self.py(y):.1f}" r="{3 if full else 2.5}" '
                         f'fill="{fill}" stroke="{colour}" class="{kind or ("labelled" if full else "dot")}">'
                         f'<title>{html.escape(title)}</title></circle>')
        return parts


def legend(x: float, y: float, entries: list[tuple], c: dict) -> list[str]:
    """A legend at (x, y): per entry ``(name, colour)`` or ``(name, colour, dash)`` a line and its name; a
    name with a newline takes two rows."""
    parts, row = [], 0
    for entry in entries:
        name, colour = entry[0], entry[1]
        dash = f' stroke-dasharray="{entry[2]}"' if len(entry) > 2 and entry[2] else ""
        parts.append(f'<line x1="{x}" x2="{x + 16}" y1="{y + 14 * row}" y2="{y + 14 * row}" '
                     f'stroke="{colour}" stroke-width="2"{dash}/>')
        for line in name.split("\n"):
            parts.append(f'<text x="{x + 20}" y="{y + 14 * row + 3}" fill="{c["text"]}">'
                         f'{html.escape(line)}</text>')
            row += 1
    return parts


__all__ = ["PANEL_H", "PANEL_W", "PlotArea", "legend", "log_ticks", "nice_ticks", "step_position",
           "value_range"]
