"""`probe train NAME --out DIR`: train (or build) a model organism; `probe train NAME --relabel`: label it
again.

Flags and printing only; the work is :func:`probe.training.train.train`, :func:`probe.training.cards.relabel`
and :func:`probe.training.cards.save_esm_random`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from probe import zoo
from probe.commands.paths import writable_folder
from probe.errors import ProbeError

# Recipes of probe.training.organisms whose weights the package does not ship (yet): they are trained on
# demand, `probe train NAME --out DIR` (written out here so that --help needs no torch;
# tests/commands/test_cli_fast.py checks the list against the recipes)
NOT_SHIPPED = ("natural-text", "natural-text-1layer")


def recipe_names() -> list[str]:
    """What `probe train` can train: the shipped organisms and the recipes not shipped, sorted."""
    return sorted({*zoo.names(), *NOT_SHIPPED})


def parse_steps(text: str) -> tuple[int, ...]:
    """'0,50,100' -> (0, 50, 100); argparse error text on anything else."""
    try:
        steps = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated step numbers, e.g. 0,50,100") \
            from None
    if not steps or min(steps) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated step numbers >= 0, e.g. 0,50,100")
    return steps


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train", help="train a model organism (or label a trained one again with --relabel)",
        description="Train a model organism of the zoo from scratch into --out (weights, card.json, "
                    "MODEL_CARD.md and labels.csv, its label table), or with --relabel label the organism in "
                    "--out (default: the shipped one) again with the LabelConfig its card records, the "
                    "weights untouched.",
    )
    parser.add_argument("name", choices=recipe_names(), metavar="NAME",
                        help=f"the organism: {', '.join(recipe_names())} (recipes: probe.training.organisms)")
    parser.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    parser.add_argument("--out", type=Path, help="model directory to write (with --relabel: to relabel; "
                                                 "default the shipped probe/zoo/NAME)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: on a shared CPU faster than 2)")
    parser.add_argument("--no-label", action="store_true",
                        help="do not run the head classifier on the result")
    parser.add_argument("--relabel", action="store_true",
                        help="do not train: label the model already in --out and rewrite labels.csv and its "
                             "cards")
    parser.add_argument("--checkpoint-steps", type=parse_steps, default=(), metavar="N,N,...",
                        help="also save the model after these optimizer steps (0 = initial weights) to "
                             "OUT/step-N/ (for `probe label --model OUT --revisions step-0,step-50,...`)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a TrainConfig field (for experiments; the shipped organisms use none)")
    return parser


def _show(card: dict, keys: tuple[str, ...]) -> int:
    print(json.dumps({k: card[k] for k in keys if k in card}, indent=2))
    return 1 if card.get("requirements_failed") else 0


def _check_out_folder(out: Path) -> None:
    """--out of a training run, before any training: a folder (made if missing), never a file."""
    if out.exists() and not out.is_dir():
        raise ProbeError(f"--out {out} is a file: give a folder to train into (it is created if missing)")
    existing = next(parent for parent in out.parents if parent.exists())
    if not existing.is_dir():
        raise ProbeError(f"--out {out}: {existing} is a file, not a folder; give a path inside a folder")
    writable_folder(str(out), "--out")  # a read-only folder is one line, not an error after training


def run(args: argparse.Namespace) -> int:
    if args.relabel:
        if args.checkpoint_steps or args.set or args.no_label:
            raise ProbeError("--relabel labels a trained organism: drop --checkpoint-steps, --set and "
                             "--no-label")
        out = args.out if args.out is not None else zoo.path(args.name)
        if not (out / "card.json").is_file():
            raise ProbeError(f"--out {out} holds no trained organism (no card.json): train it first with "
                             f"probe train {args.name} --out {out}")
    elif args.out is None:
        raise ProbeError(f"give --out DIR, the folder to train {args.name} into (the shipped weights are "
                         "never overwritten by default)")
    else:
        _check_out_folder(args.out)
    if args.threads < 1:
        raise ProbeError("--threads must be at least 1")
    # The training stack (torch, transformers, the head classifier) is imported only now: `probe --help` and
    # argument errors answer without it (tests/commands/test_cli_fast.py).
    from probe.training import cards
    from probe.training.organisms import ORGANISMS, TrainConfig
    from probe.training.train import train

    if args.relabel:
        return _show(cards.relabel(args.name, out), ("name", "labels", "requirements_failed"))
    if args.name == cards.ESM_RANDOM:
        if args.checkpoint_steps:
            raise ProbeError(f"--checkpoint-steps: {cards.ESM_RANDOM} is not trained, so it has no "
                             "checkpoints")
        card = cards.save_esm_random(args.seed, args.out, label=not args.no_label)
        return _show(card, ("name", "seed", "labels"))
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in TrainConfig.__dataclass_fields__ or key in ("task", "requirements", "label_config"):
            raise ProbeError(f"--set {item}: {key!r} is not a TrainConfig field that can be set")
        kind = type(getattr(ORGANISMS[args.name], key))
        if kind not in (int, float, str):
            raise ProbeError(f"--set {item}: {key} is a {kind.__name__}; only number and text fields can be "
                             "set")
        try:
            overrides[key] = kind(value)
        except ValueError:
            wanted = {int: "a whole number", float: "a number"}.get(kind, "text")
            raise ProbeError(f"--set {item}: {key} takes {wanted}") from None
    try:  # every field in its range (TrainConfig checks itself), before any training
        dataclasses.replace(ORGANISMS[args.name], **overrides)
    except ProbeError as error:
        raise ProbeError(f"--set {' '.join(args.set)}: {error}") from None
    steps = overrides.get("steps", ORGANISMS[args.name].steps)
    if args.checkpoint_steps and max(args.checkpoint_steps) > steps:
        raise ProbeError(f"--checkpoint-steps: {max(args.checkpoint_steps)} is past the run's {steps} steps")
    card = train(args.name, args.seed, args.out, threads=args.threads, overrides=overrides,
                 label=not args.no_label, checkpoint_steps=args.checkpoint_steps)
    return _show(card, ("name", "seed", "steps", "train_seconds", "evaluation", "labels",
                        "requirements_failed"))
