"""The protein page says one thing (issue 43): one residue limit (the model's), maps titled by what they show
(no "predicted" without a predictor, no P@L table over nothing), p-values as the label tables print them,
every unknown with its reason on hover and in the glossary, the chain used and the others named with a chain
menu that reruns the uploaded file, and a note when the input is outside the model's training domain."""

from __future__ import annotations

import base64
import math
from pathlib import Path

import pytest

from app.config import AppConfig
from app.panels import glossary, proteins
from app.service import Service
from probe.errors import ProbeError
from probe.zoo.tiny import save_tiny

UBIQUITIN = "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG"
PROTEIN_G = "MTYKLILNGKTLKGETTTEAVDAATAEKVFKQYANDNGVDGEWTYDDATKTFTVTE"  # GB1: no antibody V domain
TRASTUZUMAB_VH = ("EVQLVESGGGLVQPGGSLRLSCAASGFNIKDTYIHWVRQAPGKGLEWVARIYPTNGYTRYADSVKGRFTISADTSKNTAYLQMNSLRAE"
                  "DTAVYYCSRWGGDGFYAMDYWGQGTLVTVSS")


def _upload(data: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(data).decode()


def two_chains(path: str, out: Path) -> Path:
    """The ubiquitin file with its chain A copied as chain B (shifted 40 Å): a two-chain structure."""
    lines = Path(path).read_text().splitlines()
    atoms = [line for line in lines if line.startswith("ATOM")]
    copies = [line[:21] + "B" + line[22:30] + f"{float(line[30:38]) + 40:8.3f}" + line[38:] for line in atoms]
    out.write_text("\n".join(atoms + ["TER"] + copies + ["TER", "END"]) + "\n")
    return out


@pytest.fixture(scope="module")
def specs(tiny_dir, tmp_path_factory):
    antibody = save_tiny("esm", tmp_path_factory.mktemp("models") / "tiny-AbLang-heavy")
    return str(tiny_dir("esm")), str(tiny_dir("protbert")), str(antibody)


@pytest.fixture(scope="module")
def service(specs):
    # --max-residues above the model's positions: the model's own limit is the one both panels say
    return Service(AppConfig(models=specs, label_examples=4, max_residues=5000))


def test_the_explorer_and_the_protein_panel_say_the_models_residue_limit(service, specs):
    limit = service.facts.residue_limit(specs[0])
    assert limit == "at most 1022 residues (the model's positions)"  # 1024 positions less <cls> and <eos>
    assert service.facts.limits(specs[0]).endswith("proteins: " + limit)  # the explorer, beside Run
    panel = str(proteins.layout(2**20))
    assert "at most" not in panel and "5000" not in panel  # the panel's line is filled per model: the same
    with pytest.raises(ProbeError, match="1023 residues; the app runs at most 1022"):
        proteins.protein_run(service, specs[0], "A" * 1023, None, None, "")
    small = Service(AppConfig(models=specs, max_residues=30), registry=service.registry)
    assert small.facts.residue_limit(specs[0]) == "at most 30 residues (--max-residues)"
    assert small.facts.residue_limit(specs[0]) in small.facts.limits(specs[0])


def test_maps_are_titled_by_what_they_show(service, specs, ubiquitin_structure):
    data = Path(ubiquitin_structure).read_bytes()
    # a model without a contact regression: no "predicted" anywhere, no P@L table
    store, _ = proteins.protein_run(service, specs[1], UBIQUITIN[:30], None, None, "")
    figure = proteins.protein_view(service, store, {"layer": 0, "head": 0}, None)[0]
    assert "predicted" not in figure.layout.title.text and "no contact regression" in figure.layout.title.text
    assert proteins.precision_style(service, store) == {"display": "none"}
    store, _ = proteins.protein_run(service, specs[1], "", _upload(data), "pdb1ubi.pdb", "")
    title = proteins.protein_view(service, store, {"layer": 0, "head": 0}, None)[0].layout.title.text
    assert "predicted" not in title and "true contacts ↙" in title
    assert proteins.precision_style(service, store) == {"display": "none"}
    # the positive control: ESM predicts, and with a structure both triangles and the P@L table are shown
    store, _ = proteins.protein_run(service, specs[0], "", _upload(data), "pdb1ubi.pdb", "")
    title = proteins.protein_view(service, store, {"layer": 0, "head": 0}, None)[0].layout.title.text
    assert title.endswith("76 residues: predicted ↗ · true contacts ↙")
    assert proteins.precision_style(service, store) == {}
    store, _ = proteins.protein_run(service, specs[0], UBIQUITIN, None, None, "")
    assert proteins.protein_view(service, store, {"layer": 0, "head": 0}, None)[0].layout.title.text.endswith(
        "residues: predicted ↗")
    # the head's map names the head and the model, so a downloaded figure says what it is (issue 44)
    head_map = proteins.protein_view(service, store, {"layer": 0, "head": 1}, None)[1]
    assert head_map.layout.title.text == f"L0H1 APC attention · {Path(specs[0]).name}"


def test_p_values_read_as_the_label_tables_print_them(service, specs, ubiquitin_structure):
    assert proteins.as_read([{"p FWER long": 0.0002, "P@L long": 0.0002}]) == [
        {"p FWER long": "< 0.001", "P@L long": 0.0002}]  # only p/q columns: a P@L is a number
    assert proteins.as_read([{"p FWER long": 0.0123}]) == [{"p FWER long": "0.0123"}]
    assert math.isnan(proteins.as_read([{"p FWER long": math.nan}])[0]["p FWER long"])  # unknown stays
    data = Path(ubiquitin_structure).read_bytes()
    store, _ = proteins.protein_run(service, specs[0], "", _upload(data), "pdb1ubi.pdb", "")
    rows = proteins.protein_view(service, store, {"layer": 0, "head": 0}, None)[2]
    values = [row["p FWER long"] for row in rows]
    assert values and all(isinstance(v, str) and v != "0" for v in values)


def test_every_unknown_cell_gives_its_reason_on_hover_and_in_the_glossary(service, specs,
                                                                          ubiquitin_structure):
    data = Path(ubiquitin_structure).read_bytes()
    store, _ = proteins.protein_run(service, specs[0], "", _upload(data), "pdb1ubi.pdb", "")
    rows = proteins.protein_view(service, store, {"layer": 0, "head": 0}, None)[2]
    tips = proteins.leaderboard_tooltips(service, store)
    assert len(tips) == len(rows)
    for row, tip in zip(rows, tips, strict=True):
        assert {c for c, v in row.items() if v == "unknown"} == set(tip)  # every unknown has a reason
    binding = tips[0]["binding share"]["value"]
    assert "ligand HETATM" in binding and "this file has none" in binding  # 1UBI: water only
    assert "min_total" in tips[0]["Vig share"]["value"]  # 76 residues: Σα > θ never reaches 100
    terms = dict(glossary.entries())
    assert "ligand HETATM" in terms["unknown: binding share"]
    assert "DSSP" in terms["unknown: helix / strand share"]
    assert "min_total" in terms["unknown: Vig share (contact share)"]
    # a model without a regression on a structure: its shares are unknown with the same reasons
    store, _ = proteins.protein_run(service, specs[1], "", _upload(data), "pdb1ubi.pdb", "")
    assert "this file has none" in proteins.leaderboard_tooltips(service, store)[0]["binding share"]["value"]
    assert proteins.leaderboard_tooltips(service, None) == []


def test_a_multi_chain_upload_names_its_chains_and_the_menu_reruns_another(service, specs,
                                                                          ubiquitin_structure, tmp_path):
    data = two_chains(ubiquitin_structure, tmp_path / "two.pdb").read_bytes()
    store, message = proteins.protein_run(service, specs[0], "", _upload(data), "two.pdb", "")
    assert store["chains"] == ["A", "B"] and store["chain"] == "A"
    assert "chain A used of 2 protein chains (A, B)" in message
    options, value, disabled = proteins.chain_menu(store)
    assert [o["value"] for o in options] == ["A", "B"] and value == "A" and not disabled
    again, message = proteins.protein_run(service, specs[0], "", None, store["filename"], "B",
                                          store["upload"])
    assert again["chain"] == "B" and again["length"] == 76 and "two.pdb chain B" in message
    assert proteins.chain_menu({"key": "k", "length": 3})[2]  # a typed sequence: no menu
    single = Path(ubiquitin_structure).read_bytes()
    store, message = proteins.protein_run(service, specs[0], "", _upload(single), "pdb1ubi.pdb", "")
    assert "protein chains" not in message and proteins.chain_menu(store)[2]  # one chain: nothing to pick
    with pytest.raises(ProbeError, match="expired"):
        proteins.protein_run(service, specs[0], "", None, "two.pdb", "B", "not-a-key")


def test_an_antibody_model_on_a_chain_outside_its_domain_says_so(service, specs):
    _, message = proteins.protein_run(service, specs[2], PROTEIN_G, None, None, "")
    assert "outside the model's domain" in message and "heuristic" in message
    _, message = proteins.protein_run(service, specs[2], TRASTUZUMAB_VH, None, None, "")
    assert message == ""  # its own domain: nothing to say
    _, message = proteins.protein_run(service, specs[0], PROTEIN_G, None, None, "")
    assert message == ""  # a model of unknown domain is never guessed to be outside it


def test_unknown_reasons_follow_the_annotation_and_the_structure_set_table_has_them():
    from probe.views.unknowns import unknown_reason

    assert "this file has none" in unknown_reason("binding_share", ligands=())
    with_ligand = unknown_reason("binding_share", ligands=("HEM",))  # annotated: only the share rule is left
    assert "HETATM" not in with_ligand and "min_total" in with_ligand
    assert "DSSP" in unknown_reason("helix_share") and "min_total" in unknown_reason("helix_share")
    assert unknown_reason("p_at_L_long", has_structure=False).startswith("needs a structure")
    assert "regression" in unknown_reason("logit_share")
    rows = [{"head": "L0H0", "binding share": "unknown", "P@L long": 0.5, "binding bg": "unknown"}]
    tips = proteins.unknown_tooltips(rows, proteins.SET_COLUMNS)
    assert set(tips[0]) == {"binding share", "binding bg"}
    assert all("HETATM" in tip["value"] for tip in tips[0].values())


def test_a_small_p_value_is_not_rounded_before_it_is_read():
    import pandas as pd

    from app.protein_analysis import leaderboard

    heads = pd.DataFrame({"name": ["L0H0", "L0H1"], "layer": [0, 0], "head": [0, 1],
                          "p_at_L_long": [0.5, 0.2], "p_fwer_L_long": [0.0006, 0.04]})
    rows = proteins.as_read(leaderboard(heads, with_structure=True).to_dict("records"))
    assert [row["p FWER long"] for row in rows] == ["< 0.001", "0.04"]  # 0.0006 rounded would read 0.001
