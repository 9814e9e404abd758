"""Benchmark: head profiles at long context — plain sdpa forward vs `probe profile` vs eager
`output_attentions`.

A Llama-style GQA model with RoPE and random weights (8 layers × 16 heads, 4 KV heads, hidden 256, head size
16, MLP 512, vocabulary 512), one input of N random tokens, N = 4K, 16K, 32K:

  (a) plain    — the model's sdpa forward, nothing captured
  (b) profile  — `probe.heads.profile.head_profiles` on that input (every statistic for all 128 heads, the
                 default 1024 stratified query rows, bootstrap and table included)
  (c) eager    — eager attention with output_attentions=True, run only where the 8 layers' [16, N, N]
                 float32 weights fit under --eager-limit-gib; elsewhere the allocation it would need is
                 reported

Each forward runs in its own subprocess (its time, and its peak RSS — ru_maxrss, the whole process — are its
own); plain and profile alternate --repeats rounds (a shared machine's changing load then hits both alike) and
every pair is printed. Run:

    python benchmarks/long.py                       # N = 4096, 16384, 32768
    python benchmarks/long.py --lengths 4096 --repeats 3
    python benchmarks/long.py --repeats 2,2,1        # one round at 32K (a plain forward takes minutes)
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time

LAYERS, HEADS, KV_HEADS, HIDDEN, MLP, VOCAB = 8, 16, 4, 256, 512, 512


def _eager_bytes(n_tokens: int) -> int:
    """What output_attentions returns: one [1, heads, N, N] float32 tensor per layer, all kept."""
    return LAYERS * HEADS * n_tokens * n_tokens * 4


def _setup(n_tokens: int, threads: int, model_dir: str):
    import torch

    from probe import models

    torch.set_num_threads(threads)
    loaded = models.load(model_dir)
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, VOCAB, (1, n_tokens), generator=generator)
    return loaded, input_ids


def _forward(variant: str, loaded, input_ids) -> None:
    import torch

    from probe.heads.profile import ProfileConfig, head_profiles

    if variant == "plain":
        with torch.inference_mode():
            loaded.model(input_ids=input_ids)
    elif variant == "profile":
        table = head_profiles(loaded, [input_ids], ProfileConfig(seq_len=input_ids.shape[1], n_bootstrap=200))
        assert len(table) == loaded.n_layers * HEADS
    else:
        model = loaded.model
        previous = model.config._attn_implementation
        model.set_attn_implementation("eager")
        try:
            with torch.inference_mode():
                assert len(model(input_ids=input_ids, output_attentions=True).attentions) == loaded.n_layers
        finally:
            model.set_attn_implementation(previous)


def measure_one(variant: str, n_tokens: int, threads: int, model_dir: str) -> dict:
    """In its own child: one variant's forward — its seconds and the process's peak RSS (ru_maxrss)."""
    loaded, input_ids = _setup(n_tokens, threads, model_dir)
    loaded_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    _forward(variant, loaded, input_ids)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"variant": variant, "n": n_tokens, "seconds": seconds, "peak_mib": peak, "loaded_mib": loaded_mib}


def run_child(variant: str, n_tokens: int, threads: int, model_dir: str) -> dict:
    command = [sys.executable, __file__, "--child", variant, "--lengths", str(n_tokens), "--threads",
               str(threads), "--model-dir", model_dir]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def build_model(directory: str, layers: int = LAYERS) -> None:
    import torch
    import transformers

    from probe.zoo.tiny import DEMO_WORDS, word_tokenizer

    tokenizer = word_tokenizer(DEMO_WORDS + [f"w{index}" for index in range(VOCAB)], bos_token="<bos>")
    config = transformers.LlamaConfig(
        vocab_size=max(VOCAB, len(tokenizer)), hidden_size=HIDDEN, intermediate_size=MLP,
        num_hidden_layers=layers, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        max_position_embeddings=32768 + 8, pad_token_id=1, bos_token_id=None, eos_token_id=None,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def table(results: dict, limit_gib: float) -> str:
    lines = ["| N | rounds | plain s | profile s | profile/plain time | plain peak MiB | profile peak MiB | "
             "profile/plain peak | eager output_attentions |", "|---|---|---|---|---|---|---|---|---|"]
    for n, runs in sorted(results.items()):
        plain = [run for run in runs["rounds"] if run["variant"] == "plain"]
        profile = [run for run in runs["rounds"] if run["variant"] == "profile"]
        ta, tb = (statistics.median(run["seconds"] for run in group) for group in (plain, profile))
        pa, pb = (statistics.median(run["peak_mib"] for run in group) for group in (plain, profile))
        need = _eager_bytes(n) / 2**30
        eager = runs.get("eager")
        if eager and "error" not in eager:
            eager_text = (f"{eager['seconds']:.1f} s, peak {eager['peak_mib']:.0f} MiB "
                          f"({eager['peak_mib'] / pa:.1f}×)")
        else:
            eager_text = f"not run: its weights alone need {need:.1f} GiB (> {limit_gib:g} GiB)"
        lines.append(f"| {n} | {len(plain)} | {ta:.1f} | {tb:.1f} | **{tb / ta:.2f}** | {pa:.0f} | {pb:.0f} "
                     f"| **{pb / pa:.2f}** | {eager_text} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="4096,16384,32768", help="comma-separated sequence lengths")
    parser.add_argument("--repeats", default="2",
                        help="alternating (plain, profile) rounds per length; one number, or one per length "
                             "(2,2,1)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads in each child")
    parser.add_argument("--eager-limit-gib", type=float, default=4.0,
                        help="run eager output_attentions only where its weights fit under this (GiB)")
    parser.add_argument("--layers", type=int, default=LAYERS,
                        help="layers of the model (default 8). Every layer does the same work, so time and "
                             "peak ratios of fewer layers are the 8-layer ratios at a fraction of the cost")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.child:
        print(json.dumps(measure_one(args.child, lengths[0], args.threads, args.model_dir)))
        return
    repeats = [int(x) for x in args.repeats.split(",")]
    repeats = repeats * len(lengths) if len(repeats) == 1 else repeats
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        build_model(scratch, args.layers)
        print(f"model: {args.layers} layers x {HEADS} heads ({KV_HEADS} kv heads), hidden {HIDDEN}, "
              f"{args.threads} thread(s)", file=sys.stderr, flush=True)
        for n, rounds in zip(lengths, repeats, strict=True):
            results[n] = {"rounds": []}
            if _eager_bytes(n) <= args.eager_limit_gib * 2**30:
                results[n]["eager"] = run_child("eager", n, args.threads, scratch)
            for _ in range(rounds):  # each forward in its own process: its time and its own peak RSS
                pair = [run_child(variant, n, args.threads, scratch) for variant in ("plain", "profile")]
                if any("error" in run for run in pair):
                    sys.exit(f"N={n} failed: {pair}")
                results[n]["rounds"].extend(pair)
                plain, profile = pair
                print(f"N={n}: plain {plain['seconds']:.1f} s / {plain['peak_mib']:.0f} MiB, profile "
                      f"{profile['seconds']:.1f} s / {profile['peak_mib']:.0f} MiB: time "
                      f"{profile['seconds'] / plain['seconds']:.2f}x, peak "
                      f"{profile['peak_mib'] / plain['peak_mib']:.2f}x",
                      file=sys.stderr, flush=True)
    print(table(results, args.eager_limit_gib))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
