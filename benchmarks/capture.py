"""Benchmark: the capture engine vs the plain sdpa forward vs eager `output_attentions`.

GPT-2-small shape (12 layers × 12 heads, width 768) with random weights, one sequence of N random tokens:

  (a) plain   — the sdpa forward, no capture
  (b) engine  — the capture engine streaming α of all 144 heads into a trivial reducer (a running sum per head)
  (c) eager   — eager attention with output_attentions=True (what other tools do)

Times: the three variants alternate --repeats rounds in one subprocess after a warm-up (a shared machine's changing
load then hits all three alike); medians are reported. Peak memory: each (variant, N) runs in its own subprocess, so
its ru_maxrss is its own. Run:

    python benchmarks/capture.py                 # N = 1024 and 4096
    python benchmarks/capture.py --lengths 1024 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

VARIANTS = ("plain", "engine", "eager")


class HeadSum:
    """A trivial reducer: Σα per (layer, head), touching every α value streamed."""

    accepts_causal_crop = True  # causal blocks come without their all-zero key tail

    def __init__(self) -> None:
        self.total = {}

    def heads_for(self, layer: int, n_heads: int):
        return range(n_heads)

    def update(self, block) -> None:
        sums = block.alpha.flatten(2).sum(-1).sum(0)  # [head]
        self.total[block.layer] = self.total.get(block.layer, 0) + sums


def _setup(n_tokens: int, threads: int, eager: bool):
    import torch
    import transformers

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_positions=max(1024, n_tokens))
    config._attn_implementation = "eager" if eager else "sdpa"
    model = transformers.GPT2LMHeadModel(config).eval()
    input_ids = torch.randint(0, config.vocab_size, (1, n_tokens))
    return model, input_ids


def _forward(variant: str, model, input_ids) -> None:
    import torch

    from probe.engine import capture

    with torch.inference_mode():
        if variant == "plain":
            model(input_ids)
        elif variant == "engine":
            with capture(model, HeadSum()):
                model(input_ids)
        else:
            previous = model.config._attn_implementation
            model.set_attn_implementation("eager")
            try:
                assert len(model(input_ids, output_attentions=True).attentions) == 12
            finally:
                model.set_attn_implementation(previous)


def measure_time(n_tokens: int, repeats: int, threads: int) -> dict:
    """In one child: plain, engine and eager forwards alternate `repeats` times after a warm-up, so a shared
    machine's changing load hits all three alike. Returns each variant's list of seconds."""
    model, input_ids = _setup(n_tokens, threads, eager=False)
    for variant in VARIANTS:
        _forward(variant, model, input_ids)
    times = {variant: [] for variant in VARIANTS}
    for _ in range(repeats):
        for variant in VARIANTS:
            start = time.perf_counter()
            _forward(variant, model, input_ids)
            times[variant].append(time.perf_counter() - start)
    return {"n": n_tokens, "times": times}


def measure_peak(variant: str, n_tokens: int, threads: int) -> dict:
    """In its own child: one variant's forward, for that process's peak RSS (ru_maxrss)."""
    model, input_ids = _setup(n_tokens, threads, eager=variant == "eager")
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _forward(variant, model, input_ids)
    _forward(variant, model, input_ids)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"variant": variant, "n": n_tokens, "peak_mib": peak / 1024, "loaded_mib": loaded / 1024}


def run_child(mode: str, n_tokens: int, repeats: int, threads: int) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--lengths", str(n_tokens), "--repeats", str(repeats),
               "--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(timings: dict[int, dict], peaks: dict[int, dict]) -> str:
    lines = ["| N | plain s | engine s | eager s | engine/plain time | eager/plain time | plain peak MiB | "
             "engine peak MiB | eager peak MiB | engine/plain peak | eager/plain peak |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in sorted(timings):
        times, peak = timings[n]["times"], peaks[n]
        a, b, c = (statistics.median(times[v]) for v in VARIANTS)
        pa, pb, pc = (peak[v]["peak_mib"] for v in VARIANTS)
        lines.append(f"| {n} | {a:.2f} | {b:.2f} | {c:.2f} | **{b / a:.2f}** | {c / a:.2f} | {pa:.0f} | {pb:.0f} | "
                     f"{pc:.0f} | **{pb / pa:.2f}** | {pc / pa:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="1024,4096", help="comma-separated sequence lengths")
    parser.add_argument("--repeats", type=int, default=3, help="alternating timed rounds (median reported)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads in each child")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.child:
        if args.child == "time":
            result = measure_time(lengths[0], args.repeats, args.threads)
        else:
            result = measure_peak(args.child, lengths[0], args.threads)
        print(json.dumps(result))
        return
    timings, peaks = {}, {}
    for n in lengths:
        timings[n] = run_child("time", n, args.repeats, args.threads)
        peaks[n] = {variant: run_child(variant, n, args.repeats, args.threads) for variant in VARIANTS}
        print(f"N={n}: {timings[n]} {peaks[n]}", file=sys.stderr)
        if "error" in timings[n] or any("error" in p for p in peaks[n].values()):
            sys.exit(f"N={n} failed: {timings[n]} {peaks[n]}")
        ratios = [b / a for a, b in zip(timings[n]["times"]["plain"], timings[n]["times"]["engine"], strict=True)]
        print(f"N={n}: engine/plain time per round: {', '.join(f'{r:.2f}' for r in ratios)}", file=sys.stderr)
    print(table(timings, peaks))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"timings": timings, "peaks": peaks}, handle, indent=2)


if __name__ == "__main__":
    main()
