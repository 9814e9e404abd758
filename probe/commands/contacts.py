"""`probe contacts`: per-head contact analysis of any protein language model, and ESM's predicted contacts.

    probe contacts --model M (--sequence S | --fasta F | --structure X | --structures DIR_OR_LIST)
                   [--structure X] [--chain C] [--chains A,B] [--cb virtual|real] [--threshold 8.0]
                   [--min-attention 0.3] [--min-total 100] [--min-count 100] [--binding-distance 4.0]
                   [--window N] [--regression F.json] [--out F.npz] [--heads-out F.parquet|csv]
                   [--chains-out F.parquet|csv] [--heads-summary F.parquet] [--control untrained[:K]|none]
                   [--hypergeometric-exchangeable-pairs] [--force] [--ray [auto|HOST:PORT]] [--ray-workers N]
    probe contacts --model M --fit DIR_OR_LIST [--regression FILE.json] [--cb ...] [--threshold ...]

Each record or chain is a unit of one :func:`probe.runs.runner.run` (in this process or on Ray), journalled
beside the first output so a killed run resumes. Units and checks: :mod:`probe.proteins.inputs`; files and
report lines: :mod:`probe.proteins.outputs`; the fit: :mod:`probe.proteins.regression`. Flags, printing only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe.commands import common
from probe.commands.common import add_model_options, add_ray_options, executor, load_keywords
from probe.commands.paths import input_file, output_path
from probe.errors import ProbeError
from probe.proteins import defaults
from probe.untrained import parse_control

OUTPUT_FLAGS = {"out": "--out", "heads_out": "--heads-out", "chains_out": "--chains-out",
                "heads_summary": "--heads-summary"}


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "contacts", help="per-head contact analysis of protein models; ESM's predicted contacts",
        description="Analyse every attention head of a protein language model against structures (precision "
                    "at L, L/2, L/5 by range; Vig et al.'s feature shares for contacts, binding sites and "
                    "secondary structure), and predict contacts with an ESM checkpoint's own contact "
                    "regression.",
    )
    add_model_options(parser)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--sequence", help="one protein sequence (lowercase accepted)")
    source.add_argument("--fasta", help="FASTA file; several records are processed one by one")
    source.add_argument("--structures", metavar="DIR_OR_LIST",
                        help="a folder of PDB/mmCIF files or a text file listing them: every protein chain")
    parser.add_argument("--structure", help="PDB or mmCIF file: true contacts (and the sequence if none is)")
    parser.add_argument("--chain", help="chain id in --structure (default: the first protein chain)")
    parser.add_argument("--chains", help="with --structures: only these chain ids (A or A,B; default: all)")
    parser.add_argument("--cb", choices=defaults.CB_MODES, default=defaults.DEFAULT_CB,
                        help="Cβ for contacts: virtual (from N, Cα, C, as ESM's evaluation; default) or real "
                             "(the deposited Cβ, Cα for glycine)")
    parser.add_argument("--threshold", type=float, default=defaults.CONTACT_THRESHOLD,
                        help="contact distance in Å between Cβ atoms; default 8")
    first = defaults.MIN_ATTENTION_FIRST_VERSION
    parser.add_argument("--min-attention", type=float, default=defaults.MIN_ATTENTION,
                        help="θ of Vig et al.'s feature shares: weights ≥ θ counted ({f}_count_share, "
                             "provis' ICLR 2021 version, run at 0.3: the default), weights > θ summed "
                             f"({{f}}_share, provis' first version, run at {first}: pass --min-attention "
                             f"{first} to reproduce it)")
    parser.add_argument("--min-total", type=float, default=defaults.MIN_TOTAL,
                        help="heads whose Σ α over weights > θ is below this get no feature share (NaN; "
                             "provis' min_total); default 100")
    parser.add_argument("--min-count", type=int, default=defaults.MIN_COUNT,
                        help="heads with fewer weights ≥ θ get no count share (NaN); default 100")
    parser.add_argument("--binding-distance", type=float, default=defaults.BINDING_DISTANCE,
                        help="a binding site is a residue with a heavy atom within this many Å of a ligand; "
                             "default 4")
    parser.add_argument("--window", type=int, default=None,
                        help="crop-and-average mode for sequences longer than the model takes (ESM): windows "
                             "of N residues, N/2 apart, probabilities averaged where windows overlap")
    parser.add_argument("--out", help="output .npz with the contact maps")
    parser.add_argument("--heads-out", help="output .parquet or .csv: per-head statistics of every record")
    parser.add_argument("--chains-out", help="output .parquet or .csv with one row per record or chain")
    parser.add_argument("--heads-summary", help="output .parquet with one row per head over the whole set")
    parser.add_argument("--fit", metavar="DIR_OR_LIST",
                        help="fit ESM's contact regression (L1 logistic regression on APC(sym α) of every "
                             "head) on these structures, report leave-one-structure-out precision (and the "
                             "top-k-head average baseline), and save it (--regression FILE, default beside "
                             "the outputs)")
    parser.add_argument("--regression", metavar="FILE.json",
                        help="with --fit: where to save the fitted regression; otherwise: a fitted "
                             "regression to predict contacts with (any protein model; replaces an ESM "
                             "checkpoint's own)")
    common.add_control_option(parser)
    parser.add_argument("--hypergeometric-exchangeable-pairs", action="store_true", dest="exchangeable",
                        help="also write the retired p_exchangeable_L_r, q_exchangeable_L_r: a hypergeometric"
                             " test that assumes a head's top pairs exchangeable (they are not)")
    parser.add_argument("--force", action="store_true",
                        help="recompute every record even if an earlier run finished some of them")
    add_ray_options(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    control = parse_control(args.control)  # import-light: a bad --control is answered before torch loads
    common.check_model_options(args)  # so are a mistyped --model, an unwritable --offload-folder,
    paths = _paths(args) if args.fit is None else {}  # an output's extension or folder, a missing input
    # Imported here, not at the top: they load torch and transformers, which `probe --help` must not pay for.
    from probe import models
    from probe.proteins import domain, inputs, outputs, sets
    from probe.runs import runner
    from probe.runs.tasks import ContactsTask, contact_units

    if args.fit is not None:
        return _fit(args)
    outputs.refuse_foreign(paths, OUTPUT_FLAGS, args.force)
    options = inputs.contact_options(
        threshold=args.threshold, cb=args.cb, window=args.window, min_attention=args.min_attention,
        min_count=args.min_count, min_total=args.min_total, binding_distance=args.binding_distance,
        per_head=bool({"heads_out", "chains_out", "heads_summary"} & set(paths)), regression=args.regression,
        control=control.twins)
    run_on = executor(args)
    specs, skipped = inputs.contact_units(sequence=args.sequence, fasta=args.fasta, structure=args.structure,
                                          chain=args.chain, structures=args.structures, chains=args.chains)
    for name, reason in skipped:
        print(f"probe contacts: skipped {name}: {reason}", file=sys.stderr)
    if not specs:
        raise ProbeError("no protein chain to analyse"
                         + (f" ({len(skipped)} file(s) skipped)" if skipped else ""))
    loaded = models.load(args.model, device=args.device, dtype=args.dtype, **load_keywords(args))
    models.require_protein(loaded, "probe contacts")
    options = inputs.resolve_per_head(loaded, options, args.model)
    inputs.check_records(loaded, specs, options)
    for line in domain.unit_notes(loaded, specs):  # outside the model's domain; a multi-chain file's chain
        print(f"probe contacts: {line}", file=sys.stderr)

    identities = {spec.key: sets.unit_identity(loaded, spec, options) for spec in specs}
    task = ContactsTask(options, device=args.device, dtype=args.dtype, identities=identities,
                        placement=load_keywords(args))
    if isinstance(run_on, runner.InProcess):
        run_on = runner.InProcess(preloaded={loaded.name: loaded})  # the model checked above, loaded once
    files = outputs.ContactOutputs(paths, loaded, options, args.model, min_count=args.min_count,
                                   min_total=args.min_total, exchangeable=args.exchangeable)

    def show(unit, result) -> None:
        print(outputs.report_line(unit.payload.id, sets.unpack(unit.payload, result.table, result.arrays)))

    def write(table, finished) -> dict:
        return files.writers([sets.unpack(u.payload, r.table, r.arrays) for u, r in finished])

    out = runner.Out(path=next(iter(paths.values()), None), force=args.force, show=show, write=write,
                     written=lambda table, finished: files.written(len(finished)), command="probe contacts",
                     noun="unit")
    report = runner.run(contact_units(loaded.name, specs), task, out, run_on, description="contacts")
    if files.pooled is not None:
        print(files.pooled)
    if not paths:
        print("no --out, --heads-out, --chains-out or --heads-summary given: nothing was saved",
              file=sys.stderr)
    if skipped:
        print(f"{len(skipped)} file(s) could not be analysed (see above); the rest was written",
              file=sys.stderr)
        return max(report.code, 2) if report.code != 1 else 1
    return report.code


def _paths(args: argparse.Namespace) -> dict[str, Path]:
    """kind -> path of every output flag given, checked without heavy imports (extension, folder, writable;
    run() checks that an existing one is ours), and the input files (--structure, --fasta) exist."""
    for flag, value, what in (("--structure", args.structure, "a PDB or mmCIF file"),
                              ("--fasta", args.fasta, "a FASTA file")):
        if value is not None:
            input_file(value, flag, what)
    paths = {kind: output_path(getattr(args, kind), defaults.SUFFIXES[kind], flag)
             for kind, flag in OUTPUT_FLAGS.items() if getattr(args, kind)}
    if len(set(paths.values())) < len(paths):
        raise ProbeError("give each output its own file name")
    return paths


def _fit(args: argparse.Namespace) -> int:
    """--fit: a regression fitted on every structure, saved as JSON; leave-one-out precision printed."""
    from probe import models  # torch and transformers: see run()
    from probe.proteins import regression, regression_file, units
    from probe.proteins.structure import check_threshold

    if args.sequence or args.fasta or args.structure or args.structures:
        raise ProbeError("--fit fits and saves a regression; predict with it in a second run: "
                         "--regression FILE with --sequence, --fasta, --structure or --structures")
    check_threshold(args.threshold, "--threshold")
    first = next((getattr(args, kind) for kind in OUTPUT_FLAGS if getattr(args, kind)), None)
    folder = Path(first).expanduser().parent if first else Path.cwd()
    default = folder / f"{Path(str(args.model).rstrip('/')).name or 'model'}.contact_regression.json"
    target = output_path(args.regression or str(default), (".json",), "--regression")
    if target.exists() and not args.force and not regression_file.is_regression(target):
        raise ProbeError(f"--regression {target} exists but is not a contact regression; pass --force to "
                         "overwrite it, or another file name")
    files = units.structure_files(args.fit, "--fit")
    if len(files) < 2:
        raise ProbeError(f"--fit {args.fit} holds {len(files)} structure: leave-one-structure-out needs at "
                         "least two")
    loaded = models.load(args.model, device=args.device, dtype=args.dtype, **load_keywords(args))
    models.require_protein(loaded, "probe contacts --fit")
    fitted, evaluation = regression.fit_files(loaded, files, args.threshold, args.cb, model=args.model)
    fitted.save(target)
    print("\n".join(regression.held_out_lines(evaluation, len(fitted.structures))))
    print(f"wrote the contact regression fitted on {len(fitted.structures)} structures to {target}; predict "
          f"with --regression {target}", file=sys.stderr)
    return 0
