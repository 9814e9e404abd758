"""`probe card`: the architecture card of a model — attention variant, heads, positions, window, KV-cache size."""

from __future__ import annotations

import argparse
import json

from probe.card import architecture_card, load_config


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "card", help="print a model's attention architecture (MHA/GQA/MQA/MLA, KV-cache bytes) from its config",
        description="Read a model's config (nothing else is loaded) and print its attention architecture: variant, "
                    "query and key/value heads, head and latent dims, positions, sliding window, parameters in "
                    "attention, KV-cache bytes per token and at 4K/32K/128K tokens for fp16, bf16 and fp8.",
    )
    parser.add_argument("--model", required=True,
                        help="hub id (from the local cache), local directory, zoo:NAME, or a config.json file")
    parser.add_argument("--json", action="store_true", help="print the card as JSON (byte counts as integers)")
    return parser


def run(args: argparse.Namespace) -> int:
    card = architecture_card(load_config(args.model))
    if args.json:
        print(json.dumps({"model": args.model, **card.to_dict()}, indent=2, ensure_ascii=False))
        return 0
    rows = [("model", args.model), *card.rows()]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0
