"""`probe report`: one self-contained HTML file of a model (card, atlas, labelled heads, every head on an
input, full maps with the token view, proteins' contacts) that opens from file:// with no server and no
network."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe.commands.common import TABLE_EXTENSIONS, add_model_options, check_model_options, load_keywords
from probe.commands.label import HEAD_TYPES
from probe.commands.paths import input_file, page_path
from probe.errors import ProbeError


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "report", help="write one self-contained HTML report of a model (opens offline, from file://)",
        description="Write ONE HTML file: the architecture card, the head atlas of every type, the labelled "
                    "heads with their meaning columns, every head's thumbnail on a probe input, full maps "
                    "with the token view (PNG/SVG export buttons), and for protein models the contact maps "
                    "and every head against the contact base rate. No server, no network request.",
    )
    add_model_options(parser)  # --model, --device, --dtype
    parser.add_argument("--labels", help="labels table written by `probe label` (.csv, .parquet, .json); "
                                         "default: the table shipped with the model (the organisms, "
                                         "all-MiniLM-L6-v2), if any")
    parser.add_argument("--text", metavar="FILE", help="the input to show (a text file; for protein models a "
                                                       "sequence or FASTA); default: natural text (GAP's "
                                                       "Wikipedia passages) for a model that reads English, "
                                                       "else a probe input")
    parser.add_argument("--structure", metavar="PDB",
                        help="protein models: a PDB/mmCIF file for true contacts and the 3D view of the "
                             "heads' attention on it (with --text: that sequence aligned to the chain; "
                             "another protein's is refused)")
    parser.add_argument("--chain", help="the structure's chain (default: the first)")
    parser.add_argument("--history", metavar="TABLE",
                        help="the table `probe history` wrote for this model's run (.csv, .parquet): a "
                             "training timeline (ICL score, losses, head scores against step)")
    parser.add_argument("--history-control", metavar="TABLE",
                        help="with --history: another model's history (its 1-layer control's), drawn beside "
                             "it in the timeline's ICL-score and loss panels")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens of the probe input (default 128)")
    parser.add_argument("--maps", type=int, default=4,
                        help="heads with a full map when not every head fits the size budget (default 4)")
    parser.add_argument("--circuit", action="append", metavar="TYPE", choices=HEAD_TYPES,
                        help="also the circuit of a head type (probe circuit) on --labels (or a zoo model's "
                             "shipped table); repeat for several")
    parser.add_argument("--circuit-task", metavar="FILE",
                        help="also the circuit of your own task over every edge (probe circuit --task: "
                             "CSV or JSONL pairs; EAP-IG, 5 steps, logit difference)")
    parser.add_argument("--out", required=True, help="the report: FILE.html")
    parser.add_argument("--force", action="store_true",
                        help="overwrite an --out that is not a page probe wrote (your own HTML)")
    return parser


def _read_text(path: str) -> str:
    file = input_file(path, "--text", "a text file")
    try:
        text = file.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError as error:
        raise ProbeError(f"--text {path} is not UTF-8 text (byte {error.start}): save it as UTF-8") from None
    if not text:
        raise ProbeError(f"--text {path} is empty")
    if text.startswith(">"):  # FASTA: the first record's sequence
        text = "".join(line.strip() for line in text.splitlines()[1:] if line and not line.startswith(">"))
    return text


def run(args: argparse.Namespace) -> int:
    # Every check of the arguments and files first: bad input answers before torch is imported.
    out = page_path(args.out, args.force)
    if args.seq_len < 4:
        raise ProbeError(f"--seq-len {args.seq_len}: give at least 4 tokens")
    if args.maps < 1:
        raise ProbeError("--maps must be at least 1")
    text = _read_text(args.text) if args.text else None
    if args.structure is not None:
        input_file(args.structure, "--structure", "a PDB or mmCIF file")
    if args.history is not None:
        input_file(args.history, "--history", "the table `probe history` wrote for this model's run",
                   (".csv", ".parquet"))
    if args.history_control is not None:
        if args.history is None:
            raise ProbeError("--history-control is drawn beside a training history: give --history too")
        input_file(args.history_control, "--history-control", "the table `probe history` wrote for the "
                   "control's run", (".csv", ".parquet"))
    if args.labels:
        input_file(args.labels, "--labels", "a table written by `probe label`", TABLE_EXTENSIONS)
    if args.circuit_task:
        input_file(args.circuit_task, "--circuit-task", "a CSV/JSONL task (docs/circuits.md)",
                   (".csv", ".jsonl"))
    check_model_options(args)
    # Heavy imports (torch, transformers, pandas) only now.
    from probe.circuits.circuit import shipped_labels
    from probe.models import ModelKind, load
    from probe.views.report import write_report
    from probe.views.tables import as_table

    labels_file = args.labels or shipped_labels(args.model)  # the model's own shipped table, by model id
    labels = as_table(labels_file) if labels_file else None
    if args.structure is not None:  # from the config, before the weights load (and their loading note)
        from probe.models import spec_kinds

        kinds = spec_kinds(args.model)
        if kinds and ModelKind.PROTEIN_MLM not in kinds:
            raise ProbeError(f"--structure is for protein models; {args.model} is a {kinds[0].description}")
    if args.structure is not None and text is not None:  # --text is aligned to the chain, or refused, now
        from probe.proteins.structure import read_structure
        from probe.views.structure_view import aligned_structure

        aligned_structure(read_structure(args.structure, chain=args.chain), text)
    loaded = load(args.model, device=args.device, dtype=args.dtype, **load_keywords(args))
    if args.structure is not None and loaded.kind != ModelKind.PROTEIN_MLM:
        raise ProbeError(f"--structure is for protein models; {args.model} is a {loaded.kind.description}")
    circuits = []
    for head_type in dict.fromkeys(args.circuit or []):
        from probe.circuits import find_circuit

        circuits.append(find_circuit(loaded, head_type, labels))
    if args.circuit_task:  # every edge scored on the task: drawn as show_circuit(found) draws it
        from probe.circuits.task_search import task_circuit

        circuits.append(task_circuit(loaded, args.circuit_task))
    history = control = None
    if args.history is not None:
        from probe.runs.history import read_history

        history = read_history(Path(args.history).expanduser())
        if args.history_control is not None:
            control = read_history(Path(args.history_control).expanduser())
    write_report(loaded, out, labels=labels, text=text, structure=args.structure, chain=args.chain,
                 seq_len=args.seq_len, full_maps=args.maps, history=history, circuits=circuits,
                 history_control=control)
    print(f"probe report: wrote {out} ({out.stat().st_size / 2**20:.2f} MiB)", file=sys.stderr)
    return 0
