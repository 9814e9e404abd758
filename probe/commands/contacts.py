"""`probe contacts`: per-head contact analysis of any protein language model, and ESM's predicted contacts.

    probe contacts --model M (--sequence S | --fasta F | --structure X | --structures DIR_OR_LIST)
                   [--structure X] [--chain C] [--chains A,B] [--cb virtual|real] [--threshold 8.0]
                   [--min-attention 0.3] [--min-total 100] [--min-count 100] [--binding-distance 4.0]
                   [--window N] [--regression FILE.json]
                   [--out F.npz] [--heads-out F.parquet] [--chains-out F.parquet] [--heads-summary F.parquet]
                   [--force] [--ray [auto|HOST:PORT]] [--ray-workers N]
    probe contacts --model M --fit DIR_OR_LIST [--regression FILE.json] [--cb ...] [--threshold ...]

--fit fits ESM's contact regression for any protein model on the structures given (probe.proteins.regression),
prints its leave-one-structure-out precision beside the top-k-head average, and saves it; --regression FILE then
predicts contacts with it. The one-line summary per record (models without a regression) and per set
(--heads-summary) names the best head only when it is above the contact base rate after Benjamini–Hochberg.

With --structure alone the sequence is the chain's observed residues; with a sequence or FASTA as well, every record
is aligned to the chain (so a construct with tags or missing residues still scores the right pairs). --structures
runs every protein chain (or the --chains given) of every file of a folder or a list file. Every record or chain is
a unit of one run of :func:`probe.runs.runner.run` (:class:`probe.runs.tasks.ContactsTask`, the unit function
:func:`probe.proteins.sets.analyse_unit`), in this process or with --ray on Ray workers: the same runner as
`probe label`. Each unit is persisted as it finishes in a journal beside the first output file (`.NAME.parts/`), so a
run that is killed (Ctrl-C, SIGKILL, out of memory) loses at most the unit in flight and a rerun of the same command
computes only the rest; a unit is reused only when everything that determines it is the same (model revision,
sequence, structure file hash, chain, threshold, Cβ convention, window, θ, binding distance); --force recomputes
all; a unit that fails (an unreadable structure among hundreds) is listed in FIRST_OUTPUT.errors.csv and the run
goes on.

The npz layout (record i = 0, 1, ...):

    ids [R] str, sequences [R] str, lengths [R] int, model str, threshold float, cb str,
    ranges ["short" "medium" "long"], fractions ["L" "L/2" "L/5"],
    contacts_{i} [L_i L_i] float32                                    -- models with a contact regression (ESM),
    true_contacts_{i} [L_i L_i] int8 (1 contact, 0 not, -1 unknown)  -- with a structure,
    precision_{i} [range fraction] float64                            -- both.

--heads-out: one row per record × layer × head (``record, id`` and :mod:`probe.proteins.contacts`' per-head columns);
--chains-out: one row per record (:func:`probe.proteins.sets.chain_table`); --heads-summary: one row per head over
the whole set (:data:`probe.proteins.sets.HEAD_SUMMARY_COLUMNS`, read it with
:func:`probe.proteins.sets.read_heads_summary`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

import numpy as np

from probe import models
from probe.commands.common import add_model_options, add_ray_options, executor, load_keywords, output_path
from probe.errors import ProbeError
from probe.proteins import sets as contact_sets
from probe.proteins.contacts import FRACTIONS, RANGES
from probe.proteins.features import MIN_ATTENTION, MIN_COUNT, MIN_TOTAL
from probe.proteins.sets import ContactOptions, UnitOutcome, UnitSpec
from probe.proteins.structure import (
    BINDING_DISTANCE,
    CB_MODES,
    CONTACT_THRESHOLD,
    DEFAULT_CB,
    check_threshold,
)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "contacts", help="per-head contact analysis of protein models; ESM's predicted contacts",
        description="Analyse every attention head of a protein language model against structures (precision at "
                    "L, L/2, L/5 by range; Vig et al.'s feature shares for contacts, binding sites and secondary "
                    "structure), and predict contacts with an ESM checkpoint's own contact regression.",
    )
    add_model_options(parser)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--sequence", help="one protein sequence (lowercase accepted)")
    source.add_argument("--fasta", help="FASTA file; several records are processed one by one")
    source.add_argument("--structures", metavar="DIR_OR_LIST",
                        help="a folder of PDB/mmCIF files, or a text file listing one per line: every protein chain")
    parser.add_argument("--structure", help="PDB or mmCIF file: true contacts (and the sequence when none is given)")
    parser.add_argument("--chain", help="chain id in --structure (default: the first protein chain)")
    parser.add_argument("--chains", help="with --structures: only these chain ids, e.g. A or A,B (default: all)")
    parser.add_argument("--cb", choices=CB_MODES, default=DEFAULT_CB,
                        help="Cβ for contacts: virtual (from N, Cα, C, as ESM's evaluation; default) or real "
                             "(the deposited Cβ, Cα for glycine)")
    parser.add_argument("--threshold", type=float, default=CONTACT_THRESHOLD,
                        help="contact distance in Å between Cβ atoms; default 8")
    parser.add_argument("--min-attention", type=float, default=MIN_ATTENTION,
                        help="θ of Vig et al.'s feature shares: weights > θ are summed ({f}_share), weights ≥ θ "
                             "counted ({f}_count_share); default 0.3")
    parser.add_argument("--min-total", type=float, default=MIN_TOTAL,
                        help="heads whose Σ α over weights > θ is below this get no feature share (NaN; provis' "
                             "min_total); default 100")
    parser.add_argument("--min-count", type=int, default=MIN_COUNT,
                        help="heads with fewer weights ≥ θ get no count share (NaN); default 100")
    parser.add_argument("--binding-distance", type=float, default=BINDING_DISTANCE,
                        help="a binding site is a residue with a heavy atom within this many Å of a ligand; default 4")
    parser.add_argument("--window", type=int, default=None,
                        help="crop-and-average mode for sequences longer than the model takes (ESM): windows of N "
                             "residues, N/2 apart, probabilities averaged where windows overlap")
    parser.add_argument("--out", help="output .npz with the contact maps")
    parser.add_argument("--heads-out", help="output .parquet with per-head statistics of every record")
    parser.add_argument("--chains-out", help="output .parquet with one row per record or chain")
    parser.add_argument("--heads-summary", help="output .parquet with one row per head over the whole set")
    parser.add_argument("--fit", metavar="DIR_OR_LIST",
                        help="fit ESM's contact regression (L1 logistic regression on APC(sym α) of every head) on "
                             "these structures, report leave-one-structure-out precision (and the top-k-head "
                             "average baseline), and save it (--regression FILE, default beside the outputs)")
    parser.add_argument("--regression", metavar="FILE.json",
                        help="with --fit: where to save the fitted regression; otherwise: a fitted regression to "
                             "predict contacts with (any protein model; replaces an ESM checkpoint's own)")
    parser.add_argument("--force", action="store_true",
                        help="recompute every record even if an earlier run finished some of them")
    add_ray_options(parser)
    return parser


def _records(args: argparse.Namespace) -> list[tuple[str, str]]:
    from probe.proteins.fasta import read_fasta

    if args.sequence is not None:
        return [("sequence", args.sequence)]
    if args.fasta is not None:
        return read_fasta(args.fasta)
    return []


def _options(args: argparse.Namespace, per_head: bool) -> ContactOptions:
    check_threshold(args.threshold, "--threshold")
    check_threshold(args.binding_distance, "--binding-distance")
    if not (math.isfinite(args.min_attention) and 0.0 < args.min_attention <= 1.0):
        raise ProbeError(f"--min-attention {args.min_attention} must be an attention weight above 0 and at most 1")
    if args.min_count < 1:
        raise ProbeError(f"--min-count {args.min_count} must be at least 1")
    if not (math.isfinite(args.min_total) and args.min_total >= 0):
        raise ProbeError(f"--min-total {args.min_total} must be a finite sum of attention weights, 0 or more")
    if args.window is not None and args.window < 1:
        raise ProbeError(f"--window {args.window} must be a positive number of residues")
    return ContactOptions(threshold=float(args.threshold), cb=args.cb, window=args.window,
                          min_attention=float(args.min_attention), binding_distance=float(args.binding_distance),
                          per_head=per_head)


def _outputs(args: argparse.Namespace) -> dict[str, Path]:
    outputs = {}
    for flag, attribute, allowed in (("--out", "out", (".npz",)), ("--heads-out", "heads_out", (".parquet",)),
                                     ("--chains-out", "chains_out", (".parquet",)),
                                     ("--heads-summary", "heads_summary", (".parquet",))):
        value = getattr(args, attribute)
        if value:
            path = output_path(value, allowed, flag)  # extension, folder, writable, npz magic
            if path.exists() and not args.force and not _ours(path, attribute):
                raise ProbeError(f"{flag} {value} exists but is not a probe contacts output; pass --force to "
                                 "overwrite it, or another file name")
            outputs[attribute] = path
    if len(set(outputs.values())) < len(outputs):
        raise ProbeError("give each output its own file name")
    return outputs


# Columns (or npz keys) every earlier output of each kind has: an existing file without them is someone else's.
_SIGNATURES = {"out": {"ids", "sequences", "lengths", "model"}, "heads_out": {"record", "id", "layer", "head", "name"},
               "chains_out": {"record", "id", "length", "sequence"},
               "heads_summary": {"layer", "head", "name", "n_proteins", "n_high"}}


def _ours(path: Path, kind: str) -> bool:
    """Whether an existing output file was written by probe contacts (so overwriting it loses nothing foreign)."""
    try:
        if kind == "out":
            with np.load(path, allow_pickle=False) as data:
                names = set(data.files)
        else:
            import pyarrow.parquet as pq

            names = set(pq.read_schema(path).names)
    except Exception:  # not a zip / not parquet / unreadable: not ours
        return False
    return _SIGNATURES[kind] <= names


def _units(args: argparse.Namespace) -> tuple[list[UnitSpec], list[tuple[str, str]]]:
    if args.structures is not None:
        if args.structure or args.chain:
            raise ProbeError("--structures takes whole sets; use --chains to pick chains (not --structure/--chain)")
        chains = [chain.strip() for chain in args.chains.split(",") if chain.strip()] if args.chains else None
        return contact_sets.structure_units(contact_sets.structure_files(args.structures), chains)
    if args.chains:
        raise ProbeError("--chains selects chains of --structures; with --structure use --chain")
    if args.sequence is None and args.fasta is None and args.structure is None:
        raise ProbeError("give the input: --sequence S, --fasta F, --structure X or --structures DIR")
    if args.chain is not None and args.structure is None:
        raise ProbeError("--chain selects a chain of --structure; pass --structure too")
    records = _records(args)
    if args.structure is not None:
        from probe.proteins.structure import read_structure

        structure = read_structure(args.structure, chain=args.chain)  # checks the file and the chain now
        if not records:
            from probe.hashing import file_hash

            spec = UnitSpec(key=f"{args.structure}:{structure.chain}", id=f"{structure.name}_{structure.chain}",
                            record=0, structure=args.structure, chain=structure.chain,
                            structure_hash=file_hash(args.structure))
            return [spec], []
        return contact_sets.record_units(records, args.structure, structure.chain), []
    return contact_sets.record_units(records), []


def _check_records(loaded, units: list[UnitSpec], options: ContactOptions) -> None:  # before any computing
    """Letters and lengths of the given sequences, checked before any computing (one line naming the record)."""
    alphabet = models.protein_alphabet(loaded)
    limit = loaded.max_tokens - 2
    if options.window is not None and not 1 <= options.window <= limit:
        raise ProbeError(f"--window {options.window} must be between 1 and {limit} (the model's residue limit)")
    for spec in units:
        if spec.sequence is None:
            continue
        try:
            cleaned = models.clean_protein(spec.sequence, alphabet)
        except ProbeError as error:
            raise ProbeError(f"{spec.id}: {error}" if len(units) > 1 else str(error)) from None
        if len(cleaned) > limit and options.window is None:
            raise ProbeError(f"{spec.id} has {len(cleaned)} residues but {loaded.name} takes at most {limit}; "
                             f"shorten it or use --window {limit}")
        if len(cleaned) > limit and options.per_head:
            raise ProbeError("--heads-out, --chains-out and --heads-summary need whole sequences: per-head statistics "
                             "are not computed in --window mode")


def run(args: argparse.Namespace) -> int:
    from probe.runs import runner
    from probe.runs.tasks import ContactsTask, contact_units

    if args.fit is not None:
        return _fit(args)
    outputs = _outputs(args)
    per_head_wanted = bool({"heads_out", "chains_out", "heads_summary"} & set(outputs))
    options = _with_regression(_options(args, per_head_wanted), args)
    run_on = executor(args)
    specs, skipped = _units(args)
    for name, reason in skipped:
        print(f"probe contacts: skipped {name}: {reason}", file=sys.stderr)
    if not specs:
        raise ProbeError("no protein chain to analyse" + (f" ({len(skipped)} file(s) skipped)" if skipped else ""))

    loaded = models.load(args.model, device=args.device, dtype=args.dtype, **load_keywords(args))
    models.require_protein(loaded, "probe contacts")
    if options.regression is not None:
        from probe.proteins.regression import read_regression

        read_regression(options.regression).check_model(loaded)  # the right model, before any computing
    predicts = loaded.has_contact_head or options.regression is not None
    per_head = per_head_wanted or not predicts
    if per_head != options.per_head:
        options = dataclasses.replace(options, per_head=per_head)
    if options.window is not None and not predicts:
        raise ProbeError(f"--window averages predicted contacts, which need a contact regression; {args.model} has "
                         "none (per-head analysis needs whole sequences)")
    _check_records(loaded, specs, options)

    identities = {spec.key: contact_sets.unit_identity(loaded, spec, options) for spec in specs}
    task = ContactsTask(options, device=args.device, dtype=args.dtype, identities=identities,
                        placement=load_keywords(args))
    if isinstance(run_on, runner.InProcess):
        run_on = runner.InProcess(preloaded={loaded.name: loaded})  # the model checked above, not loaded twice
    report = runner.run(contact_units(loaded.name, specs), task, _out(outputs, loaded, options, args), run_on,
                        description="contacts")
    pooled = _POOLED.pop(outputs.get("heads_summary"), None)
    if pooled is not None:
        print(pooled)
    if not outputs:
        print("no --out, --heads-out, --chains-out or --heads-summary given: nothing was saved", file=sys.stderr)
    if skipped:
        print(f"{len(skipped)} file(s) could not be analysed (see above); the rest was written", file=sys.stderr)
        return max(report.code, 2) if report.code != 1 else 1
    return report.code


def _outcomes(finished) -> list[UnitOutcome]:
    """The finished units of a run (unit order) as the outcomes probe.proteins.sets builds its tables from."""
    return [contact_sets.unpack(unit.payload, result.table, result.arrays) for unit, result in finished]


def _out(outputs: dict[str, Path], loaded, options: ContactOptions, args: argparse.Namespace):
    """Where the runner writes: every output file, rebuilt from the finished units; a report line per unit."""
    from probe.runs.runner import Out

    def write(table, finished) -> dict:
        return _writers(outputs, loaded, _outcomes(finished), options, args)

    def written(table, finished) -> list[str]:
        return _written(outputs, len(finished))

    def show(unit, result) -> None:
        _report(unit.payload.id, contact_sets.unpack(unit.payload, result.table, result.arrays))

    first = next(iter(outputs.values()), None)
    return Out(path=first, write=write, force=args.force, show=show, written=written, command="probe contacts",
               noun="unit")


def _writers(outputs: dict[str, Path], loaded, outcomes: list[UnitOutcome], options: ContactOptions,
             args: argparse.Namespace) -> dict:
    """{path: writer(tmp)} of every output asked for (probe.runs.atomic.write_atomically calls each)."""
    writers = {}
    if "out" in outputs:
        writers[outputs["out"]] = lambda tmp: _write_npz(tmp, outcomes, options, args)
    heads = contact_sets.heads_table(outcomes, args.min_count, min_total=args.min_total) if options.per_head else None
    chains = contact_sets.chain_table(outcomes)
    if "heads_out" in outputs:
        writers[outputs["heads_out"]] = lambda tmp: heads.to_parquet(tmp, index=False)
    if "chains_out" in outputs:
        writers[outputs["chains_out"]] = lambda tmp: chains.to_parquet(tmp, index=False)
    if "heads_summary" in outputs:
        summary = contact_sets.summarize_heads(heads, chains, args.min_count, min_total=args.min_total)
        meta = {"model": loaded.name, "revision": loaded.revision, "proteins": [o.spec.id for o in outcomes],
                "min_count": args.min_count, "min_total": args.min_total, **dataclasses.asdict(options)}
        writers[outputs["heads_summary"]] = lambda tmp: contact_sets.write_heads_summary(tmp, summary, meta)
        _POOLED[outputs["heads_summary"]] = f"{len(outcomes)} protein(s) pooled: {best_head_line(summary)}"
    return writers


# The pooled best-head line of the last summary written, per summary file: printed (stdout) once the run is done.
_POOLED: dict[Path, str] = {}


def _written(outputs: dict[str, Path], count: int) -> list[str]:
    lines = []
    if "out" in outputs:
        lines.append(f"wrote contacts of {count} sequence(s) to {outputs['out']}")
    if "heads_out" in outputs:
        lines.append(f"wrote per-head statistics to {outputs['heads_out']}")
    if "chains_out" in outputs:
        lines.append(f"wrote {count} row(s), one per record, to {outputs['chains_out']}")
    if "heads_summary" in outputs:
        lines.append(f"wrote the per-head summary over {count} protein(s) to {outputs['heads_summary']}")
    return lines


def _report(name: str, outcome: UnitOutcome) -> None:
    """One stdout line per record: P@L, P@L/2, P@L/5 per range with a structure, else the top long-range pairs;
    for models without a contact regression, the best heads."""
    result = outcome.result
    length = len(result.sequence)
    if result.precision is not None:
        parts = [f"{r}: " + " ".join(f"P@{contact_sets.fraction_label(f)} {result.precision[f'p_at_{f}_{r}']:.3f}"
                                     for f in FRACTIONS) for r in RANGES]
        print(f"{name} ({length} residues)  " + "  |  ".join(parts))
        return
    if result.contacts is None:
        heads = result.heads
        if heads is not None and heads["p_at_L_long"].notna().any():
            print(f"{name} ({length} residues)  no contact regression; {best_head_line(heads)}")
        else:
            print(f"{name} ({length} residues)  no contact regression in this model: per-head statistics need a "
                  "structure (--structure)")
        return
    contacts = np.nan_to_num(np.triu(result.contacts, k=24), nan=0.0)
    top = np.dstack(np.unravel_index(np.argsort(-contacts, axis=None)[:5], contacts.shape))[0]
    pairs = ", ".join(f"{i + 1}-{j + 1} ({result.contacts[i, j]:.2f})" for i, j in top if j - i >= 24)
    print(f"{name} ({length} residues)  top long-range pairs: {pairs or 'none (shorter than 25 residues)'}")


def best_head_line(heads, name: str = "long") -> str:
    """The best head of a per-head table or summary in range `name` — named only when it is above the contact base
    rate after Benjamini–Hochberg over the heads (q < FDR), else "no head above the base rate"."""
    from probe.proteins.significance import FDR, best_significant

    precision = "pooled_p_at_L" if f"pooled_p_at_L_{name}" in heads else "p_at_L"
    best = best_significant(heads, name)
    if best is not None:
        return (f"best head above the base rate ({name} range): {best['name']} P@L {best[f'{precision}_{name}']:.3f}"
                f" = {best[f'enrichment_L_{name}']:.1f}× the base rate {best[f'base_rate_{name}']:.3f} "
                f"(q = {best[f'q_value_L_{name}']:.2g})")
    top = heads[f"{precision}_{name}"].max()
    base = heads[f"base_rate_{name}"].mean()
    return (f"no head above the base rate ({name} range: best P@L {top:.3f}, base rate {base:.3f}, every q ≥ {FDR} "
            f"after FDR over {len(heads)} heads)")


def _with_regression(options: ContactOptions, args: argparse.Namespace) -> ContactOptions:
    """`options` with the --regression file (checked now) and its hash, so a changed file recomputes the units."""
    if not args.regression:
        return options
    from probe.proteins.regression import read_regression
    from probe.runs.journal import file_hash

    read_regression(args.regression)
    path = str(Path(args.regression).expanduser().resolve())
    return dataclasses.replace(options, regression=path, regression_hash=file_hash(path))


def _fit(args: argparse.Namespace) -> int:
    """--fit: leave-one-structure-out precision of the fitted regression and of the top-k-head average, then the
    regression fitted on every structure, saved as JSON."""
    from probe.proteins import regression as fitting

    if args.sequence or args.fasta or args.structure or args.structures:
        raise ProbeError("--fit fits and saves a regression; predict with it in a second run: --regression FILE "
                         "with --sequence, --fasta, --structure or --structures")
    check_threshold(args.threshold, "--threshold")
    target = args.regression or _default_regression_path(args)
    target = output_path(target, (".json",), "--regression")
    if target.exists() and not args.force and not _is_regression(target):
        raise ProbeError(f"--regression {target} exists but is not a contact regression; pass --force to overwrite "
                         "it, or another file name")
    files = contact_sets.structure_files(args.fit, "--fit")
    if len(files) < 2:
        raise ProbeError(f"--fit {args.fit} holds {len(files)} structure: leave-one-structure-out needs at least two")
    loaded = models.load(args.model, device=args.device, dtype=args.dtype, **load_keywords(args))
    models.require_protein(loaded, "probe contacts --fit")
    structures = fitting.training_structures(files, loaded, args.threshold, args.cb)
    maps = [fitting.head_maps(loaded, structure.sequence) for structure in structures]  # [layer head L L] each
    fitted, evaluation = fitting.fit(maps, structures, args.model, revision=loaded.revision)
    fitted.save(target)
    for method, label in (("regression", "regression"), ("top_heads", f"top-{fitting.TOP_K}-head average")):
        rows = evaluation[evaluation["method"] == method]
        parts = [f"{r}: P@L {rows[f'p_at_L_{r}'].mean():.3f} P@L/5 {rows[f'p_at_L5_{r}'].mean():.3f}" for r in RANGES]
        print(f"held out ({len(structures)} structures, leave-one-out) {label}:  " + "  |  ".join(parts))
    print(f"wrote the contact regression fitted on {len(structures)} structures to {target}; predict with "
          f"--regression {target}", file=sys.stderr)
    return 0


def _default_regression_path(args: argparse.Namespace) -> str:
    """Beside the first output given, else in the current folder: <model name>.contact_regression.json."""
    first = next((getattr(args, name) for name in ("out", "heads_out", "chains_out", "heads_summary")
                  if getattr(args, name)), None)
    folder = Path(first).expanduser().parent if first else Path.cwd()
    return str(folder / f"{Path(str(args.model).rstrip('/')).name or 'model'}.contact_regression.json")


def _is_regression(path: Path) -> bool:
    from probe.proteins.regression import read_regression

    try:
        read_regression(path)
    except ProbeError:
        return False
    return True


def _write_npz(tmp: Path, outcomes: list[UnitOutcome], options: ContactOptions, args: argparse.Namespace) -> None:
    arrays = {
        "ids": np.array([outcome.spec.id for outcome in outcomes]),
        "sequences": np.array([outcome.result.sequence for outcome in outcomes]),
        "lengths": np.array([len(outcome.result.sequence) for outcome in outcomes]),
        "model": np.array(args.model),
        "threshold": np.array(options.threshold),
        "cb": np.array(options.cb),
        "ranges": np.array(list(RANGES)),
        "fractions": np.array(["L", "L/2", "L/5"]),
    }
    for index, outcome in enumerate(outcomes):
        result = outcome.result
        if result.contacts is not None:
            arrays[f"contacts_{index}"] = result.contacts.astype(np.float32)
        if result.true_contacts is not None:
            arrays[f"true_contacts_{index}"] = result.true_contacts
        if result.precision is not None:
            arrays[f"precision_{index}"] = np.array(
                [[result.precision[f"p_at_{f}_{r}"] for f in FRACTIONS] for r in RANGES])
    with open(tmp, "wb") as handle:
        np.savez_compressed(handle, **arrays)
