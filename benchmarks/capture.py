"""Benchmark: the capture engine vs the plain sdpa forward vs eager `output_attentions`.

GPT-2-small shape (12 layers × 12 heads, width 768) with random weights, one sequence of N random tokens:

  (a) plain   — the sdpa forward, no capture
  (b) engine  — the capture engine streaming α of all 144 heads into a trivial reducer (a running sum per head)
  (c) eager   — eager attention with output_attentions=True (what other tools do)

Each (variant, N) runs in its own subprocess, so its peak memory (ru_maxrss) is its own. Times are the median of
--repeats forwards after one warm-up. Run:

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


def measure(variant: str, n_tokens: int, repeats: int, threads: int) -> dict:
    """Runs inside the child process: load, warm up, time `repeats` forwards, report median time and peak RSS."""
    import torch
    import transformers

    from probe.capture import capture

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_positions=max(1024, n_tokens))
    config._attn_implementation = "eager" if variant == "eager" else "sdpa"
    model = transformers.GPT2LMHeadModel(config).eval()
    input_ids = torch.randint(0, config.vocab_size, (1, n_tokens))
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def forward():
        with torch.inference_mode():
            if variant == "plain":
                model(input_ids)
            elif variant == "engine":
                with capture(model, HeadSum()):
                    model(input_ids)
            else:
                out = model(input_ids, output_attentions=True)
                assert len(out.attentions) == 12

    forward()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        forward()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"variant": variant, "n": n_tokens, "seconds": statistics.median(times), "peak_mib": peak / 1024,
            "loaded_mib": rss_loaded / 1024}


def run_child(variant: str, n_tokens: int, repeats: int, threads: int) -> dict:
    command = [sys.executable, __file__, "--child", variant, "--lengths", str(n_tokens), "--repeats", str(repeats),
               "--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"variant": variant, "n": n_tokens, "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> str:
    lines = ["| N | plain s | engine s | eager s | engine/plain time | eager/plain time | plain peak MiB | "
             "engine peak MiB | eager peak MiB | engine/plain peak | eager/plain peak |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in sorted({r["n"] for r in results}):
        row = {r["variant"]: r for r in results if r["n"] == n}
        if any("error" in row.get(v, {"error": 1}) for v in VARIANTS):
            lines.append(f"| {n} | " + " | ".join(str(row.get(v, {}).get("error", "")) for v in VARIANTS) + " |")
            continue
        a, b, c = (row[v] for v in VARIANTS)
        lines.append(
            f"| {n} | {a['seconds']:.2f} | {b['seconds']:.2f} | {c['seconds']:.2f} | "
            f"**{b['seconds'] / a['seconds']:.2f}** | {c['seconds'] / a['seconds']:.2f} | "
            f"{a['peak_mib']:.0f} | {b['peak_mib']:.0f} | {c['peak_mib']:.0f} | "
            f"**{b['peak_mib'] / a['peak_mib']:.2f}** | {c['peak_mib'] / a['peak_mib']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="1024,4096", help="comma-separated sequence lengths")
    parser.add_argument("--repeats", type=int, default=3, help="timed forwards per variant (median reported)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads in each child")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.child:
        print(json.dumps(measure(args.child, lengths[0], args.repeats, args.threads)))
        return
    results = []
    for n in lengths:
        for variant in VARIANTS:
            result = run_child(variant, n, args.repeats, args.threads)
            print(f"N={n} {variant}: {result}", file=sys.stderr)
            results.append(result)
    print(table(results))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
