"""The 3D structure view's payload (probe.views.structure3d) and its hosts' Python side (probe.show_structure,
the report's section, the vendored 3Dmol.js): exact values on planted α, the residue map on real PDB entries
(1EJG's alternate locations, a sequence with a tag and a gap), α equal to eager attention, the heads chosen
within the budget. The browser side is tests/views/test_structure_browser.py."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from probe import models
from probe.errors import ProbeError
from probe.proteins.structure import contact_map, read_structure
from probe.views import encode
from probe.views.structure3d import (
    chain_pdb,
    edge_weights,
    position_labels,
    predicted_pairs,
    residue_positions,
    structure_payload,
    top_pairs,
    true_pairs,
)

ASSETS = Path(__file__).resolve().parents[2] / "probe" / "views" / "assets"
LIBRARY = "(function (define, exports, module)"  # 3Dmol.js inlined (bundle.inline_structure_script)


def _planted(length: int) -> np.ndarray:
    """[L L] α: a few strong pairs on a weak uniform floor (rows need not sum to 1: the payload never
    renormalises)."""
    alpha = np.full((length, length), 0.01, dtype=np.float32)
    alpha[1, 5], alpha[5, 1] = 0.6, 0.2  # max 0.6, mean 0.4, query 1
    alpha[2, 7], alpha[7, 2] = 0.3, 0.35  # max 0.35 in the direction 7 → 2; mean 0.325
    alpha[0, 0] = 0.9  # self-attention: never an edge
    alpha[3, 4] = 0.05  # below min_weight 0.1
    alpha[4, 6] = alpha[6, 4] = 0.2  # a tie with the pair below: lower positions first
    alpha[0, 6] = 0.2
    return alpha


def test_top_pairs_planted_max_rule():
    pairs, weights = top_pairs(_planted(8), count=10, min_weight=0.1, rule="max")
    assert pairs.tolist() == [[1, 5], [7, 2], [0, 6], [4, 6]]
    np.testing.assert_allclose(weights, [0.6, 0.35, 0.2, 0.2], rtol=1e-6)


def test_top_pairs_planted_mean_rule_count_and_drawable():
    pairs, weights = top_pairs(_planted(8), count=10, min_weight=0.1, rule="mean")
    # mean: (1,5) 0.4, (2,7) 0.325, (4,6) 0.2, (0,6) (0.2 + 0.01) / 2 = 0.105
    assert pairs.tolist() == [[1, 5], [7, 2], [4, 6], [0, 6]]
    np.testing.assert_allclose(weights, [0.4, 0.325, 0.2, 0.105], rtol=1e-6)
    pairs, _ = top_pairs(_planted(8), count=1)
    assert pairs.tolist() == [[1, 5]]
    drawable = np.ones(8, dtype=bool)
    drawable[5] = False  # no Cα: its pairs are not drawn
    pairs, _ = top_pairs(_planted(8), count=10, drawable=drawable)
    assert pairs.tolist() == [[7, 2], [0, 6], [4, 6]]
    # a negative control: a uniform head has no pair above 0.1
    assert top_pairs(np.full((16, 16), 1 / 16), count=10)[0].shape == (0, 2)  # uniform: 0.0625 < 0.1


def test_edge_weights_and_rules():
    weights = edge_weights(_planted(8))
    assert np.allclose(weights, weights.T) and np.all(np.diag(weights) == 0)
    with pytest.raises(ProbeError, match="max, mean"):
        edge_weights(_planted(8), rule="sum")


def test_true_and_predicted_pairs():
    true_map = np.zeros((10, 10), dtype=np.int8)
    true_map[0, 6] = true_map[6, 0] = 1  # 6 apart: kept
    true_map[1, 3] = true_map[3, 1] = 1  # 2 apart: too local
    true_map[2, 9] = true_map[9, 2] = -1  # unknown
    assert true_pairs(true_map).tolist() == [[0, 6]]
    contacts = np.zeros((10, 10))
    contacts[0, 9], contacts[1, 8], contacts[0, 1] = 0.9, 0.7, 0.99  # (0, 1) is too local
    contacts[2, 9] = np.nan
    index, probability = predicted_pairs(contacts, count=2)
    assert index.tolist() == [[0, 9], [1, 8]] and probability.tolist() == [0.9, 0.7]
    assert len(predicted_pairs(contacts)[0]) == 10 - 1  # L pairs by default, NaN left out


def test_residue_map_on_1ejg_alternate_locations(structures_dir):
    structure = read_structure(f"{structures_dir}/pdb1ejg.pdb")
    assert len(structure) == 46
    mapping = residue_positions(structure, structure.sequence)
    assert mapping.tolist() == list(range(46))
    labels = position_labels(structure, structure.sequence, mapping)
    assert labels[0] == "T1" and labels[21] == "P22" and labels[24] == "L25"  # altloc A, the best occupied
    text = chain_pdb(structure)
    atoms = [line for line in text.splitlines() if line.startswith("ATOM")]
    ca = [line for line in atoms if line[12:16].strip() == "CA"]
    assert [int(line[22:26]) for line in ca] == list(range(1, 47))  # renumbered 1..46, one Cα each
    assert ca[21][17:20] == "PRO" and ca[24][17:20] == "LEU" and {line[16] for line in atoms} == {" "}
    assert {line[21] for line in atoms} == {"A"}
    assert len(atoms) == structure.atoms.array_length()


def test_residue_map_with_a_tag_and_a_gap(ubiquitin_structure):
    structure = read_structure(ubiquitin_structure)
    sequence = "GSH" + structure.sequence[:30] + structure.sequence[33:]  # a tag; residues 31-33 left out
    mapping = residue_positions(structure, sequence)
    assert mapping[:3].tolist() == [-1, -1, -1]
    assert mapping[3:33].tolist() == list(range(30)) and mapping[33:].tolist() == list(range(33, 76))
    labels = position_labels(structure, sequence, mapping)
    assert labels[:4] == ["G1?", "S2?", "H3?", "M1"] and labels[33] == "E34"  # residue 34 follows the gap
    alpha = {(0, 0): _planted(len(sequence))}
    data = structure_payload(structure, sequence, alpha, token_offset=1)
    assert data["token_of_position"][:4] == [1, 2, 3, 4] and data["residue_of_position"] == mapping.tolist()
    assert data["ca"][:3] == [None, None, None]  # positions without a residue are not drawn
    # the planted pairs touching the tag (0..2) are dropped; (4, 6) stays
    assert data["pairs"][0] == [[4, 6, 0.2]]
    with pytest.raises(ProbeError, match="matches only"):
        residue_positions(structure, "W" * 76)  # the wrong protein


def test_payload_exact_on_planted_alpha(ubiquitin_structure):
    structure = read_structure(ubiquitin_structure)
    length = len(structure)
    first, second = _planted(length), np.full((length, length), 0.02, dtype=np.float32)
    second[10, 40] = 0.8  # another head: one long-range pair
    true_map = contact_map(structure)  # [L L]
    contacts = np.zeros((length, length), dtype=np.float32)
    contacts[0, 20], contacts[3, 60] = 0.95, 0.5
    data = structure_payload(structure, structure.sequence, {(1, 2): second, (0, 3): first}, 1, true_map,
                             contacts, selected=(1, 2), model="m", theme="dark")
    assert data["heads"] == [[0, 3], [1, 2]] and data["head_names"] == ["L0H3", "L1H2"]
    assert data["selected"] == [1, 2] and data["theme"] == "dark" and data["title"] == "m"
    assert data["pairs"] == [[[1, 5, 0.6], [7, 2, 0.35], [0, 6, 0.2], [4, 6, 0.2]], [[10, 40, 0.8]]]
    assert data["contacts"]["true"] == true_pairs(true_map).tolist() and len(data["contacts"]["true"]) > 50
    assert data["contacts"]["predicted"][:2] == [[0, 20, 0.95], [3, 60, 0.5]]
    assert len(data["contacts"]["predicted"]) == length
    np.testing.assert_allclose(data["ca"][17], structure.backbone[17, 1], atol=5e-4)
    raw = np.frombuffer(base64.b64decode(data["maps"]["data"]), dtype=np.uint8).reshape(2, length, length)
    tops = np.frombuffer(base64.b64decode(data["maps"]["scale"]), dtype="<f4")
    decoded = encode.dequantise(raw, tops)  # [head L L], as structure.js reads it
    assert np.abs(decoded[0] - first).max() <= 0.9 / 510 + 1e-7
    assert np.abs(decoded[1] - second).max() <= 0.8 / 510 + 1e-7
    json.dumps(data)  # JSON-ready
    with pytest.raises(ProbeError, match="76 residues"):
        structure_payload(structure, structure.sequence, {(0, 0): first[:10, :10]}, 1)
    with pytest.raises(ProbeError, match="theme"):
        structure_payload(structure, structure.sequence, {(0, 0): first}, 1, theme="blue")


@pytest.fixture(scope="module")
def esm(tiny_dir):
    return models.load(str(tiny_dir("esm")))


def test_residue_attention_equals_eager(esm, ubiquitin_structure):
    from probe.views.structure_view import residue_attention
    from tests.conftest import eager_attention

    sequence = read_structure(ubiquitin_structure).sequence
    heads = [(0, 1), (1, 3)]
    alpha = residue_attention(esm, sequence, heads)
    inputs = models.tokenize_protein(esm, sequence)
    reference = eager_attention(esm.model, inputs)[0]  # [layer head token token]
    start = esm.residue_offset
    for layer, head in heads:
        expected = reference[layer, head, start:start + 76, start:start + 76].numpy()
        np.testing.assert_allclose(alpha[(layer, head)], expected, atol=2e-6)
        assert alpha[(layer, head)].shape == (76, 76)
    assert start == 1  # ESM: <cls> first, so residue 0 is token 1


def test_show_structure_heads_budget_and_errors(esm, ubiquitin_structure, tmp_path):
    from probe.views.structure_view import show_structure

    view = show_structure(esm, ubiquitin_structure)
    every = sorted(esm.heads)
    assert sorted(view.alpha) == every  # 8 heads × (76² + 4) bytes fit the 2 MiB budget
    data = view.payload()
    assert data["selected"] == list(view.selected) and data["contacts"]["true"]
    notes = {tuple(key): note for key, note in zip(data["heads"], data["head_notes"], strict=True)}
    assert all(note.startswith("P@L long ") for note in notes.values())
    best = max(notes, key=lambda key: (float(notes[key].split()[-1]), [-k for k in key]))
    assert tuple(data["selected"]) == best  # the best long-range P@L first
    small = show_structure(esm, ubiquitin_structure, budget=2 * encode.bytes_per_head(76))
    assert len(small.alpha) == 2 and best in small.alpha
    chosen = show_structure(esm, ubiquitin_structure, heads=["L1H0"], theme="dark")
    assert list(chosen.alpha) == [(1, 0)] and chosen.payload()["theme"] == "dark"
    with pytest.raises(ProbeError, match="not among the heads"):
        show_structure(esm, ubiquitin_structure, heads=["L1H0"], selected="L0H0")
    with pytest.raises(ProbeError, match="does not exist"):
        show_structure(esm, ubiquitin_structure, heads=["L9H0"])
    with pytest.raises(ProbeError, match="no protein chain 'Z'"):
        show_structure(esm, ubiquitin_structure, chain="Z")
    bundle = view._repr_mimebundle_()
    page = bundle["text/html"]
    assert 'data-probe-structure="' in page and "window.probeStructure.mountAll()" in page
    assert page.count(LIBRARY) == 1 and not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', page)
    assert "76 residues" in bundle["text/plain"]
    saved = view.save(tmp_path / "ubi.html")
    assert saved.read_text().startswith("<!DOCTYPE html>")
    with pytest.raises(ProbeError, match=".html"):
        view.save(tmp_path / "ubi.png")


def test_show_structure_refuses_a_text_model(tiny_dir, ubiquitin_structure):
    from probe.views.structure_view import show_structure

    with pytest.raises(ProbeError, match="protein language model"):
        show_structure(models.load(str(tiny_dir("gpt2"))), ubiquitin_structure)


def test_protein_report_embeds_the_3d_view(esm, ubiquitin_structure, tmp_path):
    from probe.views.report import write_report

    page = write_report(esm, tmp_path / "protein.html", structure=ubiquitin_structure).read_text()
    assert "<h2>Structure</h2>" in page and page.count(LIBRARY) == 1
    data = json.loads(re.search(r'id="probe-report-structure-data">(.*?)</script>', page, re.S).group(1))
    assert data["n"] == 76 and data["structure"] == "pdb1ubi" and len(data["heads"]) == 8
    plain = write_report(esm, tmp_path / "plain.html").read_text()  # no structure: no 3D view, no 3Dmol
    assert LIBRARY not in plain and "pass --structure" in plain


def test_vendored_3dmol_matches_its_notice():
    library = (ASSETS / "3Dmol-min.js").read_bytes()
    notice = (ASSETS / "3Dmol-NOTICE.md").read_text()
    assert hashlib.sha256(library).hexdigest() in notice and "2.5.5" in notice and "BSD-3-Clause" in notice
    assert library.startswith(b"/*! For license information please see 3Dmol-min.js.LICENSE.txt */")
    licence = (ASSETS / "3Dmol-LICENSE.txt").read_text()
    assert "University of Pittsburgh" in licence and "pako" in licence


def test_the_app_route_serves_the_3d_scripts():
    from probe.views import bundle

    assert {"3Dmol-min.js", "structure.js"} <= set(bundle.FILES)
    assert [url.rsplit("/", 1)[1] for url in bundle.STRUCTURE_URLS] == ["3Dmol-min.js", "structure.js"]
    script = bundle.inline_structure_script()
    assert script.count("<script>") == 2 and "(function (define, exports, module)" in script


def _colour_scale(alpha: np.ndarray, focus: int | None = None) -> dict:
    """structure.js's fold colouring of the [L L] map `alpha` (its pure core, run by node): {values, top}."""
    import shutil
    import subprocess

    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    n = alpha.shape[0]
    script = ("global.window = {}; require(process.argv[1]); var core = window.probeStructure.core;"
              "var alpha = Float32Array.from(JSON.parse(process.argv[2])), n = Number(process.argv[3]);"
              "var focus = process.argv[4] === 'null' ? null : Number(process.argv[4]);"
              "var result = core.uniformScaled(core.residueValues(alpha, n, focus, 'from'), n);"
              "console.log(JSON.stringify({values: Array.from(result.values), top: result.top, colours:"
              " Array.from(result.values).map(function (v) { return core.residueColour(v, 'light'); })}));")
    where = "null" if focus is None else str(focus)
    out = subprocess.run(["node", "-e", script, str(ASSETS / "structure.js"),
                          json.dumps(alpha.ravel().tolist()), str(n), where],
                         capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def test_a_flat_head_leaves_the_fold_grey_and_a_peaked_one_reaches_the_ramps_end():
    """Issue 55 item 11: the fold's colours are a multiple of uniform attention (1/L), the same scale for
    every head: a uniform head is the base grey everywhere (it was the ramp's end: scaled to its own maximum),
    a head sending everything to one residue colours that residue at the ramp's end and nothing else."""
    n = 40
    flat = _colour_scale(np.full((n, n), 1 / n, dtype=np.float32))
    assert max(flat["values"]) == pytest.approx(0.0, abs=1e-6) and flat["top"] == pytest.approx(1.0, abs=1e-5)
    assert set(flat["colours"]) == {"#d0d0d0"}  # the theme's base grey: "nothing here"
    peaked = np.zeros((n, n), dtype=np.float32)
    peaked[:, 7] = 1.0  # every residue attends to residue 7
    shown = _colour_scale(peaked)
    assert shown["values"][7] == pytest.approx(1.0) and shown["top"] == pytest.approx(n)
    assert shown["colours"][7] == "#d94801"
    assert set(shown["colours"][:7] + shown["colours"][8:]) == {"#d0d0d0"}
    # a focused residue's row: 4 × uniform on residue 3 is log(4) / log(40) of the way, the rest below uniform
    half = np.full((n, n), 0.9 / (n - 1), dtype=np.float32)
    half[5, :] = (1 - 4 / n) / (n - 1)
    half[5, 3] = 4 / n
    row = _colour_scale(half, focus=5)
    assert row["values"][3] == pytest.approx(np.log(4) / np.log(n), abs=1e-4)
    assert max(row["values"][:3] + row["values"][4:]) == 0.0


@pytest.mark.parametrize("options, message", [
    ({"top": -5}, "top=-5: give the most edges drawn per head"),
    ({"top": 0}, "top=0:"),
    ({"top": 2.5}, "top=2.5:"),
    ({"min_weight": float("nan")}, "min_weight=nan: give an edge weight between 0 and 1"),
    ({"min_weight": 1.5}, "min_weight=1.5:"),
    ({"min_weight": -0.1}, "min_weight=-0.1:"),
    ({"budget": 0}, "budget=0: give the bytes of residue maps"),
    ({"rule": "median"}, "rule='median': use one of max, mean"),
    ({"theme": "blue"}, "theme='blue': use one of light, dark"),
])
def test_show_structure_refuses_bad_options_before_loading(options, message, ubiquitin_structure,
                                                           monkeypatch):
    """Issue 55 item 9: top=-5, min_weight=nan and budget=0 were accepted (a budget of 0 still drew a head);
    each is now one line naming the fix, before the model is loaded."""
    from probe.views import structure_view

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(structure_view, "load", never)
    with pytest.raises(ProbeError, match=re.escape(message)):
        structure_view.show_structure("zoo:esm-random", ubiquitin_structure, **options)


def test_show_structure_calls_a_folder_a_folder(esm, tmp_path):
    from probe.views.structure_view import check_view_options, show_structure

    with pytest.raises(ProbeError, match=f"structure {re.escape(str(tmp_path))} is a folder: give a PDB or "
                                         "mmCIF file inside it"):
        show_structure(esm, tmp_path)
    with pytest.raises(ProbeError, match="does not exist"):
        show_structure(esm, tmp_path / "none.pdb")
    check_view_options(1, 0.0, 1, "mean", "dark")  # the control: the smallest valid values pass
    check_view_options(50, 1.0, 2**21, "max", "light")
