"""Benchmark: what a training history costs (`probe history`, issue 42; issue 45's budget for it).

A run folder of the `natural-text` recipe's shape is written by ``probe train natural-text --set
steps=S --checkpoint-steps 0,1,…`` (10 checkpoints by default: the recipe's model and tokenizer, a few
optimizer steps — the cost of a checkpoint does not depend on how trained it is). Then, per checkpoint,
alternating in one process after a warm-up:

* **history** — ``probe.runs.history.measure``: the head classifier (previous-token and induction, the
  history's label config), the held-out losses by position and the ICL score, copying (cached by the weights'
  hash, as in `probe history`) and K-composition with the previous-token heads;
* **parts** — the same checkpoint's ``label_model`` with the same config plus one plain forward over the same
  held-out rows (``incontext.position_losses``): the work a history cannot avoid.

The ratio history / parts is the history's own overhead (composition, tables), budget ≤ 1.10×; the table
also gives seconds per checkpoint and the whole history (``probe.runs.history.history`` over every checkpoint,
timed once at the end, journal and table included).

Run (one thread on a shared machine; the load average is printed):

    OMP_NUM_THREADS=1 python benchmarks/history.py
    OMP_NUM_THREADS=1 python benchmarks/history.py --checkpoints 10 --passages 400
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=10, help="checkpoints in the run (default 10)")
    parser.add_argument("--passages", type=int, default=None,
                        help="held-out passages for the ICL score (default: every one, as probe history)")
    args = parser.parse_args()
    import torch

    from probe import models
    from probe.heads.label import label_model
    from probe.runs.checkpoints import sweep_checkpoints
    from probe.runs.history import HistoryConfig, history, measure, step_revisions
    from probe.runs.weight_cache import cached_copying_scores
    from probe.training import incontext, text

    print(f"load average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f}, torch threads "
          f"{torch.get_num_threads()}, {args.checkpoints} checkpoints")
    folder = Path(tempfile.mkdtemp(prefix="probe-history-bench-")) / "run"
    steps = ",".join(str(step) for step in range(args.checkpoints))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "probe.cli", "train", "natural-text", "--out", str(folder),
                    "--no-label", "--set", f"steps={args.checkpoints - 1}", "--checkpoint-steps", steps],
                   check=True, stdout=subprocess.DEVNULL)
    print(f"run folder written in {time.perf_counter() - started:.1f} s: {folder}")
    config = HistoryConfig(max_passages=args.passages)
    names = step_revisions(str(folder))
    checkpoints = sweep_checkpoints([str(folder)], ",".join(names), None)
    times: dict[str, list[float]] = {"history": [], "parts": []}
    for index, checkpoint in enumerate(checkpoints):
        loaded = models.load(str(folder / checkpoint.name))
        if index == 0:  # warm-up: corpus, probe sets, tokenized passages
            measure(loaded, checkpoint, config)
        order = ("history", "parts") if index % 2 == 0 else ("parts", "history")  # ABBA
        for key in order:
            started = time.perf_counter()
            if key == "history":
                measure(loaded, checkpoint, config)
            else:
                label_model(loaded, config.label, copying_of=cached_copying_scores)
                rows = text.held_out_rows(loaded.tokenizer, config.icl_late, config.split,
                                          config.max_passages)
                incontext.position_losses(loaded.model, rows, config.batch_size)
            times[key].append(time.perf_counter() - started)
    ratios = [h / p for h, p in zip(times["history"], times["parts"], strict=True)]
    started = time.perf_counter()
    history(str(folder), names, config, out=folder.parent / "history.csv", progress=False)
    whole = time.perf_counter() - started
    print(f"per checkpoint: history {statistics.median(times['history']):.2f} s, parts "
          f"{statistics.median(times['parts']):.2f} s, ratio {statistics.median(ratios):.2f}x "
          f"(pairs {', '.join(f'{r:.2f}' for r in ratios)})")
    print(f"the whole history of {len(names)} checkpoints (probe.runs.history.history, journal and table): "
          f"{whole:.1f} s ({whole / len(names):.2f} s a checkpoint)")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
