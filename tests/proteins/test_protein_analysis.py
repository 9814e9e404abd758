"""One protein analysis (probe.proteins.analysis): its inputs equal what the app and the report computed
before they shared it, and a residue property filled in ``ResidueFeatures.of_structure`` (what
docs/howto/protein-measure.md says to do) reaches `probe contacts`, the app and the report alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import probe
from probe.errors import ProbeError
from probe.proteins import sets
from probe.proteins.analysis import analyse_protein, protein_input
from probe.proteins.features import ResidueFeatures
from probe.proteins.structure import contact_map, read_structure
from probe.proteins.units import UnitSpec

ROOT = Path(__file__).resolve().parents[2]
CRAMBIN = ROOT / "tests" / "data" / "pdb1ejg.pdb"  # 46 residues
UBIQUITIN = ROOT / "tests" / "data" / "pdb1ubi.pdb"  # 76 residues


@pytest.fixture(scope="module")
def esm():
    return probe.load("zoo:esm-random")


def test_protein_input_equals_the_chains_own_map_and_properties(esm):
    """The chain's own residues: the true map and properties equal those read without a sequence (what the
    app computed), and a given sequence equal to the chain changes nothing (what the report computed)."""
    chain = read_structure(UBIQUITIN)
    own = contact_map(chain)  # [L L] int8
    features = ResidueFeatures.of_structure(chain, own)
    protein = protein_input(esm, structure=UBIQUITIN)
    assert protein.sequence == chain.sequence and len(protein.sequence) == 76
    np.testing.assert_array_equal(protein.true_map, own)
    np.testing.assert_array_equal(protein.features.secondary, features.secondary)
    assert protein.features.binding is None and features.binding is None  # 1UBI has no ligand: unknown
    assert protein.true_contacts == int((np.triu(own, 1) == 1).sum()) > 0
    assert protein.placed == 76 and protein.other_chains is None
    given = protein_input(esm, chain.sequence.lower(), chain)  # a Structure already read, the same residues
    np.testing.assert_array_equal(given.true_map, own)
    # a part of the chain: aligned, the rest of the chain not placed
    part = protein_input(esm, chain.sequence[10:40], UBIQUITIN)
    assert part.true_map.shape == (30, 30) and part.placed == 30
    np.testing.assert_array_equal(part.true_map, own[10:40, 10:40])


def test_protein_input_refuses_in_one_line(esm):
    with pytest.raises(ProbeError, match="give a protein sequence or a structure"):
        protein_input(esm)
    with pytest.raises(ProbeError, match="not amino-acid letters"):
        protein_input(esm, "MQ1F")
    with pytest.raises(ProbeError, match="matches only"):  # another protein than the chain
        protein_input(esm, "W" * 40, UBIQUITIN)
    sequence_only = protein_input(esm, "MQIFVKT")
    assert sequence_only.true_map is None and sequence_only.features is None
    assert sequence_only.true_contacts == 0


def test_a_property_filled_in_of_structure_reaches_the_cli_the_app_and_the_report(esm, monkeypatch):
    """The how-to's measure, as a toy: every residue planted as a binding site in ``of_structure``. The three
    callers each build their inputs through it (one call each, same residues) and their per-head tables carry
    the planted property (46 binding residues, the same binding shares); without the plant, crambin has no
    ligand and its binding residues are unknown (NaN), never 0."""
    from app.protein_analysis import analyse
    from probe.views.report import _protein_html

    original = ResidueFeatures.of_structure.__func__
    calls = []

    def planted(cls, structure, true_map, sequence=None, binding_distance=4.0):
        calls.append(sequence)
        features = original(cls, structure, true_map, sequence, binding_distance)
        return dataclasses.replace(features, binding=np.ones(len(true_map), dtype=np.int8))  # [L]

    options = sets.ContactOptions(control=0)
    unit = UnitSpec(key="crambin", id="crambin", record=0, structure=str(CRAMBIN))
    before = sets.analyse_unit(esm, unit, options)
    assert np.isnan(before.row["n_binding_residues"])  # negative control: no ligand, unknown (not 0)
    monkeypatch.setattr(ResidueFeatures, "of_structure", classmethod(planted))
    cli = sets.analyse_unit(esm, unit, options)  # probe contacts' unit
    app = analyse(esm, None, CRAMBIN.read_bytes(), "pdb1ejg.pdb")  # the dashboard's panel
    page, _, sequence = _protein_html(esm, None, str(CRAMBIN), None)  # probe report's section
    assert len(calls) == 3 and len(set(calls)) == 1 and calls[0] == sequence == app.sequence
    assert cli.row["n_binding_residues"] == 46.0  # the planted property, counted
    # the panel's binding share is the CLI's, head by head (NaN where too little attention is high)
    cli_shares = cli.result.heads.set_index("name")["binding_share"]
    app_shares = app.heads.set_index("head")["binding share"]
    np.testing.assert_allclose(app_shares.to_numpy(dtype=float),
                               cli_shares.loc[app_shares.index].round(3).to_numpy(dtype=float))
    assert "<th>binding share</th>" in page  # the report's column of the same table
    # the app and the report share the analysis itself: the same per-head numbers as one direct call
    direct = analyse_protein(esm, protein_input(esm, structure=CRAMBIN), control=0)
    by_name = direct.result.heads.set_index("name")["p_at_L_long"]
    shown = app.heads.set_index("head")["P@L long"]
    np.testing.assert_allclose(shown.to_numpy(dtype=float), by_name.loc[shown.index].round(3).to_numpy())
