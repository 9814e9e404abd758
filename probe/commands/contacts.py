"""`probe contacts`: ESM contact maps streamed head by head, scored against a structure when one is given.

    probe contacts --model M (--sequence S | --fasta F | --structure X) [--structure X] [--chain C]
                   [--out F.npz] [--heads-out F.parquet] [--window N] [--threshold 8.0]

With --structure alone the sequence is the chain's observed residues; with a sequence or FASTA as well, every record
is aligned to the chain (so a construct with tags or missing residues still scores the right pairs). A FASTA file
with several records is processed record by record with a progress bar. The npz layout (record i = 0, 1, ...):

    ids [R] str, sequences [R] str, lengths [R] int, model str, threshold float,
    ranges ["short" "medium" "long"], fractions ["L" "L/2" "L/5"],
    contacts_{i} [L_i L_i] float32,
    true_contacts_{i} [L_i L_i] int8 (1 contact, 0 not, -1 unknown)  -- with a structure,
    precision_{i} [range fraction] float64                            -- with a structure.

The parquet (--heads-out) holds one row per record × layer × head: ``record, id`` and the columns of
:mod:`probe.contacts`' per-head table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from probe import models
from probe.commands.common import add_model_options, output_path, write_atomically
from probe.contacts import FRACTIONS, RANGES, ContactResult, predict_contacts, predict_contacts_windowed
from probe.errors import ProbeError
from probe.structure import CONTACT_THRESHOLD, contact_map, read_structure


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "contacts", help="ESM contact prediction, per-head contact precision against a structure",
        description="Predict residue contacts with an ESM model's own contact head, streamed head by head; with a "
                    "structure, report precision at L, L/2, L/5 by range for the prediction and every head.",
    )
    add_model_options(parser)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--sequence", help="one protein sequence (lowercase accepted)")
    source.add_argument("--fasta", help="FASTA file; several records are processed as a batch")
    parser.add_argument("--structure", help="PDB or mmCIF file: true contacts (and the sequence when none is given)")
    parser.add_argument("--chain", help="chain id in --structure (default: the first protein chain)")
    parser.add_argument("--threshold", type=float, default=CONTACT_THRESHOLD,
                        help="contact distance in Å between Cβ atoms (Cα for glycine); default 8")
    parser.add_argument("--window", type=int, default=None,
                        help="crop-and-average mode for sequences longer than the model takes: windows of N residues, "
                             "N/2 apart, probabilities averaged where windows overlap")
    parser.add_argument("--out", help="output .npz with the contact maps")
    parser.add_argument("--heads-out", help="output .parquet with per-head statistics")
    parser.add_argument("--force", action="store_true",
                        help="recompute every record even if --out already holds some of them")
    return parser


def read_fasta(path: str) -> list[tuple[str, str]]:
    """[(id, sequence)] of a FASTA file; one-line errors for a missing, empty or malformed file."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ProbeError(f"FASTA file {path} does not exist")
    records: list[tuple[str, list[str]]] = []
    for number, line in enumerate(file.read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(";"):
            continue
        if line.startswith(">"):
            records.append((line[1:].split()[0] if line[1:].split() else f"record{len(records) + 1}", []))
        elif not records:
            raise ProbeError(f"{path} line {number}: sequence before the first '>' header; is this a FASTA file?")
        else:
            records[-1][1].append(line)
    if not records:
        raise ProbeError(f"{path} holds no FASTA records")
    result = []
    for name, lines in records:
        if not "".join(lines):
            raise ProbeError(f"{path}: record {name} has an empty sequence")
        result.append((name, "".join(lines)))
    return result


def _records(args: argparse.Namespace) -> list[tuple[str, str]]:
    if args.sequence is not None:
        raw = [("sequence", args.sequence)]
    elif args.fasta is not None:
        raw = read_fasta(args.fasta)
    else:
        return []
    cleaned = []
    for name, sequence in raw:
        try:
            cleaned.append((name, models.clean_protein(sequence)))
        except ProbeError as error:
            raise ProbeError(f"{name}: {error}" if len(raw) > 1 else str(error)) from None
    return cleaned


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    if args.sequence is None and args.fasta is None and args.structure is None:
        raise ProbeError("give the input: --sequence S, --fasta F or --structure X")
    if args.chain is not None and args.structure is None:
        raise ProbeError("--chain selects a chain of --structure; pass --structure too")
    if args.threshold <= 0:
        raise ProbeError(f"--threshold {args.threshold} must be a positive distance in Å")
    out = output_path(args.out, (".npz",)) if args.out else None
    heads_out = output_path(args.heads_out, (".parquet",), "--heads-out") if args.heads_out else None

    records = _records(args)
    structure = read_structure(args.structure, chain=args.chain) if args.structure else None
    if structure is not None and not records:
        records = [(f"{structure.name}_{structure.chain}", structure.sequence)]
    true_maps = [contact_map(structure, args.threshold, sequence) if structure else None for _, sequence in records]

    loaded = models.load(args.model, device=args.device, dtype=args.dtype)
    if loaded.kind != "protein_mlm":
        raise ProbeError(f"{args.model} is a {loaded.kind} model: probe contacts needs an ESM protein model")
    limit = loaded.max_tokens - 2
    too_long = [(name, len(sequence)) for name, sequence in records if len(sequence) > limit]
    if too_long and args.window is None:
        name, length = too_long[0]
        raise ProbeError(f"{name} has {length} residues but {args.model} takes at most {limit}; shorten it or use "
                         f"--window {limit}")
    if too_long and heads_out is not None:
        raise ProbeError("--heads-out needs whole sequences: per-head statistics are not computed in --window mode")

    done = {} if args.force or out is None else _finished_records(out, heads_out, args)
    if done:
        print(f"{len(done)} record(s) already in {out}: skipped (--force recomputes them)", file=sys.stderr)
    results: list = []
    pending = list(zip(records, true_maps, strict=True))
    try:
        for (name, sequence), true_map in tqdm(pending, desc="contacts", unit="seq", file=sys.stderr,
                                               disable=len(records) < 2):
            result = done.get((name, sequence))
            if result is None:
                if len(sequence) > limit:
                    result = predict_contacts_windowed(loaded, sequence, args.window, true_map=true_map)
                else:
                    result = predict_contacts(loaded, sequence, true_map, per_head=heads_out is not None)
            results.append(result)
            _report(name, result)
    finally:  # also on Ctrl-C or a crash: the finished records are written, and a rerun resumes after them
        if results:
            _write_outputs(out, heads_out, records[:len(results)], results, args)
        if len(results) < len(records):
            print(f"stopped after {len(results)} of {len(records)} record(s); rerun the same command to finish",
                  file=sys.stderr)
    if out is None and heads_out is None:
        print("no --out or --heads-out given: nothing was saved", file=sys.stderr)
    return 0


def _write_outputs(out: Path | None, heads_out: Path | None, records, results, args) -> None:
    if out is not None:
        write_atomically(out, lambda tmp: _write_npz(tmp, records, results, args))
        print(f"wrote contacts of {len(results)} sequence(s) to {out}", file=sys.stderr)
    if heads_out is not None:
        write_atomically(heads_out, lambda tmp: _write_heads(tmp, records, results))
        print(f"wrote per-head statistics to {heads_out}", file=sys.stderr)


def _finished_records(out: Path, heads_out: Path | None, args: argparse.Namespace) -> dict:
    """{(id, sequence): ContactResult} of the records an earlier run of the same command wrote to `out` (and to
    `heads_out`, when asked for): a rerun after Ctrl-C or a crash computes only the rest."""
    if not out.exists():
        return {}
    try:
        stored = np.load(out)
        if str(stored["model"]) != args.model or float(stored["threshold"]) != args.threshold:
            return {}
        heads = None
        if heads_out is not None:
            if not heads_out.exists():
                return {}
            import pandas as pd

            heads = pd.read_parquet(heads_out)
        finished = {}
        for index, (name, sequence) in enumerate(zip(stored["ids"].tolist(), stored["sequences"].tolist(),
                                                     strict=True)):
            true_map = stored[f"true_contacts_{index}"] if f"true_contacts_{index}" in stored.files else None
            precision = None
            if f"precision_{index}" in stored.files:
                matrix = stored[f"precision_{index}"]  # [range fraction]
                precision = {f"p_at_{f}_{r}": float(matrix[i, j]) for i, r in enumerate(RANGES)
                             for j, f in enumerate(FRACTIONS)}
            table = None
            if heads is not None:
                table = heads[heads["record"] == index].drop(columns=["record", "id"]).reset_index(drop=True)
                if table.empty:
                    continue
            finished[(name, sequence)] = ContactResult(sequence, stored[f"contacts_{index}"], true_map, precision,
                                                       table)
        return finished
    except (OSError, KeyError, ValueError) as error:
        raise ProbeError(f"{out} exists but is not a probe contacts file ({error}); pass --force to overwrite it, "
                         "or another --out") from None


def _report(name: str, result) -> None:
    """One stdout line per record: P@L, P@L/2, P@L/5 per range with a structure, else the top long-range pairs."""
    length = len(result.sequence)
    if result.precision is not None:
        parts = [f"{r}: " + " ".join(f"P@{'L' if f == 'L' else 'L/' + f[1:]} {result.precision[f'p_at_{f}_{r}']:.3f}"
                                     for f in FRACTIONS) for r in RANGES]
        print(f"{name} ({length} residues)  " + "  |  ".join(parts))
        return
    contacts = np.nan_to_num(np.triu(result.contacts, k=24), nan=0.0)
    top = np.dstack(np.unravel_index(np.argsort(-contacts, axis=None)[:5], contacts.shape))[0]
    pairs = ", ".join(f"{i + 1}-{j + 1} ({result.contacts[i, j]:.2f})" for i, j in top if j - i >= 24)
    print(f"{name} ({length} residues)  top long-range pairs: {pairs or 'none (shorter than 25 residues)'}")


def _write_npz(tmp: Path, records, results, args) -> None:
    arrays = {
        "ids": np.array([name for name, _ in records]),
        "sequences": np.array([sequence for _, sequence in records]),
        "lengths": np.array([len(sequence) for _, sequence in records]),
        "model": np.array(args.model),
        "threshold": np.array(args.threshold),
        "ranges": np.array(list(RANGES)),
        "fractions": np.array(["L", "L/2", "L/5"]),
    }
    for index, result in enumerate(results):
        arrays[f"contacts_{index}"] = result.contacts.astype(np.float32)
        if result.true_contacts is not None:
            arrays[f"true_contacts_{index}"] = result.true_contacts
            arrays[f"precision_{index}"] = np.array(
                [[result.precision[f"p_at_{f}_{r}"] for f in FRACTIONS] for r in RANGES])
    with open(tmp, "wb") as handle:
        np.savez_compressed(handle, **arrays)


def _write_heads(tmp: Path, records, results) -> None:
    import pandas as pd

    tables = []
    for index, ((name, _), result) in enumerate(zip(records, results, strict=True)):
        table = result.heads.copy()
        table.insert(0, "id", name)
        table.insert(0, "record", index)
        tables.append(table)
    pd.concat(tables, ignore_index=True).to_parquet(tmp, index=False)
