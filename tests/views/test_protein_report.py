"""The protein report's figures and reasons (issue 43, items 2–4): the contact map (predicted ↗ · true ↙)
and the leaderboard's first heads as residue maps, titled by what they show (no "predicted" without a
predictor, no P@L table over nothing), every unknown cell with its reason, p-values as the label tables
print them, the chain used of a multi-chain file and the domain note. The browser check is in
test_structure_browser.py."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest

from probe import models
from probe.views import figures
from probe.views.report import HEAD_MAPS, report_html
from probe.zoo.tiny import save_tiny
from tests.app.test_protein_page import two_chains


def _pngs(page: str) -> list[bytes]:
    return [base64.b64decode(uri) for uri in re.findall(r'href="data:image/png;base64,([^"]+)"', page)]


def test_residue_map_svg_draws_each_triangle_and_says_which_is_which():
    upper = np.zeros((6, 6))
    upper[0, 5] = upper[5, 0] = 1.0  # [residue residue]
    true = np.zeros((6, 6), dtype=np.int8)
    true[4, 1] = true[1, 4] = 1
    svg = figures.residue_map_svg(upper, true, "L0H1", "L0H1 APC attention")
    assert "<title>L0H1 · L0H1 APC attention ↗ · true contacts ↙</title>" in svg
    only_true = figures.contact_svg(None, true, "contacts")
    assert "predicted" not in only_true and "true contacts ↙" in only_true
    with pytest.raises(Exception, match="needs values"):
        figures.residue_map_svg(None, None, "x", "y")
    big = figures.residue_map_svg(np.random.default_rng(0).random((600, 600)), None, "big", "α")
    assert "max-pooled 3×3" in big  # ≤ 256 cells a side: the report stays small for long chains


def test_the_protein_report_has_the_contact_map_and_the_head_maps(tiny_dir, ubiquitin_structure):
    loaded = models.load(str(tiny_dir("esm")))
    page = report_html(loaded, structure=ubiquitin_structure)
    assert page.count('<figure class="contact-map">') == 1
    assert page.count('<figure class="head-map">') == HEAD_MAPS
    assert "<figcaption>predicted ↗ · true ↙</figcaption>" in page
    assert re.search(r"<figcaption>L\dH\d APC attention ↗ · true contacts ↙</figcaption>", page)
    pngs = _pngs(page)
    assert all(png.startswith(b"\x89PNG") for png in pngs) and len(pngs) >= 1 + HEAD_MAPS
    # unknown cells say why; p-values are never a bare 0
    assert 'title="needs ligand HETATM records in the structure file' in page and "this file has none" in page
    assert ">0</td>" not in page.split("heads against the contact base rate", 1)[1]


def test_a_model_without_a_regression_shows_no_predicted_map_or_table(tiny_dir, ubiquitin_structure):
    page = report_html(models.load(str(tiny_dir("protbert"))), structure=ubiquitin_structure)
    contacts = page.split("<h2>Contacts</h2>", 1)[1]
    assert "<figcaption>true contacts ↙</figcaption>" in contacts and "predicted ↗" not in contacts
    assert "P@L/2" not in contacts and page.count('<figure class="head-map">') == HEAD_MAPS


def test_the_report_names_the_chains_and_the_domain(tmp_path, ubiquitin_structure):
    antibody = models.load(str(save_tiny("esm", tmp_path / "tiny-IgBert")))
    structure = two_chains(ubiquitin_structure, tmp_path / "two.pdb")
    page = report_html(antibody, structure=str(structure), chain="B")
    assert "chain B used of 2 protein chains (A, B)" in page
    assert '<p class="note domain">outside the model&#x27;s domain' in page
    assert "antibody heavy/light chains" in page  # the card's training domain


def test_report_text_on_a_structure_is_aligned_or_refused(tiny_dir, ubiquitin_structure):
    """Issue 55 item 5: `--structure S --text T` ignored T (another protein and a sub-sequence gave
    byte-identical pages). T is now aligned to the chain as probe.show_structure aligns it: a part of the
    chain is drawn on it (the page says so), another protein is refused in the same words."""
    from probe.errors import ProbeError
    from probe.proteins.structure import read_structure
    from probe.views.structure_view import show_structure

    loaded = models.load(str(tiny_dir("esm")))
    chain = read_structure(ubiquitin_structure).sequence
    part = chain[10:60]
    page = report_html(loaded, text=part, structure=ubiquitin_structure, seq_len=16)
    assert "the given sequence (50 residues) aligned to the chain: 50 of them placed on the structure" in page
    whole = report_html(loaded, structure=ubiquitin_structure, seq_len=16)
    assert "the given sequence" not in whole
    other = "GSWWPDNHCYEFGGRWWPPTDHCYKGGSWNNPEDCHWYQ"
    with pytest.raises(ProbeError, match="matches only") as refused:
        report_html(loaded, text=other, structure=ubiquitin_structure, seq_len=16)
    with pytest.raises(ProbeError) as same:
        show_structure(loaded, ubiquitin_structure, sequence=other)
    assert str(refused.value) == str(same.value)  # one check, one message
