"""`probe label`: score and label every head of one or more models; one tidy table (parquet, csv or json).

Crash-safe and honest on reruns: each finished model is recorded in a journal beside --out (probe.runs.journal) with the
identity of what produced it — the model's revision and every option that changes its rows (types, seed, examples,
lengths, probe-file hash, coreference set, label rule, ablation). After each model the whole --out file is rewritten
atomically from the journal, so a crash or SIGKILL loses at most the model in flight. A rerun reuses only models
recorded with the same identity and says in one line what it reused and what it recomputes; --force redoes all.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

import pandas as pd

from probe import models
from probe.commands.common import add_model_options, output_path, write_atomically
from probe.errors import ProbeError
from probe.heads.label import ABLATE, COREF_SETS, LabelConfig, config_identity, label_model, summary_lines
from probe.heads.probesets import load_probe_file
from probe.heads.registry import HEAD_TYPES, parse_head_types
from probe.heads.tables import COLUMNS, TABLE_EXTENSIONS, load_table, save_table
from probe.runs import sweep

DEFAULTS = {field.name: field.default for field in fields(LabelConfig)}


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "label", help="score and label every head (previous/next token, induction, coreference, ...)",
        description="Score every head of each model on natural text, repeated random blocks and coreference "
                    "examples; test its effect over the uniform-attention chance level (clustered bootstrap, "
                    "Benjamini-Hochberg FDR), label it, and measure labelled heads' ablation effect. One table.",
    )
    add_model_options(parser, many=True)
    parser.add_argument("--types", help=f"comma-separated head types (default: all that apply): {','.join(HEAD_TYPES)}")
    parser.add_argument("--examples", type=int, default=DEFAULTS["examples"],
                        help="probe examples per probe set (default %(default)s)")
    parser.add_argument("--seq-len", default=None,
                        help="tokens per probe; several comma-separated (64,256) score each length and mark labels "
                             "that flip in the stable column (default: min(128, the model's positions))")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="probe and bootstrap seed (default 0)")
    parser.add_argument("--probe-file", help="JSONL of your own span examples (text, query, target[, distractors]), "
                                             "scored as coreference in place of GAP / the templates")
    parser.add_argument("--coref-set", choices=COREF_SETS, default=DEFAULTS["coref_set"],
                        help="coreference probes: gap (Wikipedia), templates, or auto = gap when the tokenizer reads "
                             "English (default)")
    parser.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"],
                        help="probe examples per forward (default %(default)s)")
    parser.add_argument("--bootstrap", type=int, default=DEFAULTS["n_bootstrap"],
                        help="clustered bootstrap resamples (default %(default)s)")
    parser.add_argument("--min-effect", type=float, default=DEFAULTS["min_effect"],
                        help="label when score - chance is significantly above this (default %(default)s)")
    parser.add_argument("--min-accuracy-gain", type=float, default=DEFAULTS["min_accuracy_gain"],
                        help="coreference: accuracy - best baseline significantly above this (default %(default)s)")
    parser.add_argument("--fdr", type=float, default=DEFAULTS["fdr"],
                        help="false discovery rate over all head x type tests of a model (default %(default)s)")
    parser.add_argument("--ablate", choices=ABLATE, default=DEFAULTS["ablate"],
                        help="ablation columns for labelled heads (default), all heads, or none")
    parser.add_argument("--out", help="output table: .parquet, .csv or .json (default: CSV to stdout)")
    parser.add_argument("--force", action="store_true", help="recompute every model, and overwrite an --out that is "
                                                             "not a label table")
    sweep.add_sweep_options(parser)  # --revisions, --models-file, --plot, --ray, --ray-workers (README: section scale)
    return parser


def parse_lengths(text: str | None) -> tuple[int, ...] | None:
    """"64,256" -> (64, 256); None -> None (the default length)."""
    if text is None:
        return None
    try:
        lengths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ProbeError(f"bad --seq-len {text!r}: give a number of tokens, or several separated by commas "
                         "(64,256)") from None
    if not lengths or any(length < 1 for length in lengths):
        raise ProbeError("--seq-len must be a positive number of tokens")
    return tuple(dict.fromkeys(lengths))


def config_from_args(args: argparse.Namespace) -> LabelConfig:
    """The LabelConfig the flags describe (validated: one-line ProbeError on bad values)."""
    types = parse_head_types(args.types) if args.types else None
    if args.examples < 1:
        raise ProbeError("--examples must be at least 1")
    if args.batch_size < 1:
        raise ProbeError("--batch-size must be at least 1")
    if args.bootstrap < 1:
        raise ProbeError("--bootstrap must be at least 1")
    if not 0 < args.fdr < 1:
        raise ProbeError(f"--fdr {args.fdr} must be between 0 and 1 (e.g. 0.05)")
    for flag, value in (("--min-effect", args.min_effect), ("--min-accuracy-gain", args.min_accuracy_gain)):
        if not -1 <= value <= 1:  # also refuses nan
            raise ProbeError(f"{flag} {value} must be between -1 and 1")
    lengths = parse_lengths(args.seq_len)
    if args.probe_file is not None:
        load_probe_file(args.probe_file)  # check it before any model is loaded
        if types is not None and "coreference" not in types:
            raise ProbeError("--probe-file examples are scored as the coreference type: add coreference to --types")
    return LabelConfig(types=types, examples=args.examples, seq_len=lengths, seed=args.seed,
                       probe_file=args.probe_file, coref_set=args.coref_set, batch_size=args.batch_size,
                       n_bootstrap=args.bootstrap, min_effect=args.min_effect,
                       min_accuracy_gain=args.min_accuracy_gain, fdr=args.fdr, ablate=args.ablate)


def identity_options(config: LabelConfig, loaded, dtype: str | None) -> dict[str, object]:
    """Everything that determines a model's rows: its name and revision, the dtype, and the configuration's
    identity (probe.heads.label.config_identity: the probe file's content, every field but batch size and memory)."""
    return {**config_identity(config), "model": loaded.name, "revision": loaded.revision, "dtype": dtype,
            "columns": COLUMNS}


def _say(message: str) -> None:
    print(f"probe label: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from probe.runs.journal import Journal, identity_hash

    config = config_from_args(args)
    if sweep.wanted(args):  # checkpoints, a models file, a figure or Ray: the unit runner of probe.runs.sweep
        return sweep.run_label(args, config)
    out = output_path(args.out, TABLE_EXTENSIONS) if args.out else None
    names = list(dict.fromkeys(args.model))
    for name in names:  # every model must exist before the first is labelled
        models.locate(name)
    earlier = pd.DataFrame(columns=COLUMNS)  # rows of models in --out that this run does not touch
    if out is not None and out.exists() and out.stat().st_size > 0:
        try:
            earlier = load_table(out)
        except ProbeError:
            if not args.force:
                raise
    journal = Journal(out, force=args.force) if out is not None else None
    finished: dict[str, pd.DataFrame] = {}
    reused, computed = [], []
    bar = None  # created at the first finished batch, so errors before it stay one line

    def write_out() -> None:
        if out is None:
            return
        others = earlier[~earlier["model"].isin(names)]
        parts = [others] if len(others) else []
        parts += [finished[name] for name in names if name in finished]
        table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)
        write_atomically(out, lambda tmp: save_table(table.reindex(columns=COLUMNS), tmp))

    try:
        for index, name in enumerate(names):
            loaded = models.load(name, device=args.device, dtype=args.dtype)
            identity = identity_hash(identity_options(config, loaded, args.dtype))
            entry = journal.get(name, identity) if journal is not None else None
            if entry is not None and entry.table is not None:
                finished[name] = entry.table.reindex(columns=COLUMNS)
                reused.append(name)
                continue
            if journal is not None and (journal.stale(name, identity) or name in set(earlier["model"])):
                _say(f"recomputing {name}: the options or the model revision differ from what {out} holds")
            before, left = (bar.n if bar else 0), len(names) - index - 1

            def progress(done: int, total: int, name=name, before=before, left=left) -> None:
                nonlocal bar
                if bar is None:
                    bar = tqdm(total=0, unit="batch", file=sys.stderr, dynamic_ncols=True)
                bar.set_description(name, refresh=False)
                bar.total = before + total * (1 + left)  # assume the models still to come need as many batches
                bar.n = before + done
                bar.refresh()

            if index == len(reused) and reused:  # the first model to compute: say what was reused, once
                _say(_reuse_line(reused, out))
            rows = label_model(loaded, config, progress, note=_say)
            finished[name] = rows.reindex(columns=COLUMNS)
            computed.append(name)
            if journal is not None:
                journal.put(name, identity, table=finished[name])
            write_out()
    finally:
        if bar is not None:
            bar.close()
    if reused and not computed:
        _say(_reuse_line(reused, out))
    new = [finished[name] for name in computed]
    for line in summary_lines(pd.concat(new)) if new else []:
        print(line, file=sys.stderr)
    if out is None:
        if finished:
            pd.concat([finished[n] for n in names if n in finished], ignore_index=True).to_csv(sys.stdout, index=False)
        return 0
    write_out()
    if computed:
        total = sum(len(finished[name]) for name in finished)
        _say(f"wrote {total} rows ({len(finished)} models) to {out}")
    else:
        _say(f"every model is already in {out} with these options; nothing to do (--force recomputes)")
    return 0


def _reuse_line(reused: list[str], out) -> str:
    return (f"reused {', '.join(reused)} from {out} (computed with the same model revision and options); "
            "--force recomputes")
