"""Benchmark: labelling every head of a 1B- and a 7B-shaped model, in memory and with disk offload.

Random-weight Llama models of real shapes, written to disk as a sharded safetensors checkpoint (one shard per
layer, bf16 N(0, 0.02) matrices, unit norms: the 7B weights are never all in RAM, not even while they are
written) and loaded back through `probe.models.load` — transformers' own `device_map` / accelerate offload:

  tiny  — 4 layers × 4 heads (GQA 2), hidden 64: a few hundred KB, `device_map="auto"` with a CPU budget
          that sends the last layers to disk (the 7B row's code path, in seconds)
  1b    — Llama-3.2-1B: hidden 2048, 16 layers, 32 heads, 8 KV heads, head size 64, MLP 8192, vocabulary
          128256, tied embeddings, RoPE θ 500000 (llama3 scaling); held in memory (no device map), float32
  7b    — Llama-2-7B: hidden 4096, 32 layers, 32 heads (MHA), MLP 11008, vocabulary 32000; bfloat16,
          `device_map="auto"` with `--max-memory cpu=6GiB`: the layers beyond the budget stay on disk and
          accelerate's hooks read them in for each forward

Each shape is measured as in benchmarks/label.py: labelling all heads (`label_model`, the capture engine,
output share on, no ablation) on `--examples` repeated-block probes of 1,024 tokens, against plain forwards of
the model body over the same probes, under the same device map and dtype. Every run is its own child process
(load, a warm-up forward of 32 tokens, then the timed run), plain and label alternating (the pair
order flips every round, so a drifting load or a warming page cache hits both alike); each child reports its
wall time, its forwards of the body (a forward pre-hook counts them) and its peak RSS (ru_maxrss). The table
shows the label/plain time per pair and per body forward, the peaks, and the memory plan `probe card
--seq-len` predicts (probe.memory). Run:

    python benchmarks/big.py --shape tiny                     # seconds; checks the whole path
    python benchmarks/big.py --shape 1b --repeats 3           # writes ~2.5 GB to --dir, ~15 min
    python benchmarks/big.py --shape 7b --repeats 2           # writes ~13.5 GB to --dir, an hour or more

The checkpoint is written once to `--dir` (default /tmp/probe-big-SHAPE) and reused while its `big.json`
matches the shape.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers
from accelerate.utils import compute_module_sizes
from safetensors.torch import save_file

from probe import models
from probe.heads.label import LabelConfig, label_model
from probe.heads.probesets import repeated_blocks
from probe.memory import memory_plan
from probe.untrained import parse_control
from probe.zoo.tiny import word_tokenizer

STD = 0.02  # the weights' standard deviation (Llama's initializer_range)
SEQ_LEN = 1024
WARM_TOKENS = 32  # the warm-up forward's length: every weight read once before the timed run
TYPES = ("previous_token", "duplicate_token", "induction")  # one probe set: one forward scores all three
FORMAT = 1  # the checkpoint layout written here; a big.json with another is rewritten


@dataclass(frozen=True)
class Shape:
    """One benchmarked model shape and its defaults (frozen)."""

    name: str
    config: dict  # transformers.LlamaConfig keywords
    dtype: str  # default --dtype
    device_map: str  # default --device-map ("none": the whole model in memory)
    max_memory: str | None  # default --max-memory (None: budget_short_of_one_layer, 2 layers on disk)
    examples: int  # default --examples
    batch_size: int  # default --batch-size
    repeats: int  # default --repeats


LLAMA_3_2_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
SHAPES = {
    "tiny": Shape("tiny", dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                               num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=512,
                               tie_word_embeddings=True, max_position_embeddings=131072,
                               rope_parameters=LLAMA_3_2_ROPE),
                  "bfloat16", "auto", None, examples=2, batch_size=1, repeats=1),
    "1b": Shape("1b", dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                           num_key_value_heads=8, head_dim=64, intermediate_size=8192, vocab_size=128256,
                           tie_word_embeddings=True, max_position_embeddings=131072, rms_norm_eps=1e-5,
                           rope_parameters=LLAMA_3_2_ROPE),
                "float32", "none", None, examples=4, batch_size=2, repeats=3),
    "7b": Shape("7b", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                           num_key_value_heads=32, head_dim=128, intermediate_size=11008, vocab_size=32000,
                           tie_word_embeddings=False, max_position_embeddings=4096, rms_norm_eps=1e-5,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
                "bfloat16", "auto", "cpu=6GiB", examples=2, batch_size=1, repeats=2),
}


def llama_config(shape: Shape):
    """The shape's LlamaConfig: bos 2 (the word tokenizer's <bos>), pad 1, no eos; stored as bfloat16."""
    config = transformers.LlamaConfig(**shape.config, bos_token_id=2, pad_token_id=1, eos_token_id=None)
    config.dtype = torch.bfloat16
    return config


# ------------------------------------------------------------------------------------------------------------
# The checkpoint, written shard by shard
# ------------------------------------------------------------------------------------------------------------


def write_checkpoint(shape: Shape, directory: Path, seed: int = 0) -> Path:
    """Write (or reuse) a random bf16 checkpoint of `shape` in `directory`: shard 0 holds the embeddings, the
    final norm and an untied LM head, shard k the decoder layer k − 1; then model.safetensors.index.json,
    config.json, a word-level tokenizer over the whole vocabulary and big.json (written last: a directory
    without it, or with another shape in it, is written again). Peak memory: one layer's bf16 tensors."""
    marker = directory / "big.json"
    wanted = {"format": FORMAT, "shape": shape.name, "config": shape.config, "seed": seed, "std": STD}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    config = llama_config(shape)
    with torch.device("meta"):  # names and shapes only, no memory
        skeleton = transformers.LlamaForCausalLM(config)
    shards: list[list[tuple[str, torch.Size]]] = [[] for _ in range(config.num_hidden_layers + 1)]
    for name, parameter in skeleton.named_parameters():  # a tied LM head appears once, as the embedding
        parts = name.split(".")
        index = int(parts[2]) + 1 if parts[:2] == ["model", "layers"] else 0
        shards[index].append((name, parameter.shape))
    files = [f"model-{index + 1:05d}-of-{len(shards):05d}.safetensors" for index in range(len(shards))]
    weight_map, total = {}, 0
    for index, (entries, file) in enumerate(zip(shards, files, strict=True)):
        generator = torch.Generator().manual_seed(seed * 1000 + index)
        tensors = {}
        for name, size in entries:
            if len(size) == 1:  # RMSNorm weights
                tensors[name] = torch.ones(size, dtype=torch.bfloat16)
            else:
                tensors[name] = torch.randn(size, generator=generator, dtype=torch.bfloat16).mul_(STD)
            weight_map[name] = file
            total += tensors[name].numel() * 2
        save_file(tensors, str(directory / file), metadata={"format": "pt"})
        del tensors
        print(f"big: wrote {file} ({len(entries)} tensors)", file=sys.stderr, flush=True)
    index_file = directory / "model.safetensors.index.json"
    index_file.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    config.save_pretrained(directory)
    words = [f"w{index}" for index in range(config.vocab_size - 3)]  # + <unk> <pad> <bos>: the vocabulary
    word_tokenizer(words, bos_token="<bos>").save_pretrained(directory)
    marker.write_text(json.dumps(wanted, indent=1))
    return directory


def budget_short_of_one_layer(shape: Shape, dtype: str) -> str:
    """A CPU budget half a layer short of the whole model: accelerate keeps room for one more layer on its
    device, so the last two layers (and the final norm) go to disk."""
    with torch.device("meta"):
        skeleton = transformers.LlamaForCausalLM(llama_config(shape))
    sizes = compute_module_sizes(skeleton, dtype=getattr(torch, dtype))
    budget = sizes[""] - sizes["model.layers.0"] // 2
    return f"cpu={budget // 1024}KiB"


# ------------------------------------------------------------------------------------------------------------
# One run, in its own child process
# ------------------------------------------------------------------------------------------------------------


def placement(args: argparse.Namespace) -> dict:
    """probe.models.load's keywords for the run: the dtype, and with a device map its offload folder and
    budget."""
    keywords: dict = {"dtype": args.dtype}
    if args.device_map != "none":
        folder = Path(args.dir) / f"offload-{args.dtype}"
        keywords.update(device_map=args.device_map, offload_folder=str(folder), max_memory=args.max_memory)
    return keywords


def measure(variant: str, args: argparse.Namespace) -> dict:
    """In a child: load, one warm-up forward of WARM_TOKENS, then one timed run of `variant` ("plain": the
    body's forwards over the probes; "label": label_model over the same probes, its first call in the
    process, as a user's is); its seconds, body forwards, the label's stage seconds and the peak RSS."""
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    loaded = models.load(args.dir, **placement(args))
    load_seconds = time.perf_counter() - started
    loaded_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    device_map = getattr(loaded.model, "hf_device_map", None) or {}
    on_disk = sorted(int(name.split(".")[2]) for name, where in device_map.items()
                     if where == "disk" and name.startswith("model.layers."))
    types = tuple(args.types.split(","))
    config = LabelConfig(types=types, examples=args.examples, seq_len=SEQ_LEN, seed=0,
                         batch_size=args.batch_size, ablate="none", twins=parse_control(args.control).twins)
    probes = repeated_blocks(loaded.tokenizer, args.examples, SEQ_LEN, seed=0).input_ids  # [example seq]
    batches = [probes[start:start + args.batch_size] for start in range(0, args.examples, args.batch_size)]
    body = loaded.model.base_model
    forwards = []
    body.register_forward_pre_hook(lambda module, inputs: forwards.append(1))

    def plain() -> None:
        with torch.inference_mode():
            for batch in batches:
                body(input_ids=batch)  # what run_sink calls, without the capture

    stages: dict[str, float] = {}

    def label() -> None:
        table = label_model(loaded, config)
        assert len(table) == len(types) * loaded.n_layers * loaded.n_heads
        stages.update(table.attrs.get("stage_seconds", {}))

    warm = repeated_blocks(loaded.tokenizer, 1, WARM_TOKENS, seed=1).input_ids  # [example seq]
    with torch.inference_mode():
        body(input_ids=warm)  # every weight read once (the page cache of an offloaded one), in both children
    forwards.clear()
    start = time.perf_counter()
    {"plain": plain, "label": label}[variant]()
    seconds = time.perf_counter() - start
    return {"variant": variant, "seconds": seconds, "forwards": len(forwards),
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "loaded_mib": loaded_mib,
            "load_seconds": load_seconds, "layers_on_disk": on_disk, "layers": loaded.n_layers,
            "heads": loaded.n_heads, "stage_seconds": stages}


def child(variant: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", variant, "--shape", args.shape, "--dir", args.dir,
               "--dtype", args.dtype, "--device-map", args.device_map, "--types", args.types,
               "--examples", str(args.examples), "--batch-size", str(args.batch_size),
               "--threads", str(args.threads), "--control", args.control]
    command += ["--max-memory", args.max_memory] if args.max_memory else []
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode < 0:  # SIGKILL: most often the kernel's OOM killer
        sys.exit(f"big: the {variant} child was killed by signal {-done.returncode} (out of memory? a "
                 f"smaller --max-memory with --device-map auto keeps more weights on disk)\n"
                 f"{done.stderr[-1000:]}")
    if done.returncode != 0:
        sys.exit(f"big: the {variant} child failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"big: {variant}: {result}", file=sys.stderr, flush=True)
    return result


# ------------------------------------------------------------------------------------------------------------
# The report
# ------------------------------------------------------------------------------------------------------------


def mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:,.0f}"


def report(args: argparse.Namespace, runs: list[tuple[dict, dict]]) -> str:
    """The markdown table for docs/benchmarks.md, then the cost per probe, the label run's stages and the
    memory plan's command. "scoring forwards / plain": the label run's "forwards" stage (one captured forward
    per probe batch, all heads streamed into the score sinks) against the plain forwards of the same batches;
    "label / plain": the whole label_model call (probe sets, those forwards, bootstrap, the copying stage's
    weight products and direct-logit forwards) against the same plain forwards."""
    config = llama_config(SHAPES[args.shape])
    plan = memory_plan(config, SEQ_LEN, args.dtype, args.batch_size, LabelConfig().block_bytes)
    plain, label = [p for p, _ in runs], [lab for _, lab in runs]
    first = plain[0]
    disk = first["layers_on_disk"]
    where = ("in memory" if args.device_map == "none" else
             f"`{args.device_map}`{f', {args.max_memory}' if args.max_memory else ''}: "
             f"{len(disk)} of {first['layers']} layers on disk")
    ratios = [lab["seconds"] / p["seconds"] for p, lab in runs]
    scoring = [lab["stage_seconds"].get("forwards", float("nan")) / p["seconds"] for p, lab in runs]
    plain_s, label_s = (statistics.median(r["seconds"] for r in group) for group in (plain, label))
    plain_peak, label_peak = (max(r["peak_mib"] for r in group) for group in (plain, label))
    heads = first["layers"] * first["heads"]
    stages = {name: statistics.median(r["stage_seconds"].get(name, 0.0) for r in label)
              for name in label[0]["stage_seconds"]}

    def pairs(values: list[float]) -> str:
        return f"**{', '.join(f'{v:.2f}' for v in values)}** (median {statistics.median(values):.2f})"

    return "\n".join([
        f"{args.shape}: {plan.parameters:,} parameters (planned), {args.dtype}, {where}; {args.examples} "
        f"probes × {SEQ_LEN} tokens, batches of {args.batch_size}; {args.types} × {heads} heads; "
        f"{args.threads} threads; control {args.control}; load "
        f"{statistics.median(r['load_seconds'] for r in plain + label):.1f} s per child (not timed)",
        "",
        "| shape | dtype | placement | probes | plain s | label s | scoring forwards / plain (per pair) | "
        "label / plain (per pair) | plain peak MiB | label peak MiB | label/plain peak | "
        "planned MiB (weights / run) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {args.shape} | {args.dtype} | {where} | {args.examples} × {SEQ_LEN} | {plain_s:.1f} | "
        f"{label_s:.1f} | {pairs(scoring)} | {pairs(ratios)} | {plain_peak:,.0f} | {label_peak:,.0f} | "
        f"**{label_peak / plain_peak:.2f}** | {mib(plan.weights)} / {mib(plan.capture)} |",
        "",
        f"body forwards per run: plain {first['forwards']} (one per probe batch), label "
        f"{label[0]['forwards']} (the scoring forwards; the copying types' direct logit attribution is "
        f"reduced from them); cost per probe of {SEQ_LEN} tokens: plain {plain_s / args.examples:.1f} s, "
        "label "
        f"{label_s / args.examples:.1f} s (+{(label_s - plain_s) / args.examples:.1f} s for the labels of "
        f"all {heads} heads)",
        "label stages (s, median): " + ", ".join(f"{name} {seconds:.1f}" for name, seconds in stages.items()),
        f"memory plan: `probe card --model {args.dir} --seq-len {SEQ_LEN} --dtype {args.dtype} --batch "
        f"{args.batch_size}` (all the weights, whatever the device map keeps on disk)",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=tuple(SHAPES), default="tiny", help="model shape (default tiny)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                        help="dtype the model is loaded in (default: tiny and 7b bfloat16, 1b float32)")
    parser.add_argument("--device-map", choices=("none", *models.DEVICE_MAPS),
                        help="transformers' device_map (default: tiny and 7b auto, 1b none = in memory)")
    parser.add_argument("--max-memory", help="with a device map, transformers' max_memory, e.g. cpu=6GiB "
                                             "(default: 7b cpu=6GiB; others half a layer short of the model, "
                                             "so that its last two layers go to disk)")
    parser.add_argument("--repeats", type=int,
                        help="alternating plain/label pairs (default: tiny 1, 1b 3, 7b 2)")
    parser.add_argument("--types", default=",".join(TYPES),
                        help="comma-separated head types, of one probe set (default: %(default)s)")
    parser.add_argument("--examples", type=int, help="probes of 1024 tokens (default: tiny 2, 1b 4, 7b 2)")
    parser.add_argument("--batch-size", type=int, help="probes per forward (default: tiny 1, 1b 2, 7b 1)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="torch threads (default: all cores)")
    parser.add_argument("--dir",
                        help="checkpoint folder, written once and reused (default /tmp/probe-big-SHAPE)")
    parser.add_argument("--control", default="none",
                        help="untrained:K: the label run also scores K untrained twins, placed like the "
                             "model (one at a time; issue 58); none (default) as before")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    defaults = asdict(shape)
    for name in ("dtype", "device_map", "examples", "batch_size", "repeats"):
        if getattr(args, name) is None:
            setattr(args, name, defaults[name])
    args.dir = args.dir or f"/tmp/probe-big-{shape.name}"
    if args.child:
        print(json.dumps(measure(args.child, args)))
        return
    if args.device_map != "none" and args.max_memory is None:
        args.max_memory = shape.max_memory or budget_short_of_one_layer(shape, args.dtype)
    started = time.perf_counter()
    write_checkpoint(shape, Path(args.dir))
    print(f"big: checkpoint in {args.dir} ({time.perf_counter() - started:.0f} s)", file=sys.stderr,
          flush=True)
    runs = []
    for round_ in range(args.repeats):
        order = ("plain", "label") if round_ % 2 == 0 else ("label", "plain")
        results = {variant: child(variant, args) for variant in order}
        runs.append((results["plain"], results["label"]))
    print(report(args, runs))


if __name__ == "__main__":
    main()
