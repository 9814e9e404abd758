"""`probe label`: score and label every head of one or more models; one tidy table (parquet, csv or json).

Results are written per model, atomically: after each model the whole file is rewritten with every finished model's
rows, so Ctrl-C or a crash loses nothing already finished, and a rerun skips the models already in --out.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

import pandas as pd

from probe import models
from probe.classify import (
    COLUMNS,
    TABLE_EXTENSIONS,
    LabelConfig,
    label_model,
    load_table,
    save_table,
    summary_lines,
)
from probe.commands.common import add_model_options, output_path, write_atomically
from probe.errors import ProbeError
from probe.patterns import HEAD_TYPES, parse_head_types
from probe.probesets import load_probe_file

DEFAULTS = {field.name: field.default for field in fields(LabelConfig)}


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "label", help="score and label every head (previous-token, induction, coreference, ...)",
        description="Score every head of each model on seeded probe sets, compare with the uniform-attention chance "
                    "level with a bootstrap confidence interval, and label it. Writes one table.",
    )
    add_model_options(parser, many=True)
    parser.add_argument("--types", help=f"comma-separated head types (default: all): {','.join(HEAD_TYPES)}")
    parser.add_argument("--examples", type=int, default=DEFAULTS["examples"],
                        help="probe examples per probe set (default %(default)s)")
    parser.add_argument("--seq-len", type=int, default=None,
                        help="tokens per repeated-block probe (default: min(256, the model's positions))")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="probe and bootstrap seed (default 0)")
    parser.add_argument("--probe-file", help="JSONL of your own span examples (text, query, target), scored as "
                                             "coreference in place of the template sentences")
    parser.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"],
                        help="probe examples per forward (default %(default)s)")
    parser.add_argument("--bootstrap", type=int, default=DEFAULTS["n_bootstrap"],
                        help="bootstrap resamples (default %(default)s)")
    parser.add_argument("--margin", type=float, default=DEFAULTS["margin"],
                        help="label if ci_low > chance + MARGIN (default %(default)s) ...")
    parser.add_argument("--min-score", type=float, default=DEFAULTS["min_score"],
                        help="... and score >= MIN_SCORE (default %(default)s)")
    parser.add_argument("--min-accuracy-gain", type=float, default=DEFAULTS["min_accuracy_gain"],
                        help="coreference: accuracy_ci_low > nearest-mention baseline + this (default %(default)s)")
    parser.add_argument("--out", help="output table: .parquet, .csv or .json (default: CSV to stdout)")
    parser.add_argument("--force", action="store_true", help="redo models already in --out")
    return parser


def config_from_args(args: argparse.Namespace) -> LabelConfig:
    """The LabelConfig the flags describe (validated: one-line ProbeError on bad values)."""
    types = parse_head_types(args.types) if args.types else None
    if args.examples < 1:
        raise ProbeError("--examples must be at least 1")
    if args.batch_size < 1:
        raise ProbeError("--batch-size must be at least 1")
    if args.bootstrap < 1:
        raise ProbeError("--bootstrap must be at least 1")
    if args.seq_len is not None and args.seq_len < 1:
        raise ProbeError("--seq-len must be a positive number of tokens")
    if args.probe_file is not None:
        load_probe_file(args.probe_file)  # check it before any model is loaded
        if types is not None and "coreference" not in types:
            raise ProbeError("--probe-file examples are scored as the coreference type: add coreference to --types")
    return LabelConfig(types=types, examples=args.examples, seq_len=args.seq_len, seed=args.seed,
                       probe_file=args.probe_file, batch_size=args.batch_size, n_bootstrap=args.bootstrap,
                       margin=args.margin, min_score=args.min_score, min_accuracy_gain=args.min_accuracy_gain)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    out = output_path(args.out, TABLE_EXTENSIONS) if args.out else None
    config = config_from_args(args)
    names = list(dict.fromkeys(args.model))
    table = pd.DataFrame(columns=COLUMNS)
    if out is not None and out.exists() and out.stat().st_size > 0:
        try:
            table = load_table(out)
        except ProbeError:
            if not args.force:
                raise
    todo = []
    for name in names:
        if name in set(table["model"]) and not args.force:
            print(f"probe label: {name} is already in {out}; skipped (--force redoes it)", file=sys.stderr)
        else:
            todo.append(name)
    finished: list[pd.DataFrame] = []
    bar = None  # created at the first finished batch, so errors before it stay one line
    try:
        for index, name in enumerate(todo):
            loaded = models.load(name, device=args.device, dtype=args.dtype)
            before, left = (bar.n if bar else 0), len(todo) - index - 1

            def progress(done: int, total: int, name=name, before=before, left=left) -> None:
                nonlocal bar
                if bar is None:
                    bar = tqdm(total=0, unit="batch", file=sys.stderr, dynamic_ncols=True)
                bar.set_description(name, refresh=False)
                bar.total = before + total * (1 + left)  # assume the models still to come need as many batches
                bar.n = before + done
                bar.refresh()

            rows = label_model(loaded, config, progress)
            finished.append(rows)
            if out is not None:
                table = pd.concat([table[table["model"] != name], rows], ignore_index=True) if len(table) else rows
                write_atomically(out, lambda tmp, table=table: save_table(table, tmp))
    finally:
        if bar is not None:
            bar.close()
    for line in summary_lines(pd.concat(finished)) if finished else []:
        print(line, file=sys.stderr)
    if out is None:
        if finished:
            pd.concat(finished, ignore_index=True).to_csv(sys.stdout, index=False)
    elif finished:
        print(f"probe label: wrote {len(table)} rows ({table['model'].nunique()} models) to {out}", file=sys.stderr)
    else:
        print(f"probe label: every model is already in {out}; nothing to do", file=sys.stderr)
    return 0
