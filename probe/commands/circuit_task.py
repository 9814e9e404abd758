"""`probe circuit --task FILE|TYPE`: a researcher's own task (or a head type's own paired probes,
:func:`probe.circuits.type_tasks.type_task`) — every edge of the model scored (EAP, EAP-IG or exact patching),
the faithfulness curve against random circuits, the circuit, and the heads' direct logit attribution on the
clean prompts (:func:`probe.circuits.attribution.task_attribution`). The work is
:func:`probe.circuits.task_search`; this module is the task's flags, their checks and printing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe.commands.common import add_control_option, load_keywords
from probe.commands.label import HEAD_TYPES
from probe.errors import ProbeError

# the head types with a corruption (probe.circuits.corruption.CORRUPTIONS), written out so that --help and
# checking need no torch (tests/commands/test_circuit_task_cli.py checks they equal the library's)
TASK_TYPES = ("induction", "duplicate_token", "previous_token", "coreference")


def add_task_options(parser: argparse.ArgumentParser) -> None:
    """--task FILE|TYPE, --metric, --method and --steps of ``probe circuit``."""
    parser.add_argument("--task", metavar="FILE|TYPE", help="your own task, every edge scored: CSV or JSONL "
                        "with clean, corrupted, correct, incorrect (docs/circuits.md); or a head type's own "
                        f"paired probes: {', '.join(TASK_TYPES)}")
    parser.add_argument("--metric", choices=("logit_diff", "prob", "kl", "loss"),
                        help="default logit_diff for a task file, loss (the type's own) for a TYPE")
    parser.add_argument("--method", default="eap-ig", choices=("eap-ig", "eap", "exact"))
    parser.add_argument("--steps", type=int, default=5, help="EAP-IG steps (default %(default)s)")


def check_task(args: argparse.Namespace) -> None:
    """``--task`` checked without torch: a file, or a head type that has a corruption; --steps ≥ 1;
    --control (with --type: refused, it would be ignored)."""
    from probe.untrained import parse_control  # import-light

    if args.task is None:
        if args.control is not None:
            raise ProbeError(f"--control applies to --task; --type {args.type}'s circuit has its own "
                             "controls (--controls N random sender-receiver pairs): drop --control")
        return
    parse_control(args.control or "untrained:1")
    if args.steps < 1 or args.composition:
        raise ProbeError(f"--task {args.task}: give --steps ≥ 1, no --composition")
    if Path(args.task).is_file():
        return
    if args.task in HEAD_TYPES and args.task not in TASK_TYPES:
        raise ProbeError(f"--task {args.task}: {args.task} has no corruption to pair its probes with; "
                         f"--task TYPE takes {', '.join(TASK_TYPES)}")
    if args.task not in TASK_TYPES:
        raise ProbeError(f"--task {args.task}: give a CSV/JSONL file, or a head type with paired probes "
                         f"({', '.join(TASK_TYPES)})")


def add_control(parser: argparse.ArgumentParser) -> None:
    """--control of --task (the shared flag, :func:`probe.commands.common.add_control_option`): K untrained
    twins searched on the same task; one by default, each a whole search of its own. Absent by default, so
    that check_task can refuse it with --type."""
    add_control_option(parser, default=None, shown="untrained:1",
                       rule="with --task, each twin's edge scores, faithfulness curve and clean − corrupted "
                            "gap printed beside the model's")


def _say(message: str) -> None:
    print(f"probe circuit: {message}", file=sys.stderr)


def _attribution(loaded, task) -> list[str]:
    """The heads that push the answer on the clean prompts, and the logit lens (printed after the edges); one
    line saying why where the model's residual stream does not decompose."""
    from probe.circuits.attribution import attribution_lines, task_attribution

    try:
        return attribution_lines(task_attribution(loaded, task))
    except ProbeError as error:
        return [f"no direct logit attribution: {error}"]


def run_task(args: argparse.Namespace, out: Path | None, html: Path | None = None) -> int:
    """``probe circuit --task FILE``: every edge of the model scored on the task, the faithfulness curve and
    the circuit (:func:`probe.circuits.task_search`), printed; the edge table written to `out`, the graph
    (:func:`probe.views.circuit.write_circuit_page`) to `html`."""
    from probe.untrained import parse_control

    control = parse_control(args.control or "untrained:1")  # one line before torch loads
    from probe import models
    from probe.circuits.task import load_task
    from probe.circuits.task_search import task_circuit
    from probe.heads.tables import save_table
    from probe.runs.atomic import write_atomically
    loaded = models.load(args.model, device=args.device, dtype=args.dtype, **load_keywords(args))
    task, metric = args.task, args.metric or "logit_diff"
    if not Path(task).is_file():  # a head type's own paired probes (check_task), by default its own loss
        from probe.circuits.type_tasks import type_task

        task = type_task(loaded, args.task, args.examples, args.metric or "loss", args.seed, note=_say)
        _say(f"{args.task}'s paired probes: {len(task)} measured positions, one task row each")
    else:
        task = load_task(task, loaded.tokenizer, metric)
    found = task_circuit(loaded, task, metric, args.method, args.steps, control=control.twins)
    table = found.table
    print("\n".join(found.lines()), flush=True)
    print("\n".join(_attribution(loaded, task)), flush=True)
    if out is not None:
        write_atomically(out, lambda tmp: save_table(table, tmp))
        _say(f"wrote {out} ({len(table)} edges, {int(table['in_circuit'].sum())} in the circuit)")
    if html is not None:
        from probe.views.circuit import write_circuit_page

        write_circuit_page(found, html)
        _say(f"wrote {html}")
    return 0
