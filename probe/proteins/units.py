"""The units of a contacts run: one FASTA record (optionally aligned to a structure chain) or one structure
chain.

:class:`UnitSpec` names a unit and what it reads; :func:`structure_files` lists a folder or a list file of
structures, :func:`structure_units` makes one unit per protein chain of them (skipping unreadable files with a
reason), :func:`record_units` one per sequence record. :mod:`probe.proteins.sets` analyses the units.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from probe.errors import ProbeError
from probe.hashing import file_hash
from probe.proteins.structure import read_structure

STRUCTURE_SUFFIXES = (".pdb", ".ent", ".cif", ".mmcif")


@dataclass(frozen=True)
class UnitSpec:
    """One unit: a record (id + sequence, optionally aligned to a structure chain) or a structure chain."""

    key: str  # unique name in the journal ("0:seqid", "path/1aki.pdb:A")
    id: str  # what the tables call it ("seqid", "1aki_A")
    record: int  # position in the run
    sequence: str | None = None  # None: the chain's own residues
    structure: str | None = None  # path of a PDB / mmCIF file
    chain: str | None = None
    structure_hash: str | None = None  # probe.hashing.file_hash of the structure file


def structure_files(source: str | Path, flag: str = "--structures") -> list[Path]:
    """The structure files of `source`: a directory (its *.pdb, *.ent, *.cif, *.mmcif files, sorted by name)
    or a text file listing one path per line (relative to the list's folder; blank lines and '#' comments
    skipped); errors name `flag`."""
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in STRUCTURE_SUFFIXES)
        if not files:
            raise ProbeError(f"{flag} {source} holds no structure files ({', '.join(STRUCTURE_SUFFIXES)})")
        return files
    if not path.is_file():
        raise ProbeError(f"{flag} {source} does not exist: pass a folder of structures or a list file")
    if path.suffix.lower() in STRUCTURE_SUFFIXES:
        return [path]
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ProbeError(f"{flag} {source} is not a UTF-8 list of structure paths") from None
    files = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        entry = Path(line).expanduser()
        entry = entry if entry.is_absolute() else path.parent / entry
        if not entry.is_file():
            raise ProbeError(f"{source} line {number}: {line} is not a file")
        files.append(entry)
    if not files:
        raise ProbeError(f"{source} lists no structure files")
    return files


def structure_units(files: Sequence[Path], chains: Sequence[str] | None = None,
                    ) -> tuple[list[UnitSpec], list[tuple[str, str]]]:
    """(units, skipped): one unit per protein chain of every file (only `chains` where given); files that
    cannot be read, or hold none of the chains, are skipped as (file, reason)."""
    units, skipped = [], []
    wanted = set(chains) if chains else None
    for path in files:
        try:
            found = read_structure(path).chains
        except ProbeError as error:
            skipped.append((str(path), str(error)))
            continue
        chosen = [chain for chain in found if wanted is None or chain in wanted]
        if not chosen:
            skipped.append((str(path), f"none of the chains {', '.join(sorted(wanted))} (it has "
                                       f"{', '.join(found)})"))
            continue
        digest = file_hash(path)
        for chain in chosen:
            units.append(UnitSpec(key=f"{path}:{chain}", id=f"{path.stem}_{chain}", record=len(units),
                                  structure=str(path), chain=chain, structure_hash=digest))
    return units, skipped


def record_units(records: Sequence[tuple[str, str]], structure: str | None = None,
                 chain: str | None = None) -> list[UnitSpec]:
    """One unit per (id, sequence) record, keyed "index:id" (ids may repeat); each aligned to `structure` if
    given."""
    digest = file_hash(structure) if structure else None
    return [UnitSpec(key=f"{index}:{name}", id=name, record=index, sequence=sequence, structure=structure,
                     chain=chain, structure_hash=digest) for index, (name, sequence) in enumerate(records)]


__all__ = ["STRUCTURE_SUFFIXES", "UnitSpec", "record_units", "structure_files", "structure_units"]
