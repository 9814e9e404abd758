"""Benchmark: labelling all 144 heads vs plain sdpa forwards over the same inputs.

GPT-2-small shape (transformers.GPT2Config defaults: 12 layers × 12 heads, width 768, 1024 positions) with
seeded random weights; repeated-block probes of --seq-len tokens (default 1024); head types previous_token,
duplicate_token, induction.

  plain   — the model body's sdpa forward over every probe batch (no capture, no scoring)
  label   — probe.heads.label.label_model: probe generation, target patterns, the capture engine streaming α
            of all 144 heads into the ScoreSink, chance levels, bootstrap CIs, the table
  eager   — (--eager) eager attention with output_attentions=True and the dense reference scores, i.e. what
            a cache-everything tool does

  tl      — (when transformer_lens ≥ 4 is importable) TransformerLens: the same random model saved to a
            temporary directory and booted with TransformerBridge.boot_transformers(DIR) (eager attention,
            hooks), then per probe run_with_cache + detect_head for the three types (its documented way: one
            prompt per call, the cache reused). Its time is compared with plain forwards alternating in the
            same subprocess.

transformer-lens is an optional peer, not a dependency: `pip install transformer-lens` into the environment to
get its row.

Time: plain and label alternate --repeats times in one subprocess after a warm-up (a shared machine's load
then hits both alike); the table shows medians. Peak memory: each variant runs once in its own subprocess and
reports its ru_maxrss. Both plain and label run the model body without the LM head (scores need no logits).
Run:

    python benchmarks/label.py                          # 4 probes of 1024 tokens, batches of 2, 3 repeats
    python benchmarks/label.py --examples 8 --batch-size 4 --eager
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import statistics
import subprocess
import sys
import time

TYPES = ("previous_token", "duplicate_token", "induction")


def _model_and_tokenizer(seq_len: int):
    import torch
    import transformers

    from probe.zoo.tiny import word_tokenizer

    config = transformers.GPT2Config(n_positions=max(1024, seq_len), bos_token_id=None, eos_token_id=None)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    # + <unk> <pad> <bos> = the GPT-2 vocabulary
    words = [f"w{index}" for index in range(config.vocab_size - 3)]
    return model, word_tokenizer(words, bos_token="<bos>")


def measure(variant: str, args: argparse.Namespace) -> dict:
    """Runs inside a child process. "time": plain and label alternate --repeats times in one process (so load
    changes on a shared machine hit both alike); "plain" / "label" / "eager": one run, for its peak memory."""
    import torch

    from probe.heads.label import LabelConfig, label_model
    from probe.heads.probesets import repeated_blocks
    from probe.heads.registry import batch_pattern
    from probe.heads.scores import tl_mul_score, valid_row_score
    from probe.models import LoadedModel
    from probe.runs.weight_cache import cached_copying_scores

    torch.set_num_threads(args.threads)
    model, tokenizer = _model_and_tokenizer(args.seq_len)
    loaded = LoadedModel(model, tokenizer, "causal_lm", "gpt2-small-random", "random")
    types = tuple(args.types.split(","))
    config = LabelConfig(types=types, examples=args.examples, seq_len=args.seq_len, seed=0,
                         batch_size=args.batch_size, ablate="none",  # the attention scores alone
                         output_share=not args.no_output_share)
    probes = repeated_blocks(tokenizer, args.examples, args.seq_len, seed=0).input_ids  # [example seq]
    batches = [probes[start:start + args.batch_size] for start in range(0, args.examples, args.batch_size)]
    body = model.base_model
    loaded_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def plain():
        with torch.inference_mode():
            for batch in batches:
                body(input_ids=batch)

    # the copying stage reads weights only: probe label keeps it across runs (probe.runs.weight_cache), so the
    # warm-up below computes it once and every timed run reads it back, as a `probe label` rerun does
    copying_of = None if args.copying_each_run else cached_copying_scores

    def label():
        table = label_model(loaded, config, copying_of=copying_of)
        assert len(table) == len(types) * 144

    def eager():
        body.set_attn_implementation("eager")
        with torch.inference_mode():
            for batch in batches:
                # layer × [batch head q k]
                attentions = body(input_ids=batch, output_attentions=True).attentions
                for head_type in types:
                    pattern = batch_pattern(head_type, batch)  # [batch query key]
                    for layer_alpha in attentions:
                        for row in range(len(batch)):
                            valid_row_score(layer_alpha[row], pattern[row])
                            tl_mul_score(layer_alpha[row], pattern[row])

    def timed(run) -> float:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    variant_run = None
    if variant in ("tl", "tl-time"):
        transformer_lens = _transformer_lens_run(args, batches, tokenizer)
        if variant == "tl-time":
            transformer_lens()  # warm-up
            pairs = [(timed(plain), timed(transformer_lens)) for _ in range(args.repeats)]
            return {"plain": [p for p, _ in pairs], "tl": [t for _, t in pairs]}
        variant_run = transformer_lens
    if variant == "time":
        with torch.inference_mode():
            body(input_ids=batches[0])  # warm-up
        label_model(loaded, LabelConfig(types=types, examples=1, seq_len=args.seq_len, n_bootstrap=10,
                                        ablate="none", output_share=not args.no_output_share),
                    copying_of=copying_of)  # warm-up (and the copying stage, cached)
        pairs = [(timed(plain), timed(label)) for _ in range(args.repeats)]
        return {"plain": [p for p, _ in pairs], "label": [lab for _, lab in pairs]}
    if variant == "ablation-time":
        return _ablation_times(loaded, batches, args)
    run = variant_run if variant == "tl" else {"plain": plain, "label": label, "eager": eager}[variant]
    seconds = timed(run)
    return {"variant": variant, "seconds": seconds,
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "loaded_mib": loaded_mib}


ABLATED = 4  # heads of layer 0 ablated in the ablation benchmark, each against as many random control heads


def _ablation_times(loaded, batches, args: argparse.Namespace) -> dict:
    """Time of probe.heads.ablation.ablation_effects for ABLATED heads + ABLATED controls (one copy of each
    probe batch per ablated head, stacked along the batch axis: max_rows = 8 copies per forward) against plain
    forwards of the whole model (with its LM head: the ablation needs the loss), alternating."""
    import torch

    from probe.heads.ablation import ablation_effects

    inputs = [{"input_ids": batch, "labels": batch} for batch in batches]
    heads = [(0, head) for head in range(ABLATED)]

    def plain():
        with torch.inference_mode():
            for batch in batches:
                loaded.model(input_ids=batch)

    def ablate():
        ablation_effects(loaded, inputs, heads, controls=ABLATED, max_rows=8 * len(batches[0]))

    def timed(run) -> float:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    plain()
    pairs = [(timed(plain), timed(ablate)) for _ in range(args.repeats)]
    return {"plain": [p for p, _ in pairs], "ablation": [a for _, a in pairs]}


def _transformer_lens_run(args: argparse.Namespace, batches, tokenizer):
    """TransformerLens on the same random model: run_with_cache + detect_head per probe, three head types."""
    import tempfile

    import torch
    from transformer_lens.head_detector import detect_head
    from transformer_lens.model_bridge import TransformerBridge

    # detect_head asserts tokens < n_ctx: save the same seeded model with room for the probe (unused positions
    # change no compute).
    model, _ = _model_and_tokenizer(2 * args.seq_len)
    directory = tempfile.mkdtemp(prefix="probe-bench-tl-")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    bridge = TransformerBridge.boot_transformers(directory, device="cpu")
    prompts = [" ".join(tokenizer.convert_ids_to_tokens(row.tolist()[1:])) for batch in batches
               for row in batch]
    names = ("previous_token_head", "duplicate_token_head", "induction_head")

    def run():
        with torch.inference_mode():
            for prompt in prompts:
                _, cache = bridge.run_with_cache(bridge.to_tokens(prompt), remove_batch_dim=True)
                for name in names:
                    detect_head(bridge, prompt, name, cache=cache)

    return run


def _child(variant: str, args: argparse.Namespace) -> dict | None:
    command = [sys.executable, __file__, "--child", variant, "--examples", str(args.examples), "--batch-size",
               str(args.batch_size), "--seq-len", str(args.seq_len), "--threads", str(args.threads),
               "--repeats", str(args.repeats), "--types", args.types] + (
                   ["--no-output-share"] if args.no_output_share else []) + (
                   ["--copying-each-run"] if args.copying_each_run else [])
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"{variant} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
        return None
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{variant}: {result}", file=sys.stderr)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=4, help="probe sequences (default 4)")
    parser.add_argument("--batch-size", type=int, default=2, help="sequences per forward (default 2)")
    parser.add_argument("--seq-len", type=int, default=1024, help="tokens per probe (default 1024)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="alternating timed runs of plain and label (default 3)")
    parser.add_argument("--eager", action="store_true",
                        help="also run eager output_attentions + dense scores")
    parser.add_argument("--ablation", action="store_true",
                        help=f"also time the ablation of {ABLATED} heads + {ABLATED} controls (reported "
                             "separately)")
    parser.add_argument("--types", default=",".join(TYPES),
                        help="comma-separated head types scored (default: %(default)s); the types of one "
                             "probe set, so that plain forwards over the same probes are the baseline, e.g. "
                             "previous_token,next_token,self,first_token,fixed_offset,delimiter")
    parser.add_argument("--copying-each-run", action="store_true",
                        help="compute the weight-only copying stage in every label run (label_model's "
                             "default) instead of reading it from probe label's cache as a rerun does")
    parser.add_argument("--no-output-share", action="store_true",
                        help="label without the output share (Kobayashi et al. 2020 norms; on by default)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args)))
        return
    has_tl = importlib.util.find_spec("transformer_lens") is not None
    times = _child("time", args)
    tl_times = _child("tl-time", args) if has_tl else None
    variants = ["plain", "label"] + (["eager"] if args.eager else []) + (["tl"] if has_tl else [])
    memory = {variant: _child(variant, args) for variant in variants}
    base = memory["plain"]
    print(f"\nGPT-2-small-shaped random model (12 layers × 12 heads), {args.examples} probes × "
          f"{args.seq_len} tokens, batches of {args.batch_size}, {args.threads} threads; {args.types} × 144 "
          f"heads; output share {'off' if args.no_output_share else 'on'}\n")
    print("| variant | time (s), min / median | time ratio, min / median | peak RSS (MiB) | peak ratio |")
    print("|---|---|---|---|---|")
    fastest, middle = min(times["plain"]), statistics.median(times["plain"])
    for variant, result in memory.items():
        if result is None:
            continue
        runs = (tl_times or {}).get(variant) if variant == "tl" else times.get(variant)
        runs = runs or [result["seconds"]]
        print(f"| {variant} | {min(runs):.2f} / {statistics.median(runs):.2f} | {min(runs) / fastest:.2f}× / "
              f"{statistics.median(runs) / middle:.2f}× | {result['peak_mib']:.0f} | "
              f"{result['peak_mib'] / base['peak_mib']:.2f}× |")
    ratios = [lab / p for p, lab in zip(times["plain"], times["label"], strict=True)]
    print(f"\nlabel/plain time ratio per alternating pair: {', '.join(f'{r:.2f}' for r in ratios)}; "
          f"memory: one subprocess per variant (ru_maxrss; the model alone: {base['loaded_mib']:.0f} MiB)")
    if tl_times is not None:
        tl_ratios = [t / p for p, t in zip(tl_times["plain"], tl_times["tl"], strict=True)]
        print(f"tl: time ratio vs plain forwards alternating in its own subprocess: "
              f"{', '.join(f'{r:.2f}' for r in tl_ratios)} (median {statistics.median(tl_ratios):.2f}×); "
              f"the tl row's time column above is relative to the label run's plain forwards")
    else:
        print("TransformerLens is not importable here: no run_with_cache + detect_head row.")
    if args.ablation:
        ablation = _child("ablation-time", args)
        if ablation is not None:
            ratios = [a / p for p, a in zip(ablation["plain"], ablation["ablation"], strict=True)]
            print(f"ablation of {ABLATED} heads + {ABLATED} controls (8 heads per forward, one copy of the "
                  f"batch each): {statistics.median(ablation['ablation']):.2f} s vs "
                  f"{statistics.median(ablation['plain']):.2f} s of plain forwards with the LM head, "
                  f"{statistics.median(ratios):.2f}× (expected about 1 + {2 * ABLATED} = {1 + 2 * ABLATED}×: "
                  "one clean forward plus one batch copy per ablated head)")


if __name__ == "__main__":
    main()
