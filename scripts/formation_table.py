"""The formation point of each training run against Aoyama et al.'s law (docs/zoo.md, issue 54): one table row
per history table, and one SVG plot of the best induction score and the ICL score against training tokens.

    python scripts/formation_table.py --run 4,256,0,runs/c256-s0/history.csv --run 4,256,1,... \
        --plot docs/stdlib_code_formation.svg

Each --run is B,C,SEED,HISTORY_CSV[,LABEL] (a table `probe history` writes; LABEL names the recipe in the
table's first column, e.g. "width 128, constant lr"); the plot draws the runs of the first run's (B, C) and
label, and marks the law's point.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from probe.runs.formation import formation, predicted_tokens
from probe.views.svg_plot import PANEL_H, PANEL_W, PlotArea, legend, step_position, value_range
from probe.views.timeline import BOTTOM, GAP_X, LEFT, PALETTE, THEMES, TOP


def parse_run(text: str) -> tuple[int, int, int, Path, str]:
    batch, context, seed, rest = text.split(",", 3)
    path, _, label = rest.partition(",")
    return int(batch), int(context), int(seed), Path(path), label


def millions(tokens: float | None) -> str:
    return "–" if tokens is None else f"{tokens / 1e6:.2f} M"


def table_rows(runs) -> list[str]:
    lines = ["| run | B | C | seed | checkpoints | predicted point | formation checkpoint (best induction "
             "reaches half its last value) | steepest ICL drop (later checkpoint) | checkpoints apart | "
             "best induction, last | ICL drop (first → lowest) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for batch, context, seed, path, label in runs:
        table = pd.read_csv(path)
        point = formation(table, batch * context)
        law = predicted_tokens(batch, context)
        formed = ("none (at chance from the first checkpoint)" if point.formation_step is None else
                  f"step {point.formation_step:,} = {millions(point.formation_tokens)} "
                  f"({point.formation_tokens / law:.2f}×)")
        lines.append(
            f"| {label} | {batch} | {context} | {seed} | {(table['row'] == 'checkpoint').sum()} | "
            f"{millions(law)} | {formed} | "
            f"step {point.steepest_drop_step:,} = {millions(point.steepest_drop_tokens)} "
            f"(−{point.steepest_drop:.2f} nats) | "
            f"{'–' if point.checkpoints_apart is None else point.checkpoints_apart} | "
            f"{point.final_induction:.2f} | {point.icl_drop:.2f} nats |")
    return lines


def plot(runs, path: Path) -> None:
    """Two panels (best induction score; ICL score) against the training step on the timeline's log axis
    (:mod:`probe.views.svg_plot`), one line per seed of the first run's (B, C), the law's step dashed."""
    batch, context, label = runs[0][0], runs[0][1], runs[0][4]
    series = []
    for _, _, seed, csv, _ in [run for run in runs if (run[0], run[1], run[4]) == (batch, context, label)]:
        table = pd.read_csv(csv)
        checkpoints = table[table["row"] == "checkpoint"].sort_values("step")
        steps = checkpoints["step"].to_numpy(int)  # [checkpoint]
        best = table[table["row"] == "head"].groupby("step")["induction"].max().reindex(steps).to_numpy(float)
        series.append((seed, steps, best, checkpoints["icl_score"].to_numpy(float)))
    law_step = round(predicted_tokens(batch, context) / (batch * context))
    all_steps = np.concatenate([steps for _, steps, _, _ in series])
    xmax = float(step_position(np.array([all_steps.max()]))[0])
    colours = THEMES["light"]
    width, height = LEFT + 2 * PANEL_W + GAP_X + 20, TOP + PANEL_H + BOTTOM + 40
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="11">', '<rect width="100%" height="100%" fill="white"/>']
    named = f", {label}" if label else ""
    panels = ((f"best induction score, any head (B = {batch}, C = {context}{named})", "score", 2),
              ("ICL score: loss at token 120 − loss at token 12", "nats", 3))
    for number, (title, label, column) in enumerate(panels):
        values = [entry[column] for entry in series]
        area = PlotArea(LEFT + number * (PANEL_W + GAP_X), TOP, xmax, *value_range(*values), colours)
        parts += area.frame(title, label, all_steps) + area.mark(law_step)
        for index, (seed, steps, *_) in enumerate(series):
            parts += area.line(step_position(steps), values[index], PALETTE[index % len(PALETTE)], 1.5,
                               name=f"seed {seed}")
    entries = [(f"seed {seed}", PALETTE[index % len(PALETTE)]) for index, (seed, *_) in enumerate(series)]
    parts += legend(LEFT + PANEL_W + 55, TOP + 10, entries, colours)  # in the gap between the panels
    parts += [f'<text x="{LEFT}" y="{height - 10}" fill="{colours["text"]}">dashed: the law\'s point, '
              f"10^5.7 · √(B·C) tokens = step {law_step:,}</text>", "</svg>"]
    path.write_text("\n".join(parts) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", type=parse_run, required=True,
                        metavar="B,C,SEED,CSV[,LABEL]")
    parser.add_argument("--plot", type=Path, help="write the SVG plot here")
    args = parser.parse_args()
    print("\n".join(table_rows(args.run)))
    if args.plot:
        plot(args.run, args.plot)


if __name__ == "__main__":
    main()
