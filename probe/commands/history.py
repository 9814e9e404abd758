"""`probe history --model DIR --out history.csv`: a model's training history as one table — per checkpoint
the in-context-learning score, the loss by position and the training loss; per checkpoint and head the
previous-token and induction scores and labels and copying (Olsson et al. 2022's phase change).

Flags and printing only; the work is :func:`probe.runs.history.history` (one resumable unit per checkpoint).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe.commands.common import TEXTS as NAMED_TEXTS
from probe.commands.paths import output_path
from probe.errors import ProbeError
from probe.specs import resolve

# probe.training.incontext.ICL_EARLY / ICL_LATE and LabelConfig's defaults, written out so that --help and
# argument errors need no torch (tests/commands/test_cli_fast.py checks they equal the library's)
ICL_POSITIONS = (12, 120)
# --text: "auto" (the held-out text of the model's card) or one of the named texts
TEXTS = ("auto", *NAMED_TEXTS)
DEFAULTS = {"examples": 64, "seed": 0, "n_bootstrap": 1000}


def parse_positions(text: str) -> tuple[int, int]:
    """'12,120' -> (12, 120); argparse error text on anything else."""
    try:
        early, late = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give two token positions EARLY,LATE, e.g. 12,120") \
            from None
    if not 1 <= early < late:
        raise argparse.ArgumentTypeError(f"{text!r}: give 1 <= EARLY < LATE, e.g. 12,120")
    return early, late


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "history", help="a model's training history: ICL score, loss by position, head scores per checkpoint",
        description="Measure every checkpoint of a model (the step-N/ folders `probe train` writes, or "
                    "--revisions): the in-context-learning score (loss at token LATE minus loss at token "
                    "EARLY of held-out passages), the loss by position, the training loss, and each "
                    "head's previous-token and induction scores, labels and copying. One table; resumable.",
    )
    parser.add_argument("--model", required=True,
                        help="model directory with step-N/ checkpoint folders, or a hub id with --revisions")
    parser.add_argument("--revisions", help="comma-separated checkpoints (default: every step-N/ folder of "
                                            "--model, in step order)")
    parser.add_argument("--out", help="history table: .csv or .parquet (default: CSV to stdout)")
    parser.add_argument("--icl-positions", type=parse_positions, default=ICL_POSITIONS, metavar="EARLY,LATE",
                        help="the ICL score's tokens within a held-out passage (default 12,120: Olsson et "
                             "al.'s 50,500 scaled to GAP passages)")
    parser.add_argument("--text", choices=TEXTS, default="auto",
                        help="the held-out text of the loss and the ICL score: auto (default) the split "
                             "held out from the text the model's card.json says it was trained on "
                             "(stdlib-held-out for stdlib-code; GAP's development split for the GAP "
                             "organisms and for a model without such a card), or a split: development, "
                             "validation (GAP), stdlib, stdlib-held-out (Python's standard library)")
    parser.add_argument("--passages", type=int, help="held-out passages (default: every one long enough)")
    parser.add_argument("--examples", type=int, default=DEFAULTS["examples"],
                        help="head-score probe examples per probe set (default %(default)s)")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="probe and bootstrap seed "
                                                                           "(default 0)")
    parser.add_argument("--bootstrap", type=int, default=DEFAULTS["n_bootstrap"],
                        help="clustered bootstrap resamples of the head labels (default %(default)s)")
    parser.add_argument("--force", action="store_true",
                        help="recompute every checkpoint; replace an --out holding another model's history")
    return parser


def run(args: argparse.Namespace) -> int:
    for flag, value in (("--examples", args.examples), ("--bootstrap", args.bootstrap),
                        ("--passages", args.passages if args.passages is not None else 1)):
        if value < 1:
            raise ProbeError(f"{flag} must be at least 1")
    out = output_path(args.out, (".csv", ".parquet")) if args.out else None
    # zoo:NAME: an organism that ships its checkpoints (zoo:stdlib-code); probe.specs is import-light
    model = Path(resolve(args.model)).expanduser()
    if args.revisions is None and not model.is_dir():
        raise ProbeError(f"--model {args.model} is not a folder: give the directory `probe train` wrote "
                         "(with its step-N/ checkpoints), or --revisions for a hub model")
    # torch, pandas and the head classifier only now: --help and argument errors answer without them
    from probe.heads.label import LabelConfig
    from probe.heads.tables import labelled_mask
    from probe.runs.history import HEAD_TYPES, HistoryConfig, history

    early, late = args.icl_positions
    label = LabelConfig(types=HEAD_TYPES, ablate="none", examples=args.examples, seed=args.seed,
                        n_bootstrap=args.bootstrap)
    config = HistoryConfig(label=label, icl_early=early, icl_late=late, max_passages=args.passages,
                           split=None if args.text == "auto" else args.text)
    revisions = ([part.strip() for part in args.revisions.split(",") if part.strip()] if args.revisions
                 else None)
    if revisions == []:
        raise ProbeError(f"--revisions {args.revisions!r} names no checkpoint: give a comma-separated list, "
                         "e.g. step-0,step-500")
    notes: list[str] = []  # the held-out text: printed with the summary (a refusal stays one line)
    report = history(args.model, revisions, config, out, force=args.force, note=notes.append)
    table = report.table
    if out is None and len(table):
        table.to_csv(sys.stdout, index=False)
    summary = table[table["row"] == "checkpoint"] if len(table) else table
    for line in notes:
        print(f"probe history: {line}", file=sys.stderr)
    for row in summary.itertuples(index=False):
        heads = table[(table["row"] == "head") & (table["checkpoint"] == row.checkpoint)]
        found = {name: ",".join(heads.loc[labelled_mask(heads[f"{name}_label"]), "head_name"])
                 for name in HEAD_TYPES}
        print(f"probe history: {row.checkpoint} (step {row.step}): ICL score {row.icl_score:+.3f} nats, "
              f"held-out loss {row.held_out_loss:.3f}; previous-token {found['previous_token'] or '-'}; "
              f"induction {found['induction'] or '-'}", file=sys.stderr)
    return report.code
