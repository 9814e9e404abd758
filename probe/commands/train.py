"""`python -m probe.zoo.train NAME --out DIR`: train (or build) a model organism of :mod:`probe.zoo.train`.

Flags and printing only; the training is :func:`probe.zoo.train.train` (and :func:`~probe.zoo.train.save_esm_random`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from probe.zoo.train import ESM_RANDOM, ORGANISMS, TrainConfig, relabel, save_esm_random, train


def parse_steps(text: str) -> tuple[int, ...]:
    """'0,50,100' -> (0, 50, 100); argparse error text on anything else."""
    try:
        steps = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated step numbers, e.g. 0,50,100") from None
    if not steps or min(steps) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated step numbers >= 0, e.g. 0,50,100")
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m probe.zoo.train",
                                     description="Train a model organism of probe.zoo (or build esm-random) into --out.")
    parser.add_argument("name", choices=sorted([*ORGANISMS, ESM_RANDOM]))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: on a shared CPU "
                                                                "faster than 2)")
    parser.add_argument("--no-label", action="store_true", help="do not run the head classifier on the result")
    parser.add_argument("--label-only", action="store_true",
                        help="do not train: run the head classifier on the model already in --out and update its cards")
    parser.add_argument("--checkpoint-steps", type=parse_steps, default=(), metavar="N,N,...",
                        help="also save the model after these optimizer steps (0 = initial weights) to OUT/step-N/ "
                             "(for `probe label --model OUT --revisions step-0,step-50,...`)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a TrainConfig field (for experiments; the shipped organisms use none)")
    args = parser.parse_args(argv)
    if args.name == ESM_RANDOM:
        if args.checkpoint_steps:
            parser.error(f"--checkpoint-steps: {ESM_RANDOM} is not trained, so it has no checkpoints")
        card = save_esm_random(args.seed, args.out, label=not args.no_label)
        print(json.dumps({k: card[k] for k in ("name", "seed", "labels") if k in card}, indent=2))
        return 0
    if args.label_only:
        card = relabel(args.name, args.out)
        print(json.dumps({k: card[k] for k in ("name", "labels", "requirements_failed")}, indent=2))
        return 1 if card.get("requirements_failed") else 0
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in TrainConfig.__dataclass_fields__ or key in ("task", "requirements"):
            parser.error(f"--set {item}: not a TrainConfig field")
        overrides[key] = type(getattr(ORGANISMS[args.name], key))(value)
    steps = overrides.get("steps", ORGANISMS[args.name].steps)
    if args.checkpoint_steps and max(args.checkpoint_steps) > steps:
        parser.error(f"--checkpoint-steps: {max(args.checkpoint_steps)} is past the run's {steps} steps")
    card = train(args.name, args.seed, args.out, threads=args.threads, overrides=overrides, label=not args.no_label,
                 checkpoint_steps=args.checkpoint_steps)
    shown = ("name", "seed", "steps", "train_seconds", "evaluation", "labels", "requirements_failed")
    print(json.dumps({k: card[k] for k in shown if k in card}, indent=2))
    return 1 if card.get("requirements_failed") else 0
