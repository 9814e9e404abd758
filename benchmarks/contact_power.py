"""Benchmark: the power of the contact test — planted contact heads of graded strength.

    OMP_NUM_THREADS=1 python benchmarks/contact_power.py --seeds 20 --out contact_power.jsonl
    python benchmarks/contact_power.py --report contact_power.jsonl        # the table again
    python benchmarks/contact_power.py --report contact_power.jsonl --svg docs/contact_power.svg  # + the plot

A **run** is one random-weight model (``benchmarks/contact_null_fpr.py``'s ``random_model``: ESM-2 8M's
shape, 6 layers × 20 heads, the class's own initialisation under ``torch.manual_seed(seed)``) on one
structure of ``tests/data`` (1aki 129 residues, 1ejg 46, 1ubi 76) with one head planted at share s: that
head's attention is replaced, row by row, by

    α' = (1 − s)·α + s·C / rowsum(C)

where α is the model's own attention of that head and C the structure's true contact map (Cβ–Cβ < 8 Å, every
separation ≥ 1, the diagonal left out; a row without a contact keeps α). The planted head (one per model,
drawn from the seed) is changed only where the contact test reads it (:class:`PlantedSink`, a
:class:`probe.proteins.sink.ContactSink` that mixes before it analyses), so the rest of the model, and its
untrained twins, are the random model's own. Each run is analysed as ``probe contacts`` does
(:func:`probe.proteins.contacts.predict_contacts` with the true map), at the defaults (K = 3 twins: p_fwer ≤
0.05 over every head and range *and* P@L above the twins' 99th percentile) and with ``--control none``
(p_fwer alone). **Detection**: the planted head is significant in at least one range (and, a column of its
own, in the long range). One JSON line per (seed, structure) holds every s; the summary gives the detection
rate per s with its exact (Clopper–Pearson) 95 % interval and the smallest s of the grid detected in at
least 80 % of runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # contact_null_fpr, beside this file

from contact_null_fpr import clopper_pearson, run_parser, run_seeds  # noqa: E402 - one definition

ROOT = Path(__file__).resolve().parents[1]
STRUCTURES = ("1aki.pdb", "pdb1ejg.pdb", "pdb1ubi.pdb")
RANGES = ("short", "medium", "long")
SHARES = (0.0, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.5, 1.0)
DECISIONS = ("twins", "none")  # the defaults (K untrained twins) and --control none
POWER = 0.8


def contact_targets(true_map: np.ndarray) -> np.ndarray:
    """[L L] float32 C / rowsum(C): each residue's true contacts (1 in `true_map`, the diagonal left out)
    with equal weight; a row without a contact is all zero (that row keeps the model's α)."""
    contacts = (np.asarray(true_map) == 1).astype(np.float32)
    np.fill_diagonal(contacts, 0.0)
    totals = contacts.sum(-1, keepdims=True)
    return np.divide(contacts, totals, out=np.zeros_like(contacts), where=totals > 0)


@dataclasses.dataclass(frozen=True)
class Plant:
    """Which head to plant, at which share, with which per-sequence targets ([L L] rows, contact_targets)."""

    layer: int
    head: int
    share: float
    targets: tuple  # per sequence of the batch: [L L] float32 or None (left alone)


def _make_sink_class():
    from probe.proteins.sink import ContactSink

    class PlantedSink(ContactSink):
        """A ContactSink whose planted head's α is mixed with the true contacts before the analysis; twins'
        sinks (``twin=True``) are left alone."""

        def __init__(self, *args, plant: Plant, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.plant = plant

        def update(self, block) -> None:
            plant = self.plant
            if not self.twin and block.layer == plant.layer and plant.head in block.heads:
                import torch

                alpha = block.alpha.clone()  # the engine reuses its buffer: never write into it
                index = block.heads.index(plant.head)
                first, n_rows = block.query_start, alpha.shape[2]
                for b, state in enumerate(self.sequences):
                    if b >= len(plant.targets) or plant.targets[b] is None:
                        continue
                    low, high = max(first, state.start), min(first + n_rows, state.stop)
                    if low >= high:
                        continue
                    target = torch.as_tensor(plant.targets[b][low - state.start:high - state.start],
                                             dtype=alpha.dtype, device=alpha.device)  # [rows L]
                    rows = alpha[b, index, low - first:high - first]  # [rows key], a view of alpha
                    mixed = (1.0 - plant.share) * rows
                    mixed[:, state.start:state.stop] += plant.share * target
                    has = target.sum(-1) > 0  # rows without a contact keep α
                    rows[has] = mixed[has]
                block = dataclasses.replace(block, alpha=alpha)
            super().update(block)

    return PlantedSink


@contextlib.contextmanager
def planted(plant: Plant):
    """Inside: :func:`probe.proteins.contacts.predict_contacts` analyses `plant`'s head mixed with the true
    contacts (the module's ContactSink swapped for :class:`PlantedSink`)."""
    from probe.proteins import contacts

    original = contacts.ContactSink
    contacts.ContactSink = functools.partial(_make_sink_class(), plant=plant)
    try:
        yield
    finally:
        contacts.ContactSink = original


def planted_heads(loaded, sequence: str, true_map: np.ndarray, layer: int, head: int, share: float):
    """The per-head table of `loaded` on `sequence` with head (layer, head) planted at `share`, no twins
    (:func:`probe.proteins.significance.with_tests` decides again with a control)."""
    from probe.proteins.contacts import predict_contacts

    with planted(Plant(layer, head, float(share), (contact_targets(true_map),))):
        return predict_contacts(loaded, sequence, true_map, per_head=True, control=0).heads


def one_structure(loaded, structure, true_map, layer: int, head: int, shares, control: int) -> dict:
    """Per share and decision: whether the planted head is significant per range, its p_fwer, P@L and the
    twins' bar; and how many other (head, range) pairs are significant."""
    from probe.proteins.contacts import predict_contacts
    from probe.proteins.significance import with_tests

    twins = predict_contacts(loaded, structure.sequence, true_map, per_head=True, control=control).control
    record = {"layer": layer, "head": head, "shares": {}}
    for share in shares:
        heads = planted_heads(loaded, structure.sequence, true_map, layer, head, share)
        entry = {}
        for decision in DECISIONS:
            table = with_tests(heads, twins if decision == "twins" else None)
            row = table[(table["layer"] == layer) & (table["head"] == head)].iloc[0]
            others = table[(table["layer"] != layer) | (table["head"] != head)]
            entry[decision] = {
                "significant": {r: bool(row[f"significant_L_{r}"]) if not _na(row[f"significant_L_{r}"])
                                else None for r in RANGES},
                "p_fwer": {r: float(row[f"p_fwer_L_{r}"]) for r in RANGES},
                "p_at_L": {r: float(row[f"p_at_L_{r}"]) for r in RANGES},
                "bar": {r: float(row[f"untrained_p99_L_{r}"]) for r in RANGES},
                "others": int(sum(others[f"significant_L_{r}"].fillna(False).astype(bool).sum()
                                  for r in RANGES)),
            }
        record["shares"][repr(float(share))] = entry
    return record


def _na(value) -> bool:
    import pandas as pd

    return value is pd.NA or (isinstance(value, float) and np.isnan(value))


def detected(entry: dict, where: str = "any") -> bool:
    """The planted head is significant in any range (`where` = "any") or in that range."""
    flags = entry["significant"]
    return any(bool(flags[r]) for r in RANGES) if where == "any" else bool(flags[where])


def rate(successes: int, trials: int) -> str:
    low, high = clopper_pearson(successes, trials)
    return f"{successes}/{trials} = {successes / trials:.2f} ({low:.2f}–{high:.2f})"


def detection_rates(records: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """{decision: [(share, detection rate in any range)]} over the runs, shares ascending."""
    shares = sorted({float(s) for record in records for s in record["shares"]})
    return {decision: [(share, float(np.mean([detected(r["shares"][repr(share)][decision])
                                              for r in records]))) for share in shares]
            for decision in DECISIONS}


def write_svg(path: Path, records: list[dict]) -> None:
    """The detection rate against s (one point per share of the grid, evenly spaced) for both decisions, with
    the 80 % line: a plain SVG, no plotting library."""
    rates = detection_rates(records)
    shares = [share for share, _ in rates["twins"]]
    width, height, left, bottom, top, right = 640, 300, 60, 50, 20, 150
    step = (width - left - right) / max(1, len(shares) - 1)
    x = [left + i * step for i in range(len(shares))]

    def y(rate: float) -> float:
        return top + (1.0 - rate) * (height - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="11">', '<rect width="100%" height="100%" fill="white"/>']
    for tick in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        parts.append(f'<line x1="{left}" x2="{x[-1]:.1f}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                     f'stroke="{"#d33" if tick == POWER else "#ddd"}"/>')
        parts.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.1f}</text>')
    for xi, share in zip(x, shares, strict=True):
        parts.append(f'<text x="{xi:.1f}" y="{height - bottom + 16}" text-anchor="middle">{share:g}</text>')
    parts.append(f'<text x="{(left + x[-1]) / 2:.1f}" y="{height - 12}" text-anchor="middle">planted share s '
                 '(grid points, evenly spaced)</text>')
    parts.append(f'<text x="14" y="{(top + height - bottom) / 2:.1f}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {(top + height - bottom) / 2:.1f})">detection rate</text>')
    styles = {"twins": ("#1f77b4", "", "defaults (3 twins)"), "none": ("#ff7f0e", ' stroke-dasharray="5,4"',
                                                                      "--control none")}
    for index, decision in enumerate(DECISIONS):
        colour, dash, label = styles[decision]
        points = " ".join(f"{xi:.1f},{y(rate):.1f}" for xi, (_, rate) in zip(x, rates[decision], strict=True))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        legend = top + 14 + 18 * index
        parts.append(f'<line x1="{x[-1] + 14:.1f}" x2="{x[-1] + 38:.1f}" y1="{legend}" y2="{legend}" '
                     f'stroke="{colour}" stroke-width="2"{dash}/>')
        parts.append(f'<text x="{x[-1] + 42:.1f}" y="{legend + 4}">{label}</text>')
    parts.append(f'<text x="{x[-1] + 14:.1f}" y="{top + 58}" fill="#d33">80 %</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def report(paths: list[str], svg: str | None = None) -> None:
    records = [json.loads(line) for path in paths for line in Path(path).read_text().splitlines()
               if line.strip()]
    if not records:
        return
    shares = sorted({float(s) for record in records for s in record["shares"]})
    runs = len(records)
    print(f"\n{records[0]['arch']}: {runs} runs ({len({r['seed'] for r in records})} seeds × "
          f"{len({r['structure'] for r in records})} structures), K = {records[0]['control']} twins, "
          f"load average {records[-1]['load']:.1f}\n")
    print("| planted share s | defaults (twins): any range | defaults: long range | `--control none`: any "
          "range | `--control none`: long range | planted head's long-range P@L (median) | twins' p99 bar "
          "(median) | other heads flagged per run (defaults) |")
    print("|---:|---|---|---|---|---:|---:|---:|")
    smallest = {}
    for share in shares:
        cells = []
        for decision in DECISIONS:
            for where in ("any", "long"):
                hits = sum(detected(r["shares"][repr(share)][decision], where) for r in records)
                cells.append(rate(hits, runs))
                if where == "any" and hits >= POWER * runs:
                    smallest.setdefault(decision, share)
        entries = [r["shares"][repr(share)]["twins"] for r in records]
        others = np.mean([entry["others"] for entry in entries])
        precision = np.nanmedian([entry["p_at_L"]["long"] for entry in entries])
        bar = np.nanmedian([entry["bar"]["long"] for entry in entries])
        print(f"| {share:g} | " + " | ".join(cells) + f" | {precision:.3f} | {bar:.3f} | {others:.2f} |")
    for decision in DECISIONS:
        found = smallest.get(decision)
        label = "defaults (twins)" if decision == "twins" else "--control none"
        print(f"\nsmallest s of the grid detected in ≥ {POWER:.0%} of runs, {label}: "
              + (f"{found:g}" if found is not None else "none"))
    if svg:
        write_svg(Path(svg), records)
        print(f"\nwrote the plot to {svg}")


def main(argv: list[str] | None = None) -> int:
    parser = run_parser(__doc__.splitlines()[0], 20, "contact_power.jsonl")
    parser.add_argument("--shares", type=float, nargs="+", default=list(SHARES))
    parser.add_argument("--svg", help="also draw the detection rate against s to this SVG file")
    args = parser.parse_args(argv)
    if args.report:
        report(args.report, args.svg)
        return 0

    def measure(loaded, seed: int, structure, true_map) -> tuple[dict, str]:
        rng = np.random.default_rng(seed)  # the planted head: one per seed, the same on every structure
        layer, head = int(rng.integers(loaded.n_layers)), int(rng.integers(loaded.n_heads))
        record = one_structure(loaded, structure, true_map, layer, head, args.shares, args.control)
        return record, f" L{layer}H{head}:"

    out = Path(args.out)
    run_seeds(args.arch, range(args.start, args.start + args.seeds), args.control, out, measure)
    report([str(out)], args.svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
