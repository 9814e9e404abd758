"""`probe circuit`: the circuit of one head type — the upstream heads whose composition and path-patching
effects beat their controls — as a table of edges, one line per finding, and (``--html``) the graph in one
offline file. The work is :func:`probe.circuits.find_circuit`; this module is flags and printing only."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe.commands.circuit_task import add_control, add_task_options, check_task
from probe.commands.common import (
    TABLE_EXTENSIONS,
    add_model_options,
    add_ray_options,
    check_model_options,
    executor,
    load_keywords,
    output_path,
)
from probe.commands.label import HEAD_TYPES
from probe.commands.paths import owned_table, page_path
from probe.errors import ProbeError
from probe.naming import fixed

# probe.circuits.CircuitConfig's defaults, written out so that --help needs no torch
# (tests/commands/test_circuit_cli.py checks they equal the library's)
DEFAULTS = {"top_k": 3, "examples": 16, "controls": 8, "seed": 0, "n_random": 200}
MODES = ("Q", "K", "V")
# columns that make an existing file this command's edge table or composition table (probe.circuits'
# EDGE_COLUMNS and probe.circuits.composition.COLUMNS hold them; written out so that checking needs no torch)
EDGE_KEYS = ("sender", "receiver", "mode", "in_circuit")
TASK_KEYS = ("sender", "receiver", "input", "abs_rank")  # probe.circuits.edges.edge_scores' table
PAIR_KEYS = ("sender", "receiver", "sender_layer", "receiver_layer", "mode")


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "circuit", help="find a head type's circuit: which earlier heads feed its labelled heads",
        description="From the type's labelled heads, the earlier heads whose Q-, K- or V-composition beats "
                    "random matrices (Elhage et al. 2021) and whose path-patching effect on the type's loss "
                    "beats random sender-receiver pairs (Wang et al. 2022). Prints one line per finding; "
                    "writes every candidate edge (--out) and the graph (--html).",
    )
    add_model_options(parser)
    parser.add_argument("--type", choices=HEAD_TYPES, metavar="TYPE",
                        help=f"the head type: {', '.join(HEAD_TYPES)}; or --task")
    add_task_options(parser)  # --task FILE|TYPE, --metric, --method, --steps
    add_control(parser)
    parser.add_argument("--labels", help="label table (probe label --out; default: the model's shipped table "
                                         "for zoo:NAME, else the type is labelled first)")
    parser.add_argument("--modes", default="Q,K,V", help="composition modes, comma-separated (default Q,K,V)")
    parser.add_argument("--top-k", type=int, default=DEFAULTS["top_k"],
                        help="senders patched per receiver and mode, by composition z (0: every earlier "
                             "head; default %(default)s)")
    parser.add_argument("--all-pairs", action="store_true",
                        help="composition of every pair of heads (--composition FILE), not only into the "
                             "type's heads: d_head^2 x d_model multiply-adds per pair and mode")
    parser.add_argument("--examples", type=int, default=DEFAULTS["examples"],
                        help="paired clean/corrupted probes (default %(default)s)")
    parser.add_argument("--controls", type=int, default=DEFAULTS["controls"],
                        help="random sender-receiver pairs (default %(default)s)")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="probe, control and baseline seed")
    parser.add_argument("--out", help="every candidate edge, every column at full precision: .csv, .parquet "
                                      "or .json (default: a rounded table to read on stdout)")
    parser.add_argument("--composition", metavar="FILE", help="every scored pair's composition (.csv, "
                                                              ".parquet, .json)")
    parser.add_argument("--html", metavar="FILE.html", help="the circuit graph in one offline HTML file")
    parser.add_argument("--force", action="store_true",
                        help="overwrite an --out, --composition or --html that probe did not write; with "
                             "--out also recompute what its journal holds")
    add_ray_options(parser)  # --type: the unit runs on Ray (docs/scale.md)
    return parser


def _modes(text: str) -> tuple[str, ...]:
    modes = tuple(dict.fromkeys(part.strip().upper() for part in text.split(",") if part.strip()))
    bad = [mode for mode in modes if mode not in MODES]
    if bad or not modes:
        raise ProbeError(f"--modes {text}: give some of Q,K,V (comma-separated)")
    return modes


def check_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The checks that need no torch; the modes."""
    if (args.type is None) == (args.task is None):
        raise ProbeError("give one of --type TYPE (a head type's circuit) and --task FILE (your own task)")
    check_task(args)  # --task's flags; --control refused with --type
    if args.top_k < 0:
        raise ProbeError("--top-k must be 0 (every earlier head) or more")
    if args.examples < 1:
        raise ProbeError("--examples must be at least 1")
    if args.controls < 2:
        raise ProbeError("--controls must be at least 2 (the controls' spread)")
    if args.labels is not None and not Path(args.labels).expanduser().is_file():
        raise ProbeError(f"--labels {args.labels} is not a file: give a table written by probe label --out")
    return _modes(args.modes)


def check_outputs(args: argparse.Namespace) -> tuple[Path | None, Path | None, Path | None]:
    """--out, --composition and --html checked before any work: a file there that is not this command's
    table (or a page probe wrote) is refused unless --force (probe.commands.paths, as every command)."""
    out = pairs = html = None
    if args.out:
        out = owned_table(output_path(args.out, TABLE_EXTENSIONS), args.force,
                          EDGE_KEYS if args.task is None else TASK_KEYS, "probe circuit table")
    if args.composition:
        pairs = owned_table(output_path(args.composition, TABLE_EXTENSIONS, "--composition"), args.force,
                            PAIR_KEYS, "probe circuit composition table", "--composition")
    if args.html:
        html = page_path(args.html, args.force, "--html")
    return out, pairs, html


def refuse_seq2seq(model: str) -> None:
    """An encoder–decoder model is refused from its config, before its weights load (its three stacks have no
    one residual stream for composition and path patching)."""
    from probe.card import load_config  # transformers' config only

    try:
        config = load_config(model)
    except ProbeError:
        return  # unreadable here: loading says why
    if getattr(config, "is_encoder_decoder", False):
        raise ProbeError(f"{model} is a sequence-to-sequence model (encoder and decoder stacks): a circuit "
                         "is found in one stack of heads; give a decoder-only or encoder-only model")


def readable_edges(edges) -> str:
    """The candidate edges as a table to read (the circuit's first, by composition score): composition score
    and its z against random matrices, the patched effect in nats ("-": not patched), rounded."""
    import math

    table = edges.assign(circuit=edges["in_circuit"].astype(bool)).sort_values(
        ["circuit", "score"], ascending=False)

    def number(digits: int):
        return lambda value: "-" if value is None or math.isnan(value) else fixed(value, digits)

    shown = table[["sender", "receiver", "mode", "score", "z", "effect", "circuit"]].rename(
        columns={"score": "composition", "effect": "effect_nats"})
    return shown.to_string(index=False, formatters={"composition": number(3), "z": number(1),
                                                    "effect_nats": number(3)})


def _say(message: str) -> None:
    print(f"probe circuit: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    modes = check_args(args)
    out, pairs_out, html_out = check_outputs(args)
    check_model_options(args)
    refuse_seq2seq(args.model)
    if args.task is not None:
        if args.ray is not None:
            raise ProbeError("--ray runs --type's circuit on Ray; --task runs in this process: drop --ray")
        from probe.commands.circuit_task import run_task

        return run_task(args, out, html_out)
    run_on = executor(args)  # --ray / --ray-workers: one line before torch loads
    # torch, transformers and pandas only now (probe circuit --help and argument errors answer at once)
    from probe.circuits import CircuitConfig
    from probe.circuits.circuit import shipped_labels
    from probe.heads.tables import save_table
    from probe.runs import runner
    from probe.runs.atomic import write_atomically
    from probe.runs.circuits import CircuitTask, circuit_of, circuit_output, circuit_units

    labels = args.labels or shipped_labels(args.model)
    if labels is None:
        _say(f"no --labels: labelling {args.type} on {args.model} first")
    config = CircuitConfig(modes=modes, top_k=args.top_k, all_pairs=args.all_pairs, examples=args.examples,
                           controls=args.controls, seed=args.seed)
    task = CircuitTask(args.type, config, labels, args.device, args.dtype, load_keywords(args),
                       str(out) if out is not None else None, isinstance(run_on, runner.InProcess))
    report = runner.run(circuit_units(args.model, args.type), task, circuit_output(out, args.force), run_on)
    result = report.results[0]  # one unit: its failure was raised (one line)
    circuit = circuit_of(result.table, result.arrays)  # computed, read back from the journal, or from Ray
    for line in circuit.lines():
        print(line, file=sys.stderr)
    if out is None and len(circuit.edges):
        print(readable_edges(circuit.edges), flush=True)  # the exact values: --out
    if pairs_out is not None:
        write_atomically(pairs_out, lambda tmp: save_table(circuit.composition, tmp))
        _say(f"wrote {pairs_out} ({len(circuit.composition)} scored pairs)")
    if html_out is not None:
        from probe.views.circuit import write_circuit_page

        write_circuit_page(circuit, html_out)
        _say(f"wrote {html_out}")
    return report.code
