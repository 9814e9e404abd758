"""Benchmark: the fixed cost of one `label_model` call — everything it does outside its capture forwards.

A model with GPT-2-small's head layout (12 layers × 12 heads = 144 heads) but a narrow width (96), so the
forwards are short and what is left is the per-call work: probe building, target patterns, chance levels, the
clustered bootstrap, the table. Types previous_token, duplicate_token and induction (one probe set), 2 probes
of 256 tokens in one batch, no ablation, output_share on (the defaults otherwise). The model is loaded once;
the first call warms the per-model caches (tokenization of the corpus sample, excluded token ids); then each
timed call's forward time (`run_sink`, which runs the capture forward and the sinks' accumulation) is
subtracted from its total. Run:

    python benchmarks/fixed_cost.py               # 9 timed calls, 1 thread
    python benchmarks/fixed_cost.py --calls 21 --profile
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=9, help="timed label_model calls (default 9)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one call")
    args = parser.parse_args()

    import torch

    import probe.heads.label as label
    import probe.heads.label.scoring as label_scoring
    from probe import models
    from probe.zoo.tiny import save_tiny

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as scratch:
        path = save_tiny("gpt2", f"{scratch}/model", seed=0, n_positions=512, n_layer=12,
                         n_head=12, n_embd=96)
        loaded = models.load(str(path))
    config = label.LabelConfig(types=("previous_token", "duplicate_token", "induction"), examples=2,
                               seq_len=256, ablate="none")
    forwards: list[float] = []
    run_sink = label_scoring.run_sink

    def timed_run_sink(*positional, **keywords):
        start = time.perf_counter()
        try:
            return run_sink(*positional, **keywords)
        finally:
            forwards.append(time.perf_counter() - start)

    label_scoring.run_sink = timed_run_sink  # this script's own instrument, restored below
    try:
        label.label_model(loaded, config)  # warm-up: per-model caches
        totals, fixed = [], []
        for _ in range(args.calls):
            forwards.clear()
            start = time.perf_counter()
            label.label_model(loaded, config)
            totals.append(time.perf_counter() - start)
            fixed.append(totals[-1] - sum(forwards))
    finally:
        label_scoring.run_sink = run_sink
    print(f"144 heads, 3 types, 2 probes x 256 tokens, {args.threads} thread(s), {args.calls} calls")
    print("call s:      " + ", ".join(f"{t:.3f}" for t in totals))
    print("fixed s:     " + ", ".join(f"{t:.3f}" for t in fixed))
    print(f"fixed cost per call: median {statistics.median(fixed):.3f} s, min {min(fixed):.3f} s "
          f"(whole call: median {statistics.median(totals):.3f} s)")
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(label.label_model, loaded, config)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
