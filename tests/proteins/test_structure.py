"""True contact maps from structures: synthetic coordinates with exact distances, and the real files where
present."""

from __future__ import annotations

import os

import numpy as np
import pytest

from probe.errors import ProbeError
from probe.proteins.structure import align_to_sequence, contact_map, read_structure

THREE = {"A": "ALA", "G": "GLY", "K": "LYS", "L": "LEU", "M": "MET", "P": "PRO", "S": "SER", "V": "VAL",
         "E": "GLU", "Q": "GLN", "I": "ILE", "F": "PHE", "T": "THR", "D": "ASP", "N": "ASN", "R": "ARG",
         "Y": "TYR", "W": "TRP", "C": "CYS", "H": "HIS"}


def atom_line(serial, name, res_name, chain, res_id, xyz, element, altloc=" ", record="ATOM  ",
              occupancy=1.0):
    """One fixed-column PDB ATOM/HETATM record (test data writer, not a parser)."""
    padded = f" {name:<3}" if len(name) < 4 else name
    x, y, z = xyz
    return (f"{record}{serial:5d} {padded}{altloc}{res_name:>3} {chain}{res_id:4d}    "
            f"{x:8.3f}{y:8.3f}{z:8.3f}{occupancy:6.2f}{10.0:6.2f}          {element:>2}")


def line_chain(sequence: str, chain: str = "A", first_id: int = 1, spacing: float = 4.0, skip=(),
               shift=(0, 0, 0)):
    """Residues along x: representative atom (CB, or CA for Gly) of residue i at x = spacing·i; the CA sits
    1.5 Å off the axis in y (so Cα distances differ from Cβ ones); hydrogens on every residue. `skip`: indices
    left out."""
    lines, serial = [], 1
    for index, letter in enumerate(sequence):
        if index in skip:
            continue
        res_id, res_name = first_id + index, THREE[letter]
        x = spacing * index + shift[0]
        atoms = [("N", (x, 3.0 + shift[1], shift[2]), "N")]
        if letter == "G":
            atoms.append(("CA", (x, shift[1], shift[2]), "C"))
        else:
            atoms += [("CA", (x, 1.5 + shift[1], shift[2]), "C"), ("CB", (x, shift[1], shift[2]), "C")]
        atoms += [("C", (x + 1.0, 3.0 + shift[1], shift[2]), "C"), ("H", (x, 4.0 + shift[1], shift[2]), "H")]
        for name, xyz, element in atoms:
            lines.append(atom_line(serial, name, res_name, chain, res_id, xyz, element))
            serial += 1
    return lines


def expected_line_map(length: int, spacing: float = 4.0, threshold: float = 8.0) -> np.ndarray:
    separation = np.abs(np.subtract.outer(np.arange(length), np.arange(length)))
    return (spacing * separation < threshold).astype(np.int8)


def write(tmp_path, name: str, lines: list[str]) -> str:
    path = tmp_path / name
    path.write_text("\n".join([*lines, "END"]) + "\n")
    return str(path)


SEQ = "MKVLAGSEQKFT"


def test_line_of_residues_exact_distances(tmp_path):
    structure = read_structure(write(tmp_path, "line.pdb", line_chain(SEQ)))
    assert structure.sequence == SEQ and structure.chain == "A"
    true_map = contact_map(structure, cb="real")
    # spacing 4 Å: neighbours at 4 Å are contacts, residues two apart at exactly 8.0 Å are not (strictly below
    # 8)
    np.testing.assert_array_equal(true_map, expected_line_map(len(SEQ)))
    assert true_map[0, 2] == 0 and true_map[0, 1] == 1
    # a larger threshold includes the 8 Å pairs
    np.testing.assert_array_equal(contact_map(structure, cb="real", threshold=8.5),
                                  expected_line_map(len(SEQ), threshold=8.5))


def test_cbeta_used_and_calpha_for_glycine(tmp_path):
    # residue 0 (Met) and residue 1 (Gly) 7.0 Å apart along x at the representative atoms; Met's CA is
    # off-axis
    lines = line_chain("MG", spacing=7.0)
    structure = read_structure(write(tmp_path, "cb.pdb", lines))
    np.testing.assert_allclose(structure.coords, [[0, 0, 0], [7, 0, 0]])
    assert contact_map(structure, cb="real", threshold=7.01)[0, 1] == 1 and contact_map(structure, cb="real",
        threshold=7.0)[0, 1] == 0


def test_mmcif_gives_the_same_map(tmp_path):
    import biotite.structure.io.pdbx as pdbx

    pdb_path = write(tmp_path, "line.pdb", line_chain(SEQ))
    from biotite.structure.io import pdb

    atoms = pdb.PDBFile.read(pdb_path).get_structure(model=1)
    cif = pdbx.CIFFile()
    pdbx.set_structure(cif, atoms)
    cif_path = tmp_path / "line.cif"
    cif.write(str(cif_path))
    structure = read_structure(str(cif_path))
    assert structure.sequence == SEQ
    np.testing.assert_array_equal(contact_map(structure, cb="real"), expected_line_map(len(SEQ)))
    from_bytes = read_structure(cif_path.read_bytes())  # format sniffed from the content
    np.testing.assert_array_equal(contact_map(from_bytes, cb="real"), expected_line_map(len(SEQ)))


def test_numbering_starting_at_5_and_sequence_alignment(tmp_path):
    structure = read_structure(write(tmp_path, "from5.pdb", line_chain(SEQ, first_id=5)))
    assert structure.residue_ids[0] == 5 and structure.sequence == SEQ
    np.testing.assert_array_equal(contact_map(structure, cb="real", sequence=SEQ),
                                  expected_line_map(len(SEQ)))
    # the full construct has 4 residues before the structure's first: they are unknown, the rest is not
    # shifted
    construct = "GSHM" + SEQ
    aligned = contact_map(structure, cb="real", sequence=construct)
    assert aligned.shape == (len(construct), len(construct))
    assert (aligned[:4] == -1).all() and (aligned[:, :4] == -1).all()
    np.testing.assert_array_equal(aligned[4:, 4:], expected_line_map(len(SEQ)))


def test_missing_residue_does_not_shift_the_map(tmp_path):
    # residue index 5 (G) was not modelled: the file jumps from res_id 5 to 7
    structure = read_structure(write(tmp_path, "gap.pdb", line_chain(SEQ, skip=(5,))))
    assert structure.sequence == SEQ[:5] + SEQ[6:]
    np.testing.assert_array_equal(align_to_sequence(structure, SEQ), [0, 1, 2, 3, 4, -1, 5, 6, 7, 8, 9, 10])
    aligned = contact_map(structure, cb="real", sequence=SEQ)
    expected = expected_line_map(len(SEQ))  # positions keep their true coordinates (x = 4·index)
    expected[5, :] = expected[:, 5] = -1
    np.testing.assert_array_equal(aligned, expected)


def test_first_model_of_an_nmr_ensemble(tmp_path):
    model_1 = line_chain(SEQ)
    model_2 = line_chain(SEQ, spacing=2.0)  # all residues within 8 Å of each other up to 3 apart
    lines = ["MODEL        1", *model_1, "ENDMDL", "MODEL        2", *model_2, "ENDMDL"]
    structure = read_structure(write(tmp_path, "nmr.pdb", lines))
    np.testing.assert_array_equal(contact_map(structure, cb="real"), expected_line_map(len(SEQ)))


def test_first_alternate_location_and_microheterogeneity(tmp_path):
    # residue 2 has CB in altloc A on the axis and altloc B 30 Å away; residue 3 is Pro (A) / Ser (B) like
    # 1EJG's 22
    lines = line_chain("MKV")
    lines = [line for line in lines if not (line[17:20] == "VAL" and line[12:16] == " CB ")]
    lines.append(atom_line(90, "CB", "VAL", "A", 3, (8.0, 0.0, 0.0), "C", altloc="A", occupancy=0.6))
    lines.append(atom_line(91, "CB", "VAL", "A", 3, (8.0, 30.0, 0.0), "C", altloc="B", occupancy=0.4))
    lines.append(atom_line(92, "N", "PRO", "A", 4, (12.0, 3.0, 0.0), "N"))
    for serial, (name, xyz) in enumerate((("CA", (12.0, 1.5, 0.0)), ("CB", (12.0, 0.0, 0.0))), start=93):
        lines.append(atom_line(serial, name, "PRO", "A", 4, xyz, "C", altloc="A", occupancy=0.5))
    for serial, (name, xyz) in enumerate((("CA", (12.0, 1.5, 0.0)), ("CB", (12.0, 40.0, 0.0))), start=95):
        lines.append(atom_line(serial, name, "SER", "A", 4, xyz, "C", altloc="B", occupancy=0.5))
    structure = read_structure(write(tmp_path, "alt.pdb", lines))
    assert structure.sequence == "MKVP"
    np.testing.assert_allclose(structure.coords[2:], [[8.0, 0.0, 0.0], [12.0, 0.0, 0.0]])
    np.testing.assert_array_equal(contact_map(structure, cb="real"), expected_line_map(4))


def test_waters_ligands_and_hydrogens_ignored_chain_choice(tmp_path):
    waters = [atom_line(500 + k, "O", "HOH", "W", k + 1, (0.0, 0.0, 3.0 * k), "O", record="HETATM")
              for k in range(3)]
    ligand = [atom_line(600, "C1", "NAG", "A", 100, (1.0, 1.0, 1.0), "C", record="HETATM")]
    lines = waters + line_chain("MKVL", chain="B") + line_chain(SEQ, chain="A", shift=(0, 0, 50)) + ligand
    path = write(tmp_path, "multi.pdb", lines)
    first = read_structure(path)  # the first *protein* chain: B (chain W holds only waters)
    assert first.chain == "B" and first.chains == ("B", "A") and first.sequence == "MKVL"
    chosen = read_structure(path, chain="A")
    assert chosen.sequence == SEQ  # the NAG ligand of chain A is not a residue
    np.testing.assert_array_equal(contact_map(chosen, cb="real"), expected_line_map(len(SEQ)))
    with pytest.raises(ProbeError, match="no protein chain 'C'.*B, A"):
        read_structure(path, chain="C")
    with pytest.raises(ProbeError, match="no protein chain"):
        read_structure(write(tmp_path, "water.pdb", waters))


def test_mismatching_sequence_and_bad_files(tmp_path):
    structure = read_structure(write(tmp_path, "line.pdb", line_chain(SEQ)))
    with pytest.raises(ProbeError, match="matches only"):
        contact_map(structure, cb="real", sequence="WWWWWWWWWWWW")
    with pytest.raises(ProbeError, match="does not exist"):
        read_structure(str(tmp_path / "absent.pdb"))
    with pytest.raises(ProbeError, match="format"):
        read_structure(write(tmp_path, "line.txt", line_chain(SEQ)))


# ------------------------------------------------------------------------------------------------------------
# Real files (../shared/data/structures)
# ------------------------------------------------------------------------------------------------------------

REAL = {
    "1aki.pdb": (None, "KVFGRCELAAAMKRHGLDNYRGYSLGNWVCAAKFESNFNTQATNRNTDGSTDYGILQINSRWWCNDGRTPGSRNLC"
                       "NIPCSALLSSDITASVNCAKKIVSDGNGMNAWVAWRNRCKGTDVQAWIRGCRL"),
    "pdb1ubi.pdb": ("A", "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG"),
    "pdb1ejg.pdb": (None, "TTCCPSIVARSNFNVCRLPGTPEALCATYTGCIIIPGATCPGDYAN"),
}


def _representative_atoms_by_columns(path: str, chain: str) -> np.ndarray:
    """Independent check: Cβ (Cα for Gly) of the first model, first altloc, read straight from the fixed
    columns."""
    coords: dict[tuple[int, str], np.ndarray] = {}
    order: list[tuple[int, str]] = []
    with open(path) as handle:
        for line in handle:
            if line.startswith("ENDMDL"):
                break
            if not line.startswith("ATOM") or line[21] != chain or line[16] not in " A":
                continue
            key = (int(line[22:26]), line[26])
            if key not in order:
                order.append(key)
            wanted = "CA" if line[17:20] == "GLY" else "CB"
            if line[12:16].strip() == wanted:
                coords[key] = np.array([float(line[30:38]), float(line[38:46]), float(line[46:54])])
    return np.array([coords[key] for key in order])


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_structures(structures_dir, name):
    chain, sequence = REAL[name]
    path = os.path.join(structures_dir, name)
    structure = read_structure(path, chain=chain)
    assert structure.sequence == sequence and len(structure) == len(sequence)
    expected_coords = _representative_atoms_by_columns(path, structure.chain)
    np.testing.assert_allclose(structure.coords, expected_coords, atol=1e-3)
    distances = np.linalg.norm(expected_coords[:, None] - expected_coords[None], axis=-1)
    true_map = contact_map(structure, cb="real", sequence=sequence)
    np.testing.assert_array_equal(true_map, (distances < 8.0).astype(np.int8))
    assert (true_map == true_map.T).all() and (np.diag(true_map) == 1).all()
    separation = np.abs(np.subtract.outer(np.arange(len(sequence)), np.arange(len(sequence))))
    assert true_map[separation >= 24].sum() > 0  # folded proteins have long-range contacts


def test_1ejg_alternate_locations(structures_dir):
    structure = read_structure(os.path.join(structures_dir, "pdb1ejg.pdb"))
    # altloc A of the Pro22/Ser22, Leu25/Ile25
    assert structure.sequence[21] == "P" and structure.sequence[24] == "L"
    np.testing.assert_allclose(structure.coords[21], [5.655, 14.896, -2.744])  # Pro22 CB, altloc A
    # Thr1 CB, altloc A (B at 17.983 ...)
    np.testing.assert_allclose(structure.coords[0], [18.103, 12.875, 5.202])


def test_real_structure_aligned_to_a_longer_construct(structures_dir):
    structure = read_structure(os.path.join(structures_dir, "pdb1ubi.pdb"), chain="A")
    own = contact_map(structure, cb="real")
    aligned = contact_map(structure, cb="real", sequence="MGSSHHHHHH" + structure.sequence)
    np.testing.assert_array_equal(aligned[10:, 10:], own)
    assert (aligned[:10] == -1).all()


# ------------------------------------------------------------------------------------------------------------
# Alternate locations by occupancy, virtual Cβ, binding sites, secondary structure, thresholds
# ------------------------------------------------------------------------------------------------------------


def test_alternate_location_with_the_highest_occupancy_wins(tmp_path):
    # residue 2 (Val) has CB in altlocs A and B at 0.2 each (on the axis / 30 Å away) and C at 0.6 (20 Å away)
    lines = [line for line in line_chain("MKV") if not (line[17:20] == "VAL" and line[12:16] == " CB ")]
    lines.append(atom_line(90, "CB", "VAL", "A", 3, (8.0, 0.0, 0.0), "C", altloc="A", occupancy=0.2))
    lines.append(atom_line(91, "CB", "VAL", "A", 3, (8.0, 30.0, 0.0), "C", altloc="B", occupancy=0.2))
    lines.append(atom_line(92, "CB", "VAL", "A", 3, (8.0, 20.0, 0.0), "C", altloc="C", occupancy=0.6))
    structure = read_structure(write(tmp_path, "alt3.pdb", lines))
    np.testing.assert_allclose(structure.coords[2], [8.0, 20.0, 0.0])
    assert contact_map(structure, cb="real")[1, 2] == 0  # K's CB at x=4 is 20.4 Å from the chosen CB


def test_highest_occupancy_uses_the_mean_over_the_altlocs_atoms():
    from probe.proteins.structure import highest_occupancy_altloc

    # one residue: A covers 3 atoms at 0.4 (sum 1.2), B one atom at 0.6 (sum 0.6): B has the higher occupancy
    altloc = np.array([" ", "A", "A", "A", "B"])
    keep = highest_occupancy_altloc(["A"] * 5, [1] * 5, [""] * 5, altloc, np.array([1.0, 0.4, 0.4, 0.4, 0.6]))
    assert keep.tolist() == [True, False, False, False, True]
    tie = highest_occupancy_altloc(["A"] * 3, [1] * 3, [""] * 3, np.array(["B", "A", " "]),
                                   np.array([.5, .5, 1.]))
    assert tie.tolist() == [True, False, True]  # a tie goes to the altloc met first in the file


def _esm_contacts_from_pdb(path: str, chain: str, threshold: float = 8.0) -> np.ndarray:
    """Independent reimplementation of ESM's evaluation convention (the contact-prediction example's
    `contacts_from_pdb`): a virtual Cβ placed from C, N, Cα by bond length 1.522 Å, angle 1.927 rad and
    dihedral -2.143 rad (the `extend` construction), backbone atoms read from the fixed PDB columns (first
    altloc)."""
    backbone: dict[tuple, dict[str, np.ndarray]] = {}
    with open(path) as handle:
        for line in handle:
            if line.startswith("ENDMDL"):
                break
            if line.startswith("ATOM") and line[21] == chain and line[16] in " A" and line[12:16].strip() in (
                    "N", "CA", "C"):
                backbone.setdefault((int(line[22:26]), line[26]), {})[line[12:16].strip()] = np.array(
                    [float(line[30:38]), float(line[38:46]), float(line[46:54])])
    n, ca, c = (np.array([atoms[name] for atoms in backbone.values()]) for name in ("N", "CA", "C"))

    def extend(a, b, c, length, angle, dihedral):
        def normalize(x):
            return x / np.linalg.norm(x, axis=-1, keepdims=True)

        bc = normalize(b - c)
        normal = normalize(np.cross(b - a, bc))
        frame = [bc, np.cross(normal, bc), normal]
        step = [length * np.cos(angle), length * np.sin(angle) * np.cos(dihedral),
                -length * np.sin(angle) * np.sin(dihedral)]
        return c + sum(axis * size for axis, size in zip(frame, step, strict=True))

    cbeta = extend(c, n, ca, 1.522, 1.927, -2.143)
    distances = np.linalg.norm(cbeta[:, None] - cbeta[None], axis=-1)
    return (distances < threshold).astype(np.int8)


@pytest.mark.parametrize("name", sorted(REAL))
def test_virtual_cbeta_matches_esm_convention(structures_dir, name):
    path = os.path.join(structures_dir, name)
    structure = read_structure(path, chain=REAL[name][0])
    expected = _esm_contacts_from_pdb(path, structure.chain)
    ours = contact_map(structure)  # the default is the virtual Cβ
    np.testing.assert_array_equal(ours, contact_map(structure, cb="virtual"))
    separation = np.abs(np.subtract.outer(np.arange(len(structure)), np.arange(len(structure))))
    for low, high in ((6, 11), (12, 23), (24, 10**6)):
        in_range = (separation >= low) & (separation <= high)
        assert int((ours[in_range] == 1).sum()) == int((expected[in_range] == 1).sum())
    np.testing.assert_array_equal(ours, expected)


def test_virtual_and_real_cbeta_differ_on_lysozyme(structures_dir):
    structure = read_structure(os.path.join(structures_dir, "1aki.pdb"))
    separation = np.abs(np.subtract.outer(np.arange(len(structure)), np.arange(len(structure))))
    long_range = {cb: int(np.triu((contact_map(structure, cb=cb) == 1) & (separation >= 24)).sum())
                  for cb in ("real", "virtual")}
    assert long_range == {"real": 128, "virtual": 134}  # (trRosetta's closed-form virtual Cβ would give 132)


def test_virtual_cbeta_geometry_and_missing_backbone(tmp_path):
    from probe.proteins.structure import virtual_cb

    # an ideal backbone: N, CA, C with 1.458 / 1.525 Å bonds and a 111° angle
    angle = np.deg2rad(111.0)
    n = np.array([1.458, 0.0, 0.0])
    c = 1.525 * np.array([np.cos(angle), np.sin(angle), 0.0])
    cb = virtual_cb(np.array([[n, np.zeros(3), c]]))[0]
    assert 1.50 < np.linalg.norm(cb) < 1.56  # a Cα–Cβ bond
    assert abs(cb[2]) > 0.8  # out of the N–Cα–C plane
    lines = [line for line in line_chain("MKVL") if not (line[17:20] == "VAL" and line[12:16] == " N  ")]
    structure = read_structure(write(tmp_path, "noN.pdb", lines))
    virtual = contact_map(structure)
    assert (virtual[2] == -1).all() and (virtual[:, 2] == -1).all() and virtual[0, 1] in (0, 1)
    assert (contact_map(structure, cb="real")[2] >= 0).all()  # the deposited CB is there


def test_binding_sites_within_the_stated_distance_of_a_ligand(tmp_path):
    from probe.proteins.structure import binding_sites

    lines = line_chain(SEQ)
    # a two-atom ligand 3.5 Å above residue 3's CB (x = 12) and a water 1 Å from residue 8's CB: only 3 binds
    lines.append(atom_line(800, "C1", "LIG", "B", 1, (12.0, 0.0, 3.5), "C", record="HETATM"))
    lines.append(atom_line(801, "O1", "LIG", "B", 1, (12.0, 0.0, 4.9), "O", record="HETATM"))
    # hydrogens ignored
    lines.append(atom_line(802, "H1", "LIG", "B", 1, (16.0, 0.0, 0.5), "H", record="HETATM"))
    lines.append(atom_line(803, "O", "HOH", "W", 1, (32.0, 0.0, 1.0), "O", record="HETATM"))
    structure = read_structure(write(tmp_path, "ligand.pdb", lines))
    assert structure.ligands == ("LIG",)
    # distances from each residue's nearest heavy atom: residue 3's CB is 3.5 Å away; its N and CA are
    # farther; residues 2 and 4 sit 4 Å along x, so their CB is sqrt(16 + 12.25) = 5.3 Å away, C of residue 2
    # at x = 9 is sqrt(9 + 9 + 12.25) = 5.5 Å away
    assert structure.ligand_distance[3] == pytest.approx(3.5)
    assert binding_sites(structure).tolist() == [0, 0, 0, 1] + [0] * (len(SEQ) - 4)
    assert binding_sites(structure, distance=5.4).tolist() == [0, 0, 1, 1, 1] + [0] * (len(SEQ) - 5)
    aligned = binding_sites(structure, sequence="GS" + SEQ)
    assert aligned.tolist() == [-1, -1, 0, 0, 0, 1] + [0] * (len(SEQ) - 4)
    assert binding_sites(read_structure(os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                                                     "pdb1ubi.pdb"))).sum() == 0


def test_secondary_structure_of_real_files(structures_dir):
    from probe.proteins.structure import secondary_structure

    lysozyme = read_structure(os.path.join(structures_dir, "1aki.pdb"))
    states = "".join(secondary_structure(lysozyme))
    # provis' 4 classes: turn/bend, blank apart
    assert set(states) == {"a", "b", "t", "n"} and len(states) == 129
    assert states[4:14] == "a" * 10  # helix A of hen lysozyme, residues 5-14 (DSSP and its HELIX record)
    ubiquitin = read_structure(os.path.join(structures_dir, "pdb1ubi.pdb"))
    ss = "".join(secondary_structure(ubiquitin))
    assert ss[22:33] == "a" * 11 and "bbbb" in ss[1:7]  # its α-helix 23-33 and the β-hairpin's first strand
    aligned = secondary_structure(ubiquitin, sequence="GS" + ubiquitin.sequence)
    assert aligned[:2].tolist() == ["", ""] and "".join(aligned[2:]) == ss


@pytest.mark.parametrize("threshold", [float("nan"), float("inf"), -1.0, 0.0, 1e9])
def test_non_finite_or_out_of_range_thresholds(tmp_path, threshold):
    structure = read_structure(write(tmp_path, "line.pdb", line_chain(SEQ)))
    with pytest.raises(ProbeError, match="finite distance"):
        contact_map(structure, threshold=threshold)


def _records(path, chain):
    """Residue numbers of the file's HELIX and SHEET records for `chain` (PDB fixed columns)."""
    helix, sheet = set(), set()
    with open(path) as handle:
        for line in handle:
            if line.startswith("HELIX ") and line[19] == chain:
                helix |= set(range(int(line[21:25]), int(line[33:37]) + 1))
            if line.startswith("SHEET ") and line[21] == chain:
                sheet |= set(range(int(line[22:26]), int(line[33:37]) + 1))
    return helix, sheet


# Agreement of DSSP (mdtraj, 3 classes) with the HELIX/SHEET records, measured on the shipped files: recall of
# record residues / precision of DSSP's, per class. A record/DSSP disagreement of a few residues at the ends
# of an element is normal (the records are the depositors' own assignment); P-SEA's 0 strand residues in 1EJG
# is not.
AGREEMENT = {  # file: (helix recall, helix precision, strand recall, strand precision), lower bounds
    "1aki.pdb": (0.90, 0.95, 1.0, 0.40), "pdb1ejg.pdb": (0.80, 1.0, 1.0, 1.0),
    "pdb1ubi.pdb": (1.0, 0.80, 0.70, 0.90),
}


@pytest.mark.parametrize("name", sorted(AGREEMENT))
def test_dssp_agrees_with_the_helix_and_sheet_records(structures_dir, name):
    from probe.proteins.structure import secondary_structure

    path = os.path.join(structures_dir, name)
    structure = read_structure(path)
    assert structure.secondary_method == "dssp"
    helix, sheet = _records(path, structure.chain)
    assert sheet, "every shipped structure has a β-sheet in its records"
    states = secondary_structure(structure)
    called = {code: {int(number) for number,
                     state in zip(structure.residue_ids, states, strict=True) if state == code}
              for code in ("a", "b")}
    assert called["b"], f"{name} has SHEET records, so DSSP must find strand residues"
    bounds = AGREEMENT[name]
    for (recall, precision), code, records in ((bounds[:2], "a", helix), (bounds[2:], "b", sheet)):
        assert len(called[code] & records) / len(records) >= recall
        assert len(called[code] & records) / len(called[code]) >= precision


def test_p_sea_is_the_fallback_when_dssp_fails(structures_dir, monkeypatch):
    from probe.proteins import structure as module

    def broken(protein):
        raise ImportError("no mdtraj")

    monkeypatch.setattr(module, "dssp_classes", broken)
    ubiquitin = read_structure(os.path.join(structures_dir, "pdb1ubi.pdb"))
    assert ubiquitin.secondary_method == "p-sea" and set(ubiquitin.secondary.tolist()) <= {"a", "b", "c"}
    monkeypatch.setattr(module, "assign_secondary", lambda protein, n: (np.full(n, "", dtype="<U1"), ""))
    none = read_structure(os.path.join(structures_dir, "pdb1ubi.pdb"))
    assert none.secondary_method == "" and (none.secondary == "").all()
