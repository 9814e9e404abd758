"""The formation point of each training run against Aoyama et al.'s law (docs/zoo.md, issue 54): one table row
per history table, and one SVG plot of the best induction score and the ICL score against training tokens.

    python scripts/formation_table.py --run 4,256,0,runs/c256-s0/history.csv --run 4,256,1,... \
        --plot docs/stdlib_code_formation.svg

Each --run is B,C,SEED,HISTORY_CSV (a table `probe history` writes); the plot draws the runs of the first
run's (B, C) and marks the law's point.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from probe.runs.formation import formation, predicted_tokens

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


def parse_run(text: str) -> tuple[int, int, int, Path]:
    batch, context, seed, path = text.split(",", 3)
    return int(batch), int(context), int(seed), Path(path)


def millions(tokens: float | None) -> str:
    return "–" if tokens is None else f"{tokens / 1e6:.2f} M"


def table_rows(runs) -> list[str]:
    lines = ["| B | C | seed | predicted point | formation checkpoint (best induction reaches half its last "
             "value) | steepest ICL drop (later checkpoint) | checkpoints apart | best induction, last | "
             "ICL drop (first → lowest) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for batch, context, seed, path in runs:
        table = pd.read_csv(path)
        point = formation(table, batch * context)
        law = predicted_tokens(batch, context)
        formed = ("none (at chance from the first checkpoint)" if point.formation_step is None else
                  f"step {point.formation_step:,} = {millions(point.formation_tokens)} "
                  f"({point.formation_tokens / law:.2f}×)")
        lines.append(
            f"| {batch} | {context} | {seed} | {millions(law)} | {formed} | "
            f"step {point.steepest_drop_step:,} = {millions(point.steepest_drop_tokens)} "
            f"(−{point.steepest_drop:.2f} nats) | "
            f"{'–' if point.checkpoints_apart is None else point.checkpoints_apart} | "
            f"{point.final_induction:.2f} | {point.icl_drop:.2f} nats |")
    return lines


def plot(runs, path: Path) -> None:
    """Two panels (best induction score; ICL score) against log training tokens, one line per seed."""
    width, height, left, top, panel_w, panel_h, gap = 720, 300, 60, 30, 290, 200, 70
    batch, context = runs[0][0], runs[0][1]
    same = [run for run in runs if run[:2] == (batch, context)]
    series = []
    for _, _, seed, csv in same:
        table = pd.read_csv(csv)
        checkpoints = table[table["row"] == "checkpoint"].sort_values("step")
        best = table[table["row"] == "head"].groupby("step")["induction"].max()
        steps = [int(s) for s in checkpoints["step"] if s > 0]
        series.append((seed, steps, [float(best[s]) for s in steps],
                       [float(v) for s, v in zip(checkpoints["step"], checkpoints["icl_score"], strict=True)
                        if s > 0]))
    tokens_per_step = batch * context
    low = math.log10(min(s for _, steps, _, _ in series for s in steps) * tokens_per_step)
    high = math.log10(max(s for _, steps, _, _ in series for s in steps) * tokens_per_step)
    law = math.log10(predicted_tokens(batch, context))

    def x_of(panel: int, tokens: float) -> float:
        return left + panel * (panel_w + gap) + (math.log10(tokens) - low) / (high - low) * panel_w

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>']
    panels = (("best induction score (any head)", 2, 0.0, 0.5), ("ICL score, nats (token 120 − token 12)", 3,
                                                                   -0.8, 0.1))
    for number, (title, column, y_low, y_high) in enumerate(panels):
        x0 = left + number * (panel_w + gap)

        def y_of(value: float, y_low=y_low, y_high=y_high) -> float:
            return top + panel_h - (value - y_low) / (y_high - y_low) * panel_h

        parts.append(f'<text x="{x0 + panel_w / 2}" y="{top - 10}" text-anchor="middle">{title}</text>')
        parts.append(f'<rect x="{x0}" y="{top}" width="{panel_w}" height="{panel_h}" fill="none" '
                     'stroke="#888"/>')
        for tick in (1e5, 1e6, 1e7):
            if low <= math.log10(tick) <= high:
                x = x_of(number, tick)
                parts.append(f'<line x1="{x:.1f}" y1="{top + panel_h}" x2="{x:.1f}" y2="{top + panel_h + 4}" '
                             'stroke="#888"/>')
                parts.append(f'<text x="{x:.1f}" y="{top + panel_h + 16}" text-anchor="middle">'
                             f'{tick / 1e6:g}M</text>')
        for value in (y_low, (y_low + y_high) / 2, y_high):
            parts.append(f'<text x="{x0 - 6}" y="{y_of(value) + 4:.1f}" text-anchor="end">{value:.2f}</text>')
        x = x_of(number, 10 ** law)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + panel_h}" stroke="#444" '
                     'stroke-dasharray="4 3"><title>the law: 10^5.7 · √(B·C) tokens</title></line>')
        parts.append(f'<text x="{x + 3:.1f}" y="{top + 12}">law</text>')
        parts.append(f'<text x="{x0 + panel_w / 2}" y="{top + panel_h + 32}" text-anchor="middle">'
                     f'training tokens (B = {batch}, C = {context})</text>')
        for index, (seed, steps, *values) in enumerate(series):
            points = " ".join(f"{x_of(number, s * tokens_per_step):.1f},{y_of(v):.1f}"
                              for s, v in zip(steps, values[column - 2], strict=True) if not math.isnan(v))
            colour = COLOURS[index % len(COLOURS)]
            parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5">'
                         f'<title>seed {seed}</title></polyline>')
            if number == 0:
                parts.append(f'<text x="{x0 + 6}" y="{top + 14 + 13 * index}" fill="{colour}">seed {seed}'
                             '</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", type=parse_run, required=True, metavar="B,C,SEED,CSV")
    parser.add_argument("--plot", type=Path, help="write the SVG plot here")
    args = parser.parse_args()
    print("\n".join(table_rows(args.run)))
    if args.plot:
        plot(args.run, args.plot)


if __name__ == "__main__":
    main()
