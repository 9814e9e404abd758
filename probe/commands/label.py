"""`probe label`: score and label every head of one or more models; one tidy table (parquet, csv or json).

Every form — one --model, several, a --models-file, --revisions, --ray — is one run of
:func:`probe.runs.runner.run` with :class:`probe.runs.tasks.LabelTask` units (one per model or checkpoint),
journalled beside --out with their identity (weights' hash, every option that changes the rows); inside a
model each finished probe batch and ablation is journalled too (:mod:`probe.runs.steps`), so a rerun resumes
there. --out is rewritten atomically, other models' rows kept; a failed model goes to OUT.errors.csv, the
others go on; --force redoes all. Flags and printing only.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe.commands.common import (
    TABLE_EXTENSIONS,
    TEXTS,
    add_control_option,
    add_model_options,
    add_sweep_options,
    check_model_options,
    executor,
    load_keywords,
    plot_paths,
)
from probe.commands.label_checks import check_args, check_before_loading, config_from_args
from probe.commands.paths import output_path, page_path
from probe.errors import ProbeError

# LabelConfig's defaults and choices, written out so that --help and argument errors need no torch (the
# library's values are the truth: tests/commands/test_cli_fast.py checks these equal them).
DEFAULTS = {"examples": 64, "seed": 0, "text": "development", "coref_set": "auto", "batch_size": 8,
            "n_bootstrap": 1000, "min_effect": 0.25, "min_accuracy_gain": 0.1, "fdr": 0.05,
            "ablate": "labelled"}
COREF_SETS = ("auto", "gap", "templates", "causality")  # probe.heads.label.COREF_SETS
ABLATE = ("labelled", "all", "none")  # probe.heads.label.ABLATE
RETRIEVAL_MASKS = ("output", "query")  # probe.heads.label.RETRIEVAL_MASKS
HEAD_TYPES = ("previous_token", "next_token", "self", "first_token", "fixed_offset", "delimiter",  # built-in
              "sentence_start", "bracket", "duplicate_token", "induction", "coreference", "retrieval")


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "label", help="score and label every head (previous/next token, induction, coreference, ...)",
        description="Score every head of each model on natural text, repeated random blocks and coreference "
                    "examples; test its effect over the uniform-attention chance level (clustered bootstrap, "
                    "Benjamini-Hochberg FDR) on half of each probe set's documents, label it where the other "
                    "half replicates the test, and measure labelled heads' ablation effect. One table.",
    )
    add_model_options(parser, many=True, required=False)  # or --models-file
    parser.add_argument("--types", help="comma-separated head types, or all (default: every type that "
                                        "applies, except opt-in ones such as retrieval: --types retrieval "
                                        f"--seq-len 4096): {','.join(HEAD_TYPES)}")
    parser.add_argument("--examples", type=int, default=DEFAULTS["examples"],
                        help="probe examples per probe set (default %(default)s); the GAP coreference set "
                             "uses every development pair that fits the model instead")
    parser.add_argument("--seq-len", default=None,
                        help="tokens per probe; several comma-separated (64,256) score each length and mark "
                             "labels that flip in the stable column (default: min(128, the model's "
                             "positions))")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="probe and bootstrap seed "
                                                                           "(default 0)")
    parser.add_argument("--text", choices=TEXTS, default=DEFAULTS["text"],
                        help="the natural text of the token probes (natural-text probes, and the token "
                             "frequencies random-token probes are drawn by): GAP's development split "
                             "(default), or stdlib-held-out, the Python standard library's held-out modules, "
                             "for a model trained on Python source (as zoo:stdlib-code's card is labelled)")
    parser.add_argument("--probe-file", help="JSONL of your own span examples (text, query, target[, "
                                             "distractors]), scored as coreference in place of GAP / the "
                                             "templates")
    parser.add_argument("--coref-set", choices=COREF_SETS, default=DEFAULTS["coref_set"],
                        help="coreference probes: gap (Wikipedia pairs cropped to fit), templates "
                             "(agreement), causality (implicit-causality verbs), or auto = gap when the "
                             "tokenizer reads English and a pair fits, else the templates (default)")
    parser.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"],
                        help="probe examples per forward (default %(default)s; short coreference "
                             "sentences are packed up to batch-size x seq-len tokens)")
    parser.add_argument("--bootstrap", type=int, default=DEFAULTS["n_bootstrap"],
                        help="clustered bootstrap resamples (default %(default)s)")
    parser.add_argument("--min-effect", type=float, default=DEFAULTS["min_effect"],
                        help="label when score - chance is significantly above this (default %(default)s)")
    parser.add_argument("--min-accuracy-gain", type=float, default=DEFAULTS["min_accuracy_gain"],
                        help="coreference: accuracy - best baseline significantly above this (default "
                             "%(default)s)")
    parser.add_argument("--fdr", type=float, default=DEFAULTS["fdr"],
                        help="false discovery rate over all head x type tests of a model (default "
                             "%(default)s)")
    parser.add_argument("--ablate", choices=ABLATE, default=DEFAULTS["ablate"],
                        help="ablation columns for labelled heads (default), all heads, or none")
    parser.add_argument("--retrieval-mask", choices=RETRIEVAL_MASKS, default="output",
                        help="retrieval check: zero a head's output (default) or, as Wu et al., its query")
    add_control_option(parser)  # on: 3 twins on a quarter of the probes, ~1.2x the run (docs/labels.md)
    parser.add_argument("--out", help="output table: .parquet, .csv or .json (default: CSV to stdout)")
    parser.add_argument("--force", action="store_true",
                        help="recompute every model, and overwrite an --out that is not a label table")
    parser.add_argument("--circuits", action="store_true", help="also each labelled type's circuit (probe "
                        "circuit): fed_by, each head's strongest upstream edge (~2 forwards per edge)")
    parser.add_argument("--report", metavar="FILE.html",
                        help="at the end, write the one-file HTML report of the (one) model with its labels "
                             "(as `probe report --labels`)")
    add_sweep_options(parser)
    return parser


def _say(message: str) -> None:
    print(f"probe label: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    check_args(args)
    out = output_path(args.out, TABLE_EXTENSIONS) if args.out else None
    plot = plot_paths(args.plot) if args.plot else None
    report_path = page_path(args.report, args.force, "--report") if args.report else None
    if report_path is not None and (len(set(args.model or [])) != 1 or args.models_file or args.revisions):
        raise ProbeError("--report writes one model's report: one --model, no --models-file, --revisions")
    if not args.model and not args.models_file:
        raise ProbeError("give --model (repeat it for several) or --models-file")
    if args.models_file is not None and not Path(args.models_file).expanduser().is_file():
        raise ProbeError(f"--models-file {args.models_file} is not a file: give one model per line")
    # every --model exists (or --revisions' folder, hub id), then the stack: errors answer at once (cli_fast)
    check_model_options(args, dict.fromkeys(args.model or []) if args.revisions is None else ())
    import pandas as pd

    from probe import models
    from probe.heads.label import summary_lines
    from probe.runs import runner
    from probe.runs.checkpoints import sweep_checkpoints
    from probe.runs.tasks import LabelTask, label_output, label_units

    config = config_from_args(args)
    run_on = executor(args)
    check_before_loading(args, config)  # lengths and memory, from each model's config
    checkpoints = sweep_checkpoints(args.model, args.revisions, args.models_file)
    sweep = args.revisions is not None or args.models_file is not None or plot is not None
    in_process = isinstance(run_on, runner.InProcess)
    kept = []  # the model the run loaded, for --report (in-process: no second load)
    task = LabelTask(config, device=args.device, dtype=args.dtype, sweep=sweep, progress=in_process,
                     placement=load_keywords(args), circuits=args.circuits,
                     out=str(out) if out is not None else None,
                     on_loaded=kept.append if report_path is not None and in_process else None)
    report = runner.run(label_units(checkpoints), task, label_output(out, args.force), run_on,
                        description="label")

    computed = [r.table.assign(model=r.key) for r in report.results
                if r.ok and not r.cached and r.table is not None]
    for line in summary_lines(pd.concat(computed, ignore_index=True)) if computed else []:
        print(line, file=sys.stderr)
    if out is None and len(report.table):
        report.table.to_csv(sys.stdout, index=False)
    if plot is not None and len(report.table):
        from probe.heads.tables import labelled_mask
        from probe.runs.export import save_figure  # deferred like the labelling stack above
        from probe.runs.plot import sweep_figure

        if not labelled_mask(report.table["label"]).any():
            _say("no head is labelled at any checkpoint: no figure written")
        else:
            for written in save_figure(sweep_figure(report.table), plot):
                _say(f"wrote {written}")
    if report_path is not None and len(report.table):
        from probe.views.report import write_report  # deferred like the labelling stack above

        loaded = kept[-1] if kept else models.load(args.model[0], device=args.device, dtype=args.dtype,
                                                   **load_keywords(args))  # rows read back: load it
        write_report(loaded, report_path, labels=report.table)  # one_model keeps this model's rows
        _say(f"wrote {report_path}")
    return report.code
