"""True residue contacts, binding sites and secondary structure from a PDB or mmCIF file, read with biotite.

    structure = read_structure("1ubi.pdb", chain="A")     # or bytes, fmt="pdb" | "cif"
    true_map = contact_map(structure, threshold=8.0, sequence="MQIFVK...", cb="virtual")
                                                          # [L L] int8: 1, 0, -1
    sites = binding_sites(structure, distance=4.0)        # [residue] bool: a heavy atom within 4 Å of a
                                                          # ligand
    structure.secondary                                   # [residue] "a" helix, "b" strand, "t" turn/bend,
                                                          # "n" blank (DSSP's 4 classes as provis), "" unknown

Reading rules:

* the first model of a multi-model (NMR) file;
* alternate locations: per residue, the altloc whose atoms have the highest mean occupancy (ties: the first in
  the file); atoms without an altloc are always kept. For 1EJG's Pro22/Ser22 micro-heterogeneity (Pro
  0.33–0.57 against Ser 0.21–0.33) that is Pro22, altloc A, and the residue takes that altloc's name;
* amino-acid residues only (biotite's ``filter_amino_acids``), hydrogens and deuteriums removed;
* ``chain=None`` takes the first chain that holds amino-acid residues; an unknown chain id or a file without a
  protein chain is a one-line :class:`~probe.errors.ProbeError`;
* modified residues get their parent's one-letter code (MSE → M, from biotite's chemical component
  dictionary), anything else unknown becomes X.

Contacts: a pair is in contact when the distance between the residues' Cβ is strictly below ``threshold`` (8
Å). Two Cβ conventions (``cb``):

* ``"virtual"`` (the default): Cβ built from the backbone of every residue, glycine included, at bond length
  1.522 Å, angle N–Cα–Cβ 1.927 rad and dihedral C–N–Cα–Cβ −2.143 rad (ESM's own evaluation,
  ``contacts_from_pdb`` in its contact-prediction example; trRosetta's closed form −0.58273431·a +
  0.56802827·b − 0.54067466·c + Cα is close to it but not equal: for 1AKI's long-range contacts it gives 132
  where ESM's construction gives 134 and the real Cβ 128). The default because it is the convention of the
  published ESM precision figures users compare against, and it is defined the same way for every residue (no
  glycine or truncated-side-chain special case). A residue missing N, Cα or C gets unknown (-1) contacts.
* ``"real"``: the deposited Cβ atom, Cα for glycine and for residues whose Cβ is missing (CASP's definition).

With ``sequence=...`` the structure's residues are aligned to that sequence (Needleman–Wunsch, BLOSUM62, gap
open −10 / extend −1, free end gaps), so residues missing from the model, expression tags or a numbering that
starts at 5 do not shift the map: sequence positions without an aligned structure residue are -1 (unknown).
Residue numbers in the file are never used for placement.

Binding sites: residues with a heavy atom within ``distance`` (4 Å) of a heavy atom of a ligand — any HETATM
group of the first model that is neither water nor an amino acid (ions included), in any chain. A file without
any ligand has no binding-site annotation (``Structure.ligands`` is empty): the analysis reports binding as
unknown (NaN), never as "no site".

Secondary structure: DSSP (Kabsch & Sander 1983) as implemented by mdtraj (``mdtraj.compute_dssp``), run on
the chain's residues exactly as read here (altloc, first model, hydrogens removed), its 8 states reduced to
provis' 4 classes the way provis reduces TAPE's NetSurfP labels (``compute_edge_features.convert_item``,
feature ``ss4``: the 3-class label, except that DSSP's blank becomes a class of its own): H, G, I → helix
("a"); E, B → strand ("b"); T, S → turn/bend ("t"); blank (no DSSP assignment; also DSSP 4's P, which TAPE's 8
states do not have) → blank ("n"); residues DSSP cannot assign (missing backbone atoms) are unknown (""). Why
mdtraj and not ``pydssp``: against the HELIX/SHEET records of the three shipped structures both agree about
equally (helix recall 0.91 vs 0.94, strand recall 0.79 vs 0.77, pooled over the chains), but mdtraj computes
DSSP's 8 states, so the 4-class reduction is provis', while pydssp's simplified two-state assignment calls 55
residues of 1AKI helix where DSSP has 35 α + 14 3₁₀ + 5 π. Where mdtraj is not installed or fails on a chain,
biotite's ``annotate_sse`` (P-SEA, from Cα geometry only; it finds no strand in 1EJG and 26 of 33 SHEET
residues in 1UBI) is the fallback: it has 3 classes, helix, strand and coil ("c", turn/bend and blank
together), so such a chain has no turn/bend and no blank annotation (NaN, unknown).
``Structure.secondary_method`` says which one ran ("dssp", "p-sea", or "" when neither could).
"""

from __future__ import annotations

import io
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import biotite.structure as struc
import numpy as np
from biotite.sequence import ProteinSequence
from biotite.sequence.align import SubstitutionMatrix, align_optimal
from biotite.structure.info import one_letter_code
from biotite.structure.io import pdb, pdbx

from probe.errors import ProbeError, first_line
from probe.proteins.defaults import BINDING_DISTANCE, CB_MODES, CONTACT_THRESHOLD, DEFAULT_CB

# least share of identical aligned residues (of the shorter sequence) before we call it a mismatch
MIN_IDENTITY = 0.5
CbMode = Literal["virtual", "real"]
WATER_NAMES = ("HOH", "WAT", "DOD", "H2O", "D2O")
# codes -> classes: provis' 4 (DSSP) and P-SEA's coil, which merges the last two
SECONDARY_CLASSES = {"a": "helix", "b": "strand", "t": "turn_bend", "n": "blank", "c": "coil"}
DSSP_TO_CLASS = {"H": "a", "G": "a", "I": "a", "E": "b", "B": "b", "T": "t", "S": "t", " ": "n", "C": "n",
                 "P": "n"}  # DSSP's 8 states (+ C for blank, and DSSP 4's P) -> provis' 4 classes

_PDB_SUFFIXES = (".pdb", ".ent")
_CIF_SUFFIXES = (".cif", ".mmcif")


@dataclass(frozen=True, eq=False)
class Structure:
    """One protein chain of a structure file: its observed residues, their atoms of interest and
    annotations."""

    name: str  # file stem, or "structure" for bytes
    chain: str  # chain id used
    chains: tuple[str, ...]  # protein chains in the file, in file order
    sequence: str  # one letter per observed residue
    residue_ids: np.ndarray  # [residue] int: author residue numbers (for display only)
    # [residue 3] float: real Cβ (Cα for Gly or missing Cβ); NaN when neither atom is present
    coords: np.ndarray
    backbone: np.ndarray | None = None  # [residue 3 3] float: N, Cα, C (NaN where an atom is missing)
    # [residue] float: closest ligand heavy atom, Å (inf: no ligand)
    ligand_distance: np.ndarray | None = None
    secondary: np.ndarray | None = None  # [residue] str: "a", "b", "t", "n" (DSSP) or "c" (P-SEA); "" unknown
    ligands: tuple[str, ...] = ()  # residue names of the ligand groups in the model (water excluded)
    secondary_method: str = ""  # "dssp" (mdtraj), "p-sea" (biotite fallback) or "" (no assignment)
    insertion_codes: np.ndarray | None = None  # [residue] str: the file's insertion codes ("" none)
    atoms: object | None = None  # biotite AtomArray of the chain as read (one altloc, no H): what 3D draws

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
    """biotite AtomArray of the first model with every alternate location and the occupancies."""
    try:
        if fmt == "pdb":
            handle = pdb.PDBFile.read(io.StringIO(text))
            return handle.get_structure(model=1, altloc="all", extra_fields=["occupancy"])
        handle = pdbx.CIFFile.read(io.StringIO(text))
        with warnings.catch_warnings():  # a file without occupancies: biotite assumes 1.0 and says so
            warnings.simplefilter("ignore", UserWarning)
            return pdbx.get_structure(handle, model=1, altloc="all", extra_fields=["occupancy"])
    except Exception as error:  # biotite raises many types on malformed input
        raise ProbeError(f"cannot read {name} as {fmt.upper()}: {first_line(error)}") from None


def highest_occupancy_altloc(chain_id, res_id, ins_code, altloc_id, occupancy) -> np.ndarray:
    """[atom] bool: atoms without an altloc, and per residue (chain, number, insertion code) the atoms of the
    altloc with the highest mean occupancy (ties: the altloc met first in the file)."""
    altloc_id = np.asarray(altloc_id).astype(str)
    keep = np.isin(altloc_id, [" ", "", ".", "?"])
    groups: dict[tuple, dict[str, list[int]]] = {}
    for index in np.flatnonzero(~keep):
        key = (str(chain_id[index]), int(res_id[index]), str(ins_code[index]))
        groups.setdefault(key, {}).setdefault(altloc_id[index], []).append(index)
    for by_altloc in groups.values():
        best = max(by_altloc, key=lambda letter: (float(np.mean(np.asarray(occupancy)[by_altloc[letter]])),
                                                   -list(by_altloc).index(letter)))
        keep[by_altloc[best]] = True
    return keep


def _one_letter(residue_name: str) -> str:
    try:
        code = one_letter_code(residue_name)
    except Exception:  # not in the chemical component dictionary
        code = None
    return code if code and len(code) == 1 and code.isalpha() else "X"


def _atom(residue, name: str) -> np.ndarray:
    names = residue.atom_name.tolist()
    return residue.coord[names.index(name)].astype(np.float64) if name in names else np.full(3, np.nan)


def read_structure(source: str | Path | bytes, chain: str | None = None, fmt: str | None = None) -> Structure:
    """Read one protein chain (default: the first) of a PDB or mmCIF file, path or bytes."""
    if isinstance(source, bytes):
        name, text = "structure", source.decode("latin-1")
    else:
        path = Path(source).expanduser()
        if path.is_dir():
            raise ProbeError(f"structure {source} is a folder: give a PDB or mmCIF file inside it")
        if not path.is_file():
            raise ProbeError(f"structure file {source} does not exist")
        name, text = path.stem, path.read_text(encoding="latin-1")
    atoms = _read_atoms(text, _format_of(source, fmt), name)
    if atoms.array_length() == 0:
        raise ProbeError(f"{name} holds no atoms")
    atoms = atoms[highest_occupancy_altloc(atoms.chain_id, atoms.res_id, atoms.ins_code, atoms.altloc_id,
                                           atoms.occupancy)]
    atoms = atoms[~np.isin(atoms.element, ["H", "D"])]
    amino = struc.filter_amino_acids(atoms)
    ligand_atoms = atoms[~amino & atoms.hetero & ~np.isin(atoms.res_name, WATER_NAMES)]
    protein = atoms[amino]
    chains = tuple(dict.fromkeys(protein.chain_id.tolist()))
    if not chains:
        raise ProbeError(f"{name} has no protein chain (no amino-acid residues); pass a protein structure")
    if chain is None:
        chain = chains[0]
    elif chain not in chains:
        raise ProbeError(f"{name} has no protein chain {chain!r}; its protein chains are {', '.join(chains)}")
    protein = protein[protein.chain_id == chain]

    letters, numbers, codes, coords, backbone, ligand_distance = [], [], [], [], [], []
    for residue in _residues(protein):
        residue_name = _residue_name(residue)
        letters.append(_one_letter(residue_name))
        numbers.append(int(residue.res_id[0]))
        codes.append(str(residue.ins_code[0]).strip())
        wanted = ["CA"] if residue_name == "GLY" else ["CB", "CA"]
        found = next((atom for atom in wanted if atom in residue.atom_name.tolist()), None)
        coords.append(_atom(residue, found) if found else np.full(3, np.nan))
        backbone.append([_atom(residue, "N"), _atom(residue, "CA"), _atom(residue, "C")])
        if ligand_atoms.array_length():
            delta = residue.coord[:, None, :] - ligand_atoms.coord[None, :, :]  # [atom ligand_atom 3]
            ligand_distance.append(float(np.sqrt((delta**2).sum(-1)).min()))
        else:
            ligand_distance.append(np.inf)
    secondary, method = assign_secondary(protein, len(letters))
    ligands = tuple(dict.fromkeys(ligand_atoms.res_name.tolist()))
    return Structure(name=name, chain=chain, chains=chains, sequence="".join(letters),
                     residue_ids=np.array(numbers, dtype=np.int64),
                     coords=np.array(coords, dtype=np.float64).reshape(-1, 3),
                     backbone=np.array(backbone, dtype=np.float64).reshape(-1, 3, 3),
                     ligand_distance=np.array(ligand_distance, dtype=np.float64),
                     secondary=secondary, ligands=ligands, secondary_method=method,
                     insertion_codes=np.array(codes, dtype=str), atoms=protein)


def _residue_name(residue) -> str:
    """The residue's name: that of its altloc atoms where it has some (micro-heterogeneity), else the first
    atom's."""
    alternate = ~np.isin(residue.altloc_id.astype(str), [" ", "", ".", "?"])
    return str(residue.res_name[np.flatnonzero(alternate)[0] if alternate.any() else 0])


def dssp_classes(protein) -> np.ndarray:
    """[residue] provis' 4-class codes ("a", "b", "t", "n"; "" unassigned) of one chain's atoms (biotite
    AtomArray, one altloc, no hydrogens): :func:`dssp_states` reduced by :data:`DSSP_TO_CLASS`."""
    return np.array([DSSP_TO_CLASS.get(str(state), "") for state in dssp_states(protein)], dtype="<U1")


def dssp_states(protein) -> np.ndarray:
    """[residue] DSSP's 8-state letters (" " blank, "NA" unassigned) of one chain's atoms from mdtraj. Raises
    ImportError without mdtraj, and ValueError when the residues do not map."""
    import mdtraj  # optional at run time: without it the caller falls back to P-SEA (ImportError above)

    atoms = renumbered(protein)
    n_residues = int(atoms.res_id[-1]) if atoms.array_length() else 0
    handle = pdb.PDBFile()
    handle.set_structure(atoms)
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = f"{folder}/chain.pdb"
        handle.write(path)
        trajectory = mdtraj.load_pdb(path, standard_names=False)
        states = mdtraj.compute_dssp(trajectory, simplified=False)[0]  # [residue] DSSP 8-state letters, "NA"
    numbers = [residue.resSeq for residue in trajectory.topology.residues]
    if numbers != list(range(1, n_residues + 1)):
        raise ValueError(f"mdtraj read {len(numbers)} residues where the chain has {n_residues}")
    return np.asarray(states).astype(str)


def renumbered(protein):
    """A copy of one chain's atoms with residue i (0-based, as :func:`read_structure` counts them) numbered
    i + 1, no insertion code, one residue name per residue (micro-heterogeneity) and chain "A": what mdtraj's
    DSSP and the 3D view (:mod:`probe.views.structure3d`) read."""
    atoms = protein.copy()
    start = 0
    for index, residue in enumerate(_residues(protein)):
        stop = start + residue.array_length()
        atoms.res_id[start:stop] = index + 1
        atoms.ins_code[start:stop] = ""
        atoms.res_name[start:stop] = _residue_name(residue)
        start = stop
    atoms.chain_id[:] = "A"
    return atoms


def assign_secondary(protein, n_residues: int) -> tuple[np.ndarray, str]:
    """([residue] class codes, method): provis' 4 classes from DSSP via mdtraj, else biotite's P-SEA, else all
    unknown (see the module docstring)."""
    try:
        classes = dssp_classes(protein)
        if len(classes) == n_residues and (classes != "").any():  # nothing assigned (no O atoms): try P-SEA
            return classes, "dssp"
    except Exception:  # mdtraj missing, or it cannot read / assign this chain: fall back to P-SEA
        pass
    try:
        # [residue] P-SEA "a" / "b" / "c" / ""
        classes = np.asarray(struc.annotate_sse(protein)).astype("<U1")
        if len(classes) == n_residues:
            return classes, "p-sea"
    except Exception:  # P-SEA needs Cα atoms
        pass
    return np.full(n_residues, "", dtype="<U1"), ""


def _residues(atoms):
    """The residues of one chain, split by (number, insertion code) only: a micro-heterogeneous position whose
    altloc atoms carry another residue name than its shared atoms stays one residue."""
    key = np.array([f"{number}|{code}" for number, code in zip(atoms.res_id, atoms.ins_code, strict=True)])
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    stops = np.r_[starts[1:], len(key)]
    return [atoms[start:stop] for start, stop in zip(starts, stops, strict=True)]


def list_chains(source: str | Path | bytes, fmt: str | None = None) -> tuple[str, ...]:
    """The protein chains of a structure file, in file order."""
    return read_structure(source, fmt=fmt).chains


def align_to_sequence(structure: Structure, sequence: str) -> np.ndarray:
    """[L] int: for each position of `sequence`, the index of the aligned structure residue, or -1 (a gap).

    Raises ProbeError when fewer than MIN_IDENTITY of the shorter sequence's residues align to identical
    letters (the wrong chain or the wrong protein).
    """
    if sequence == structure.sequence:
        return np.arange(len(sequence))

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
        raise ProbeError(f"chain {structure.chain} of {structure.name} matches only {identical} of {shorter} "
                         "residues of the sequence; pick the right chain with --chain or the right structure")
    return mapping


# ESM's virtual Cβ (its contact-prediction example's `contacts_from_pdb`, after trRosetta), internal
# coordinates:
VIRTUAL_CB_BOND = 1.522  # Å, Cα–Cβ
VIRTUAL_CB_ANGLE = 1.927  # rad, N–Cα–Cβ
VIRTUAL_CB_DIHEDRAL = -2.143  # rad, C–N–Cα–Cβ


def virtual_cb(backbone: np.ndarray) -> np.ndarray:
    """[residue 3] virtual Cβ from [residue 3 3] N, Cα, C; NaN where an atom is missing.

    Cβ is placed from Cα at bond length 1.522 Å, bond angle N–Cα–Cβ 1.927 rad and dihedral C–N–Cα–Cβ −2.143
    rad (ESM's evaluation, trRosetta's convention): in the frame u = unit(N − Cα), w = unit((N − C) × u), v =
    w × u, Cβ = Cα + r·(cos θ·u + sin θ·cos φ·v − sin θ·sin φ·w).
    """
    n, ca, c = backbone[:, 0], backbone[:, 1], backbone[:, 2]  # [residue 3] each
    with np.errstate(invalid="ignore", divide="ignore"):
        u = (n - ca) / np.linalg.norm(n - ca, axis=-1, keepdims=True)
        w = np.cross(n - c, u)
        w = w / np.linalg.norm(w, axis=-1, keepdims=True)
    v = np.cross(w, u)
    r, theta, phi = VIRTUAL_CB_BOND, VIRTUAL_CB_ANGLE, VIRTUAL_CB_DIHEDRAL
    return ca + r * (np.cos(theta) * u + np.sin(theta) * np.cos(phi) * v - np.sin(theta) * np.sin(phi) * w)


def cb_coordinates(structure: Structure, cb: CbMode = DEFAULT_CB) -> np.ndarray:
    """[residue 3] the Cβ used for contacts under convention `cb` ("virtual" or "real")."""
    if cb == "real":
        return structure.coords
    if cb == "virtual":
        if structure.backbone is None:
            raise ProbeError("this structure was built without backbone atoms: use cb='real'")
        return virtual_cb(structure.backbone)
    raise ProbeError(f"unknown Cβ convention {cb!r}: use one of {', '.join(CB_MODES)}")


def distance_map(structure: Structure, cb: CbMode = DEFAULT_CB) -> np.ndarray:
    """[residue residue] float64 Cβ–Cβ distances in Å (NaN where a residue has no coordinates)."""
    coords = cb_coordinates(structure, cb)
    delta = coords[:, None, :] - coords[None, :, :]  # [residue residue 3]
    return np.sqrt((delta**2).sum(-1))  # [residue residue]


def check_threshold(threshold: float, what: str = "--threshold") -> float:
    """A finite, positive distance in Å below 100 (one-line error otherwise: nan, inf, 0, negative)."""
    try:
        value = float(threshold)
    except (TypeError, ValueError):
        raise ProbeError(f"{what} {threshold!r} must be a number of Å") from None
    if not np.isfinite(value) or not 0 < value <= 100:
        raise ProbeError(f"{what} {threshold} must be a finite distance in Å above 0 and at most 100")
    return value


def _aligned(values: np.ndarray, mapping: np.ndarray, fill) -> np.ndarray:
    """Per-residue values placed on the sequence positions of `mapping` ([L] structure index or -1)."""
    result = np.full(len(mapping), fill, dtype=values.dtype)
    result[mapping >= 0] = values[mapping[mapping >= 0]]
    return result


def contact_map(structure: Structure, threshold: float = CONTACT_THRESHOLD, sequence: str | None = None,
                cb: CbMode = DEFAULT_CB) -> np.ndarray:
    """[L L] int8 true contacts: 1 (distance < threshold), 0, or -1 (unknown: no coordinates / not in the
    structure).

    L is the structure's residue count, or len(sequence) when a sequence is given (residues aligned to it).
    """
    threshold = check_threshold(threshold, "threshold")
    distances = distance_map(structure, cb)  # [residue residue]
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


def binding_sites(structure: Structure, distance: float = BINDING_DISTANCE,
                  sequence: str | None = None) -> np.ndarray:
    """[L] int8: 1 where a residue has a heavy atom within `distance` Å of a ligand heavy atom, 0 where not,
    -1 where the sequence position has no structure residue (with `sequence`)."""
    distance = check_threshold(distance, "binding distance")
    if structure.ligand_distance is None:
        raise ProbeError("this structure was built without ligand distances; read it with read_structure")
    own = (structure.ligand_distance <= distance).astype(np.int8)
    if sequence is None:
        return own
    return _aligned(own, align_to_sequence(structure, sequence), np.int8(-1))


def secondary_structure(structure: Structure, sequence: str | None = None) -> np.ndarray:
    """[L] str: "a" helix, "b" strand, "t" turn/bend, "n" blank (DSSP; "c" coil where P-SEA ran), ""
    unknown."""
    own = structure.secondary if structure.secondary is not None else np.full(len(structure), "", dtype=str)
    own = np.asarray(own).astype("<U1")
    if sequence is None:
        return own
    return _aligned(own, align_to_sequence(structure, sequence), "")
