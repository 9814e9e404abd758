"""Benchmark: the cost of a circuit (probe.circuits) as ratios to plain forwards, in one process, alternating.

Two measurements, each against its own plain reference, alternating --repeats rounds after a warm-up (a shared
machine's load then hits both alike); the table shows medians of the per-round ratios and the load average
before and after.

  patching    — :func:`probe.circuits.patching.patch_effects` on zoo:induction's paired induction probes
                (--examples, the first copy's tokens resampled): the patches the circuit search runs for the
                four induction heads — each layer-0 head into the receivers' Q, K or V jointly (12), every
                sender → receiver edge alone (48), 8 random controls of the same shape, the induction heads'
                own outputs on every path (1) — recorded clean and corrupted forwards and the patched forwards
                (--max-rows rows each).
  same rows   — the plain reference: the model's own forwards (no hooks, no capture) over exactly the same
                batches: the clean and the corrupted batch, then the clean batch repeated as often, in the
                same chunks, as the patched forwards run it. The ratio is what recording and splicing add per
                forwarded row; the budget is ≤ 2.

  composition — :func:`probe.circuits.composition.composition_scores` for every pair in causal order of a
                GPT-2-small shape (transformers.GPT2Config defaults: 12 layers × 12 heads, width 768, seeded
                random weights), Q, K and V, with the random baseline (--n-random pairs per receiver rank),
                float64 (the default) and --dtype float32.
  forward     — one plain forward of the same model over one --seq-len-token sequence (the unit the ratio is
                in: "composition of every pair costs N forwards").

Run:

    OMP_NUM_THREADS=1 python benchmarks/circuits.py                # 3 rounds
    OMP_NUM_THREADS=1 python benchmarks/circuits.py --repeats 5 --examples 32
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time


def _seconds(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def _patching_runs(args: argparse.Namespace):
    """(patching, same rows, what): two callables timing the same forwarded rows with and without the
    path-patching hooks, and a dict describing the run."""
    import torch

    from probe import models
    from probe.circuits.corruption import corrupted_pairs
    from probe.circuits.patching import MODEL_INPUTS, control_patches, patch_effects
    from probe.engine.paths import PathPatch
    from probe.heads.label import LabelConfig

    loaded = models.load("zoo:induction")
    pairs = corrupted_pairs(loaded, "induction", LabelConfig(seed=0), args.examples)
    receivers = [(1, head) for head in range(loaded.n_heads)]
    senders = [(0, head) for head in range(loaded.n_heads)]
    patches = [PathPatch((sender,), tuple((*receiver, mode) for receiver in receivers))
               for sender in senders for mode in "QKV"]
    patches += [PathPatch((sender,), ((*receiver, mode),)) for sender in senders for receiver in receivers
                for mode in "QKV"]
    patches += control_patches(receivers, [(sender, "K") for sender in senders], loaded.attention_layers,
                               loaded.n_heads, 8, 0, ("Q", "K", "V"))
    patches.append(PathPatch(tuple(receivers), downstream=True))
    model = loaded.model

    def patching():
        return patch_effects(loaded, pairs, patches, max_rows=args.max_rows)

    rows_per = max(len(batch.clean["input_ids"]) for batch in pairs.batches)
    per_forward = max(1, args.max_rows // rows_per)
    chunks = [len(patches[start:start + per_forward]) for start in range(0, len(patches), per_forward)]

    def inputs(batch: dict, copies: int = 1) -> dict:
        return {name: batch[name].repeat(copies, *([1] * (batch[name].dim() - 1)))
                for name in MODEL_INPUTS if name in batch}

    def same_rows():
        with torch.inference_mode():
            for batch in pairs.batches:
                model(**inputs(batch.clean)).logits.float().log_softmax(-1)
                model(**inputs(batch.corrupted)).logits.float().log_softmax(-1)
                for copies in chunks:
                    model(**inputs(batch.clean, copies)).logits.float().log_softmax(-1)

    measured = patching()
    what = {"patches": len(patches), "examples": pairs.examples, "batches": len(pairs.batches),
            "forwards": measured.forwards, "rows": measured.rows,
            "seq": int(pairs.batches[0].clean["input_ids"].shape[1])}
    return patching, same_rows, what


def _composition_runs(args: argparse.Namespace):
    """(composition, forward, what) on a GPT-2-small-shaped model with seeded random weights."""
    import torch
    import transformers

    from probe.circuits.composition import composition_cost, composition_scores
    from probe.models import LoadedModel

    config = transformers.GPT2Config(n_positions=max(1024, args.seq_len))
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    loaded = LoadedModel(model, None, "causal_lm", "gpt2-small-shape-random", "random")
    ids = torch.randint(0, config.vocab_size, (1, args.seq_len))
    dtype = {"float64": torch.float64, "float32": torch.float32}[args.dtype]

    def composition():
        return composition_scores(loaded, n_random=args.n_random, dtype=dtype)

    def forward():
        with torch.inference_mode():
            model(input_ids=ids).logits[0, -1, :1].item()

    table = composition()
    pairs = len(table) // 3
    what = {"pairs": pairs, "rows": len(table), "dtype": args.dtype, "n_random": args.n_random,
            "multiply_adds": composition_cost(pairs, 1, config.n_embd, config.n_embd // config.n_head,
                                              modes=3)}
    return composition, forward, what


def _alternate(first, second, repeats: int) -> tuple[list[float], list[float]]:
    first(), second()  # warm-up
    a, b = [], []
    for _ in range(repeats):
        a.append(_seconds(first))
        b.append(_seconds(second))
    return a, b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--examples", type=int, default=16, help="paired induction probes (default 16)")
    parser.add_argument("--max-rows", type=int, default=64, help="rows per patched forward (default 64)")
    parser.add_argument("--seq-len", type=int, default=1024, help="tokens of the reference forward")
    parser.add_argument("--n-random", type=int, default=200, help="random pairs of the baseline")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip", choices=("patching", "composition"), action="append", default=[])
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    rows = []
    if "patching" not in args.skip:
        patching, same_rows, what = _patching_runs(args)
        ours, plain = _alternate(patching, same_rows, args.repeats)
        ratios = [a / b for a, b in zip(ours, plain, strict=True)]
        described = ", ".join(f"{k} {v}" for k, v in what.items())
        rows.append((f"path patching, zoo:induction (induction, {described})", statistics.median(ours),
                     "same rows, plain forwards", statistics.median(plain), statistics.median(ratios), "≤ 2"))
    if "composition" not in args.skip:
        composition, forward, what = _composition_runs(args)
        ours, plain = _alternate(composition, forward, args.repeats)
        ratios = [a / b for a, b in zip(ours, plain, strict=True)]
        rows.append(("composition, every pair of GPT-2 small's shape (" + ", ".join(
            f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in what.items()) + ")",
            statistics.median(ours), f"one forward of {args.seq_len} tokens", statistics.median(plain),
            statistics.median(ratios), "stated"))
    load_after = os.getloadavg()
    print(f"threads {args.threads}, repeats {args.repeats} (medians), load average before "
          f"{load_before[0]:.2f} {load_before[1]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f}, "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB\n")
    print("| measured | s | reference | s | ratio | budget |")
    print("|---|---:|---|---:|---:|---|")
    for name, ours, reference, plain, ratio, budget in rows:
        print(f"| {name} | {ours:.3f} | {reference} | {plain:.3f} | {ratio:.2f}× | {budget} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
