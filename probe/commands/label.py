"""`probe label`: score and label every head of one or more models; one tidy table (parquet, csv or json).

Every form of the command — one --model, several, a --models-file, --revisions of a model, --ray — is one run of
:func:`probe.runs.runner.run` with :class:`probe.runs.tasks.LabelTask` units (one per model or checkpoint), so they
reuse, keep and report the same way: each finished model is recorded in a journal beside --out with the identity of
what produced it (the content hash of its weights and every option that changes its rows); the whole --out file is
rewritten atomically after each model; rows of models this run does not name are kept; a model that fails is listed
in OUT.errors.csv and the others go on; a rerun reuses exactly the models whose identity is unchanged and says so in
one line; --force redoes all. This module is flags and printing only.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

import pandas as pd

from probe import models
from probe.commands.common import add_model_options, add_ray_options, executor, output_path
from probe.errors import ProbeError
from probe.heads.label import ABLATE, COREF_SETS, LabelConfig, summary_lines
from probe.heads.probesets import load_probe_file
from probe.heads.registry import names as head_type_names
from probe.heads.registry import parse_head_types
from probe.heads.tables import TABLE_EXTENSIONS

DEFAULTS = {field.name: field.default for field in fields(LabelConfig)}


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "label", help="score and label every head (previous/next token, induction, coreference, ...)",
        description="Score every head of each model on natural text, repeated random blocks and coreference "
                    "examples; test its effect over the uniform-attention chance level (clustered bootstrap, "
                    "Benjamini-Hochberg FDR), label it, and measure labelled heads' ablation effect. One table.",
    )
    add_model_options(parser, many=True, required=False)  # or --models-file
    parser.add_argument("--types", help="comma-separated head types, or all (default: every type that applies, "
                                        "except opt-in ones such as retrieval: --types retrieval --seq-len 4096): "
                                        f"{','.join(head_type_names())}")
    parser.add_argument("--examples", type=int, default=DEFAULTS["examples"],
                        help="probe examples per probe set (default %(default)s); the GAP coreference set uses every "
                             "development pair that fits the model instead")
    parser.add_argument("--seq-len", default=None,
                        help="tokens per probe; several comma-separated (64,256) score each length and mark labels "
                             "that flip in the stable column (default: min(128, the model's positions))")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="probe and bootstrap seed (default 0)")
    parser.add_argument("--probe-file", help="JSONL of your own span examples (text, query, target[, distractors]), "
                                             "scored as coreference in place of GAP / the templates")
    parser.add_argument("--coref-set", choices=COREF_SETS, default=DEFAULTS["coref_set"],
                        help="coreference probes: gap (Wikipedia pairs cropped to fit), templates (agreement), "
                             "causality (implicit-causality verbs), or auto = gap when the tokenizer reads English and "
                             "a pair fits, else the templates (default)")
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
    parser.add_argument("--report", metavar="FILE.html",
                        help="at the end, write the one-file HTML report of the (one) model with its labels "
                             "(as `probe report --labels`)")
    add_sweep_options(parser)
    return parser


def add_sweep_options(parser: argparse.ArgumentParser) -> None:
    """--revisions, --models-file, --plot, --ray, --ray-workers (docs/scale.md)."""
    parser.add_argument("--revisions", metavar="R1,R2,...",
                        help="label these checkpoints of each --model: subdirectories of a local model directory "
                             "(step-0,step-50: what `python -m probe.zoo.train --checkpoint-steps` writes) or hub "
                             "branches/tags/commits; adds the columns checkpoint and step")
    parser.add_argument("--models-file", metavar="FILE",
                        help="one model or checkpoint directory per line (# comments allowed), labelled like --model")
    parser.add_argument("--plot", metavar="FILE.html|FILE.png",
                        help="figure of each labelled head's score across checkpoints; writes FILE.html and "
                             "FILE.png (PNG needs kaleido and a Chromium)")
    add_ray_options(parser)


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


def plot_paths(text: str):
    """--plot FILE.html|FILE.png -> FILE.html, checked with its sibling FILE.png (both are written) before any
    labelling: extension, folder, writable, and neither of the two may be a folder."""
    from probe.runs.export import PLOT_EXTENSIONS

    plot = output_path(text, PLOT_EXTENSIONS, "--plot")
    for sibling in (plot.with_suffix(".html"), plot.with_suffix(".png")):
        if sibling.is_dir():
            raise ProbeError(f"--plot {text}: {sibling} is a folder, and --plot writes both {plot.stem}.html and "
                             f"{plot.stem}.png; give another name")
    return plot


def _say(message: str) -> None:
    print(f"probe label: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from probe.runs import runner
    from probe.runs.checkpoints import sweep_checkpoints
    from probe.runs.tasks import LabelTask, label_output, label_units

    config = config_from_args(args)
    run_on = executor(args)
    out = output_path(args.out, TABLE_EXTENSIONS) if args.out else None
    plot = plot_paths(args.plot) if args.plot else None
    report_path = output_path(args.report, (".html",), "--report") if args.report else None
    if report_path is not None and (len(dict.fromkeys(args.model or [])) != 1 or args.models_file or args.revisions):
        raise ProbeError("--report writes the report of one model: give one --model (no --models-file, --revisions)")
    if not args.model and not args.models_file:
        raise ProbeError("give --model (repeat it for several) or --models-file")
    for name in dict.fromkeys(args.model or []):  # every --model must exist before the first is labelled
        if args.revisions is None:  # (with --revisions it is the folder or hub id of the checkpoints)
            models.locate(name)
    checkpoints = sweep_checkpoints(args.model, args.revisions, args.models_file)
    sweep = args.revisions is not None or args.models_file is not None or plot is not None
    in_process = isinstance(run_on, runner.InProcess)
    task = LabelTask(config, device=args.device, dtype=args.dtype, sweep=sweep, progress=in_process)
    report = runner.run(label_units(checkpoints), task, label_output(out, args.force), run_on, description="label")

    computed = [r.table.assign(model=r.key) for r in report.results if r.ok and not r.cached and r.table is not None]
    for line in summary_lines(pd.concat(computed, ignore_index=True)) if computed else []:
        print(line, file=sys.stderr)
    if out is None and len(report.table):
        report.table.to_csv(sys.stdout, index=False)
    if plot is not None and len(report.table):
        from probe.runs.export import save_figure
        from probe.runs.plot import sweep_figure

        if not report.table["label"].fillna(False).astype(bool).any():
            _say("no head is labelled at any checkpoint: no figure written")
        else:
            for written in save_figure(sweep_figure(report.table), plot):
                _say(f"wrote {written}")
    if report_path is not None and len(report.table):
        from probe.views.report import write_report

        model = args.model[0]
        write_report(models.load(model, device=args.device, dtype=args.dtype), report_path,
                     labels=report.table[report.table["model"].astype(str) == model])
        _say(f"wrote {report_path}")
    return report.code
