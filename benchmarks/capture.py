"""Benchmark: the capture engine vs the plain sdpa forward vs eager `output_attentions`.

GPT-2-small shape (12 layers × 12 heads, width 768) with random weights — the model body (GPT2Model: the LM
head's [N, 50257] logits would add the same cost to every variant and hide the attention's share) — one
sequence of N random tokens:

  (a) plain    — the sdpa forward, no capture
  (b) engine   — the capture engine streaming dense α blocks of all 144 heads into a trivial Python reducer
                 (a running Σα per head, which reads every α value)
  (c) reduced  — the capture engine with a row-reduction sink (probe.engine.KeyMassSink: every head's mass
                 on the first four keys and on every key): the engine sums α·w in the product that gives the
                 attention output, so at N ≥ 2,048 on a CPU the fused tile kernel never writes α out of its
                 tiles
  (d) eager    — eager attention with output_attentions=True (what other tools do), run only where its 144
                 [N, N] float32 weights fit under --eager-limit-gib; elsewhere the allocation it would need
                 is reported

With --arch gemma2 the model is a Gemma-2-shaped body of the same size (12 layers × 12 heads, width 768, head
size 64, sliding-window 4096 / full layers alternating) whose scores are soft-capped (c = 50): no fused kernel
computes them, so the engine runs its blockwise softmax with the cap, and the model's own implementation —
"plain" — is eager attention without output_attentions (transformers has no sdpa path for soft-capping).

Times: the three variants alternate --repeats rounds in one subprocess after a warm-up (a shared machine's
changing load then hits all three alike); medians are reported. Peak memory: each (variant, N) runs in its own
subprocess, so its ru_maxrss is its own.

With --device cuda (benchmarks/gpu.sh runs it) the model runs on the GPU in --dtype (bfloat16 there: plain
sdpa then takes the flash kernel, and so does the engine's fused call), times are taken between
torch.cuda.synchronize() calls, and the peak is the device's own (torch.cuda.max_memory_allocated after a
reset, per variant, in the timing child: no peak children). Run:

    python benchmarks/capture.py                 # N = 1024, 4096 and 16384
    python benchmarks/capture.py --lengths 1024 --repeats 5
    python benchmarks/capture.py --arch gemma2 --lengths 1024,4096   # soft-capping: capture vs eager
    python benchmarks/capture.py --device cuda --dtype bfloat16 --lengths 1024,4096,16384,32768
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time

VARIANTS = ("plain", "engine", "reduced", "eager")
LAYERS, HEADS = 12, 12


def eager_bytes(n_tokens: int) -> int:
    """What output_attentions returns: one [1, heads, N, N] float32 tensor per layer, all kept."""
    return LAYERS * HEADS * n_tokens * n_tokens * 4


class HeadSum:
    """A trivial reducer: Σα per (layer, head), touching every α value streamed."""

    def __init__(self) -> None:
        self.total = {}

    def needs(self, layer: int, n_heads: int, n_query: int):
        from probe.engine import SinkNeeds

        # causal blocks come without their all-zero key tail
        return SinkNeeds(heads=tuple(range(n_heads)), causal_crop=True)

    def update(self, block) -> None:
        sums = block.alpha.flatten(2).sum(-1).sum(0)  # [head]
        self.total[block.layer] = self.total.get(block.layer, 0) + sums


def _setup(n_tokens: int, threads: int, eager: bool, layers: int = LAYERS):
    import torch
    import transformers

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if ARCH == "gemma2":  # soft-capped scores: the model's own implementation is eager
        config = transformers.Gemma2Config(
            hidden_size=768, num_hidden_layers=layers, num_attention_heads=12, num_key_value_heads=12,
            head_dim=64, intermediate_size=3072, vocab_size=32000,
            max_position_embeddings=max(1024, n_tokens), sliding_window=4096,
            layer_types=["sliding_attention", "full_attention"] * (layers // 2) + (
                ["sliding_attention"] if layers % 2 else []), attn_logit_softcapping=50.0)
        config._attn_implementation = "eager"
        model = transformers.Gemma2Model(config).eval()
        input_ids = torch.randint(0, config.vocab_size, (1, n_tokens))
        return model.to(DEVICE, DTYPE), input_ids.to(DEVICE)
    config = transformers.GPT2Config(n_positions=max(1024, n_tokens), n_layer=layers)
    config._attn_implementation = "eager" if eager else "sdpa"
    model = transformers.GPT2Model(config).eval()
    input_ids = torch.randint(0, config.vocab_size, (1, n_tokens))
    return model.to(DEVICE, DTYPE), input_ids.to(DEVICE)


USE_CACHE = False  # a forward for analysis keeps no KV cache (its per-layer tensors only fragment the heap)
BLOCK_BYTES = None  # --block-mib: the engine's α block budget (default: capture's own)
ARCH = "gpt2"  # --arch: gpt2 (sdpa) or gemma2 (soft-capped scores, eager as the model's own implementation)
DEVICE = "cpu"  # --device
DTYPE = None  # --dtype: the model's dtype (None: float32)
DTYPE_NAME = None  # its name, for the children's command lines


def _forward(variant: str, model, input_ids) -> None:
    import torch

    from probe.engine import DEFAULT_BLOCK_BYTES, KeyMassSink, capture

    with torch.inference_mode():
        if variant == "plain":
            model(input_ids, use_cache=USE_CACHE)
        elif variant == "engine":
            with capture(model, HeadSum(), block_bytes=BLOCK_BYTES or DEFAULT_BLOCK_BYTES):
                model(input_ids, use_cache=USE_CACHE)
        elif variant == "reduced":
            n = input_ids.shape[1]
            sink = KeyMassSink({"first four keys": torch.arange(n)[None] < 4, "every key": torch.ones(1, n)})
            with capture(model, sink, block_bytes=BLOCK_BYTES or DEFAULT_BLOCK_BYTES):
                model(input_ids, use_cache=USE_CACHE)
            every = sink.result()["every key"]  # [batch layer head]: each row's α sums to 1
            # float32: 1e-4; bf16 / fp16: α is rebuilt in float32 from the rounded q, k and the kernel's LSE
            # (rows sum to 1 within 6.5e-5 on the CPU kernel, docs/engine.md), averaged over the rows here
            assert (every - 1).abs().max() < (1e-4 if DTYPE in (None, torch.float32) else 1e-3), every
        else:
            previous = model.config._attn_implementation
            model.set_attn_implementation("eager")
            try:
                out = model(input_ids, output_attentions=True, use_cache=USE_CACHE)
                assert len(out.attentions) == model.config.num_hidden_layers
            finally:
                model.set_attn_implementation(previous)


def measure_time(n_tokens: int, repeats: int, threads: int, variants=VARIANTS, layers: int = LAYERS) -> dict:
    """In one child: plain, engine and eager forwards alternate `repeats` times after a warm-up, so a shared
    machine's changing load hits all three alike. Returns each variant's list of seconds."""
    model, input_ids = _setup(n_tokens, threads, eager=False, layers=layers)
    cuda = DEVICE.startswith("cuda")
    peaks = {}
    for variant in variants:  # the warm-up; on a GPU also each variant's peak, from a reset
        if cuda:
            _synchronize()
            _torch_cuda().reset_peak_memory_stats()
        _forward(variant, model, input_ids)
        if cuda:
            _synchronize()
            peaks[variant] = {"variant": variant, "n": n_tokens,
                              "peak_mib": _torch_cuda().max_memory_allocated() / 2**20}
    times = {variant: [] for variant in variants}
    for _ in range(repeats):
        for variant in variants:
            _synchronize()
            start = time.perf_counter()
            _forward(variant, model, input_ids)
            _synchronize()
            times[variant].append(time.perf_counter() - start)
    return {"n": n_tokens, "times": times, **({"peaks": peaks} if cuda else {})}


def _torch_cuda():
    import torch

    return torch.cuda


def _synchronize() -> None:
    """Wait for the GPU's queued work (a no-op on the CPU), so that a time covers the kernels it launched."""
    if DEVICE.startswith("cuda"):
        _torch_cuda().synchronize()


def measure_peak(variant: str, n_tokens: int, threads: int, layers: int = LAYERS) -> dict:
    """In its own child: one variant's forward, for that process's peak RSS (ru_maxrss)."""
    model, input_ids = _setup(n_tokens, threads, eager=variant == "eager", layers=layers)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _forward(variant, model, input_ids)
    _forward(variant, model, input_ids)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"variant": variant, "n": n_tokens, "peak_mib": peak / 1024, "loaded_mib": loaded / 1024}


def run_child(mode: str, n_tokens: int, repeats: int, threads: int, eager: bool = True,
              layers: int = LAYERS) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--lengths", str(n_tokens), "--repeats",
               str(repeats), "--threads", str(threads), "--layers", str(layers), "--arch",
               ARCH, "--device", DEVICE] + ([] if eager else ["--no-eager"])
    if DTYPE_NAME:
        command += ["--dtype", DTYPE_NAME]
    if BLOCK_BYTES:
        command += ["--block-mib", str(BLOCK_BYTES / 2**20)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(timings: dict[int, dict], peaks: dict[int, dict], limit_gib: float) -> str:
    """Medians per N: times, their ratios to plain, peaks and theirs (dense blocks, row reductions, eager)."""
    lines = ["| N | plain s | engine s | reduced s | eager s | engine/plain time | reduced/plain time | "
             "eager/plain time | plain peak MiB | engine/plain peak | reduced/plain peak | "
             "eager/plain peak |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in sorted(timings):
        times, peak = timings[n]["times"], peaks[n]
        a, b, r = (statistics.median(times[v]) for v in ("plain", "engine", "reduced"))
        # nan where the peaks were not measured (--no-peaks)
        pa, pb, pr = (peak[v]["peak_mib"] if v in peak else math.nan for v in ("plain", "engine", "reduced"))
        if "eager" in times:
            c = statistics.median(times["eager"])
            pc = peak["eager"]["peak_mib"] if "eager" in peak else math.nan
            eager_s, eager_time, eager_peak = f"{c:.2f}", f"{c / a:.2f}", f"{pc / pa:.2f}"
        else:
            eager_s, eager_time, eager_peak = (
                f"not run (needs {eager_bytes(n) / 2**30:.0f} GiB > {limit_gib:g})", "—", "—")
        lines.append(f"| {n} | {a:.2f} | {b:.2f} | {r:.2f} | {eager_s} | **{b / a:.2f}** | **{r / a:.2f}** | "
                     f"{eager_time} | {pa:.0f} | **{pb / pa:.2f}** | **{pr / pa:.2f}** | {eager_peak} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="1024,4096,16384", help="comma-separated sequence lengths")
    parser.add_argument("--repeats", type=int, default=3, help="alternating timed rounds (median reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in each child")
    parser.add_argument("--eager-limit-gib", type=float, default=4.0,
                        help="run eager output_attentions only where its weights fit under this (GiB)")
    parser.add_argument("--layers", type=int, default=LAYERS,
                        help="layers (default 12); every layer does the same work, so fewer layers give the "
                             "same ratios at a fraction of the cost")
    parser.add_argument("--block-mib", type=float,
                        help="the engine's memory budget for one α block, MiB (default: capture's default)")
    parser.add_argument("--arch", choices=("gpt2", "gemma2"), default="gpt2",
                        help="gpt2 (sdpa) or gemma2 (soft-capped scores: capture against eager, the only "
                             "alternative)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                        help="the model's dtype (default float32; bfloat16 or float16 let a GPU's sdpa take "
                             "the flash kernel)")
    parser.add_argument("--no-peaks", action="store_true",
                        help="skip the peak-memory children (a CPU run's peaks: benchmarks/gpu.sh --dry-run)")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--no-eager", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    global BLOCK_BYTES, ARCH, DEVICE, DTYPE, DTYPE_NAME
    BLOCK_BYTES = int(args.block_mib * 2**20) if args.block_mib else None
    ARCH, DEVICE, DTYPE_NAME = args.arch, args.device, args.dtype
    if args.dtype:
        import torch

        DTYPE = getattr(torch, args.dtype)
    if args.child:
        if args.child == "time":
            variants = VARIANTS[:-1] if args.no_eager else VARIANTS
            result = measure_time(lengths[0], args.repeats, args.threads, variants, args.layers)
        else:
            result = measure_peak(args.child, lengths[0], args.threads, args.layers)
        print(json.dumps(result))
        return
    timings, peaks = {}, {}
    for n in lengths:
        eager = eager_bytes(n) * args.layers / LAYERS <= args.eager_limit_gib * 2**30
        variants = VARIANTS if eager else VARIANTS[:-1]
        timings[n] = run_child("time", n, args.repeats, args.threads, eager, args.layers)
        if DEVICE.startswith("cuda"):  # the device's peaks, measured in the timing child
            peaks[n] = timings[n].pop("peaks", {"error": timings[n].get("error", "no peaks")})
        elif args.no_peaks:
            peaks[n] = {}
        else:
            peaks[n] = {variant: run_child(variant, n, args.repeats, args.threads, layers=args.layers)
                        for variant in variants}
        print(f"N={n}: {timings[n]} {peaks[n]}", file=sys.stderr, flush=True)
        if "error" in timings[n] or any("error" in p for p in peaks[n].values()):
            sys.exit(f"N={n} failed: {timings[n]} {peaks[n]}")
        for variant in ("engine", "reduced"):
            ratios = [b / a for a, b in zip(timings[n]["times"]["plain"], timings[n]["times"][variant],
                                            strict=True)]
            print(f"N={n}: {variant}/plain time per round: {', '.join(f'{r:.2f}' for r in ratios)}",
                  file=sys.stderr, flush=True)
    print(table(timings, peaks, args.eager_limit_gib))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"timings": timings, "peaks": peaks}, handle, indent=2)


if __name__ == "__main__":
    main()
