"""`probe card`: the architecture card of a model — attention variant, heads, positions, window, KV-cache size
— and with --seq-len the memory plan of a run at that length (probe.memory)."""

from __future__ import annotations

import argparse
import json

from probe.card import architecture_card, format_bytes, load_config
from probe.errors import ProbeError
from probe.memory import available_memory, memory_plan


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "card", help="print a model's attention architecture (MHA/GQA/MQA/MLA, KV-cache bytes) from its "
                     "config",
        description="Read a model's config (nothing else is loaded) and print its attention architecture: "
                    "variant, query and key/value heads, head and latent dims, positions, sliding window, "
                    "parameters in attention, KV-cache bytes per token and at 4K/32K/128K tokens for fp16, "
                    "bf16 and fp8. With --seq-len, also the memory a run at that length needs: weights, KV "
                    "cache, activations, the capture's α block and sinks, and the eager alternative's N² "
                    "attention.",
    )
    parser.add_argument("--model", required=True,
                        help="hub id (from the local cache), local directory, zoo:NAME, or a config.json "
                             "file")
    parser.add_argument("--seq-len", type=int, default=None, metavar="N",
                        help="also print the memory plan of one sequence of N tokens")
    parser.add_argument("--batch", type=int, default=1, help="sequences per forward in the plan (default 1)")
    parser.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"],
                        help="weights dtype of the plan (default: the checkpoint's)")
    parser.add_argument("--json", action="store_true",
                        help="print the card as JSON (byte counts as integers)")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.seq_len is not None and args.seq_len < 1:
        raise ProbeError(f"--seq-len {args.seq_len} must be at least 1")
    if args.batch < 1:
        raise ProbeError(f"--batch {args.batch} must be at least 1")
    config = load_config(args.model)
    card = architecture_card(config)
    plan = memory_plan(config, args.seq_len, args.dtype, args.batch) if args.seq_len is not None else None
    if args.json:
        extra = {"memory_plan": plan.to_dict()} if plan is not None else {}
        print(json.dumps({"model": args.model, **card.to_dict(), **extra}, indent=2, ensure_ascii=False))
        return 0
    rows = [("model", args.model), *card.rows()]
    if plan is not None:
        free = available_memory()
        rows += [*plan.rows(), ("  available here", "unknown" if free is None else format_bytes(free))]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0
