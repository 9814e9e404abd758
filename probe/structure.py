"""True residue contacts from a PDB or mmCIF file, read with biotite (no hand-written parser).

    structure = read_structure("1ubi.pdb", chain="A")     # or bytes, fmt="pdb" | "cif"
    true_map = contact_map(structure, threshold=8.0, sequence="MQIFVK...")   # [L L] int8: 1, 0, -1 unknown

Reading rules:

* the first model of a multi-model (NMR) file, and the first alternate location of every atom (biotite's
  ``altloc="first"``: for 1EJG's Pro22/Ser22 micro-heterogeneity that is Pro22, altloc A);
* amino-acid residues only (biotite's ``filter_amino_acids``, so waters and ligands drop out), hydrogens and
  deuteriums removed;
* ``chain=None`` takes the first chain that holds amino-acid residues; an unknown chain id or a file without a
  protein chain is a one-line :class:`~probe.errors.ProbeError`;
* each residue is represented by its Cβ atom, Cα for glycine and for residues whose Cβ is missing (truncated side
  chains); a residue with neither atom gets NaN coordinates and unknown (-1) contacts;
* modified residues get their parent's one-letter code (MSE → M, from biotite's chemical component dictionary),
  anything else unknown becomes X.

A contact is a Cβ–Cβ distance strictly below ``threshold`` (8 Å). With ``sequence=...`` the structure's residues are
aligned to that sequence (Needleman–Wunsch, BLOSUM62, gap open −10 / extend −1, free end gaps), so residues missing
from the model, extra expression tags or a residue numbering that starts at 5 do not shift the map: sequence
positions without an aligned structure residue are -1 (unknown) in the map. Residue numbers in the file are never
used for placement.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from probe.errors import ProbeError

CONTACT_THRESHOLD = 8.0  # Å, Cβ–Cβ (Cα for glycine)
MIN_IDENTITY = 0.5  # least share of identical aligned residues (of the shorter sequence) before we call it a mismatch

_PDB_SUFFIXES = (".pdb", ".ent")
_CIF_SUFFIXES = (".cif", ".mmcif")


@dataclass(frozen=True, eq=False)
class Structure:
    """One protein chain of a structure file: its observed residues and one representative atom each."""

    name: str  # file stem, or "structure" for bytes
    chain: str  # chain id used
    chains: tuple[str, ...]  # protein chains in the file, in file order
    sequence: str  # one letter per observed residue
    residue_ids: np.ndarray  # [residue] int: author residue numbers (for display only)
    coords: np.ndarray  # [residue 3] float: Cβ (Cα for Gly or missing Cβ); NaN when neither atom is present

    def __len__(self) -> int:
        return len(self.sequence)


def _format_of(source: str | Path | bytes, fmt: str | None) -> str:
    if fmt is not None:
        fmt = fmt.lower().lstrip(".")
        if fmt in ("pdb", "ent"):
            return "pdb"
        if fmt in ("cif", "mmcif"):
            return "cif"
        raise ProbeError(f"unknown structure format {fmt!r}: use pdb or cif")
    if isinstance(source, bytes):
        head = source.lstrip()[:200].decode("latin-1")
        return "cif" if head.startswith("data_") or "\n_" in head or head.startswith("#") else "pdb"
    suffix = Path(source).suffix.lower()
    if suffix in _PDB_SUFFIXES:
        return "pdb"
    if suffix in _CIF_SUFFIXES:
        return "cif"
    raise ProbeError(f"cannot tell the format of {source}: name it .pdb or .cif (or pass fmt)")


def _read_atoms(text: str, fmt: str, name: str):
    """biotite AtomArray of the first model, first alternate location of every atom."""
    try:
        if fmt == "pdb":
            from biotite.structure.io import pdb

            handle = pdb.PDBFile.read(io.StringIO(text))
            return handle.get_structure(model=1, altloc="first")
        from biotite.structure.io import pdbx

        handle = pdbx.CIFFile.read(io.StringIO(text))
        return pdbx.get_structure(handle, model=1, altloc="first")
    except Exception as error:  # biotite raises many types on malformed input
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ProbeError(f"cannot read {name} as {fmt.upper()}: {message}") from None


def _one_letter(residue_name: str) -> str:
    from biotite.structure.info import one_letter_code

    try:
        code = one_letter_code(residue_name)
    except Exception:  # not in the chemical component dictionary
        code = None
    return code if code and len(code) == 1 and code.isalpha() else "X"


def read_structure(source: str | Path | bytes, chain: str | None = None, fmt: str | None = None) -> Structure:
    """Read one protein chain (default: the first) of a PDB or mmCIF file, path or bytes."""
    import biotite.structure as struc

    if isinstance(source, bytes):
        name, text = "structure", source.decode("latin-1")
    else:
        path = Path(source).expanduser()
        if not path.is_file():
            raise ProbeError(f"structure file {source} does not exist")
        name, text = path.stem, path.read_text(encoding="latin-1")
    atoms = _read_atoms(text, _format_of(source, fmt), name)
    if atoms.array_length() == 0:
        raise ProbeError(f"{name} holds no atoms")
    atoms = atoms[struc.filter_amino_acids(atoms) & ~np.isin(atoms.element, ["H", "D"])]
    chains = tuple(dict.fromkeys(atoms.chain_id.tolist()))
    if not chains:
        raise ProbeError(f"{name} has no protein chain (no amino-acid residues); pass a protein structure")
    if chain is None:
        chain = chains[0]
    elif chain not in chains:
        raise ProbeError(f"{name} has no protein chain {chain!r}; its protein chains are {', '.join(chains)}")
    atoms = atoms[atoms.chain_id == chain]

    starts = struc.get_residue_starts(atoms, add_exclusive_stop=True)
    letters, numbers, coords = [], [], []
    for start, stop in zip(starts[:-1], starts[1:], strict=True):
        residue = atoms[start:stop]
        residue_name = str(residue.res_name[0])
        letters.append(_one_letter(residue_name))
        numbers.append(int(residue.res_id[0]))
        atom_names = residue.atom_name.tolist()
        wanted = ["CA"] if residue_name == "GLY" else ["CB", "CA"]
        found = next((atom for atom in wanted if atom in atom_names), None)
        coords.append(residue.coord[atom_names.index(found)] if found else np.full(3, np.nan))
    return Structure(name=name, chain=chain, chains=chains, sequence="".join(letters),
                     residue_ids=np.array(numbers, dtype=np.int64),
                     coords=np.array(coords, dtype=np.float64).reshape(-1, 3))


def align_to_sequence(structure: Structure, sequence: str) -> np.ndarray:
    """[L] int: for each position of `sequence`, the index of the aligned structure residue, or -1 (a gap).

    Raises ProbeError when fewer than MIN_IDENTITY of the shorter sequence's residues align to identical letters
    (the wrong chain or the wrong protein).
    """
    if sequence == structure.sequence:
        return np.arange(len(sequence))
    from biotite.sequence import ProteinSequence
    from biotite.sequence.align import SubstitutionMatrix, align_optimal

    def protein(letters: str) -> ProteinSequence:
        allowed = set(ProteinSequence.alphabet.get_symbols())
        return ProteinSequence("".join(letter if letter in allowed else "X" for letter in letters))

    matrix = SubstitutionMatrix.std_protein_matrix()
    alignment = align_optimal(protein(sequence), protein(structure.sequence), matrix, gap_penalty=(-10, -1),
                              terminal_penalty=False, max_number=1)[0]
    mapping = np.full(len(sequence), -1, dtype=np.int64)
    identical = 0
    for seq_index, struct_index in alignment.trace:
        if seq_index >= 0 and struct_index >= 0:
            mapping[seq_index] = struct_index
            identical += sequence[seq_index] == structure.sequence[struct_index]
    shorter = max(1, min(len(sequence), len(structure)))
    if identical / shorter < MIN_IDENTITY:
        raise ProbeError(f"chain {structure.chain} of {structure.name} matches only {identical} of {shorter} residues "
                         "of the sequence; pick the right chain with --chain or the right structure")
    return mapping


def distance_map(structure: Structure) -> np.ndarray:
    """[residue residue] float64 Cβ–Cβ distances in Å (NaN where a residue has no coordinates)."""
    delta = structure.coords[:, None, :] - structure.coords[None, :, :]  # [residue residue 3]
    return np.sqrt((delta**2).sum(-1))  # [residue residue]


def contact_map(structure: Structure, threshold: float = CONTACT_THRESHOLD, sequence: str | None = None) -> np.ndarray:
    """[L L] int8 true contacts: 1 (distance < threshold), 0, or -1 (unknown: no coordinates / not in the structure).

    L is the structure's residue count, or len(sequence) when a sequence is given (residues aligned to it).
    """
    distances = distance_map(structure)  # [residue residue]
    known = np.isfinite(distances)
    own = np.where(known, distances < threshold, False).astype(np.int8)
    own[~known] = -1
    if sequence is None:
        return own
    mapping = align_to_sequence(structure, sequence)  # [L]
    aligned = mapping >= 0
    result = np.full((len(sequence), len(sequence)), -1, dtype=np.int8)  # [L L]
    index = mapping[aligned]
    result[np.ix_(aligned, aligned)] = own[np.ix_(index, index)]
    return result
