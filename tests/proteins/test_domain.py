"""A model's training domain on its card (name patterns, never guessed), the antibody V-domain heuristic on
hand-picked chains, and `probe contacts`' notes: outside the model's domain, and the chain used of a
multi-chain structure (issue 43, item 4)."""

from __future__ import annotations

import pytest

from probe.card import architecture_card, training_domain
from probe.cli import main
from probe.proteins.domain import chain_note, domain_note, has_antibody_v_domain
from probe.zoo.tiny import save_tiny, tiny_config
from tests.app.test_protein_page import PROTEIN_G, TRASTUZUMAB_VH, UBIQUITIN, two_chains

TRASTUZUMAB_VL = ("DIQMTQSPSSLSASVGDRVTITCRASQDVNTAVAWYQQKPGKAPKLLIYSASFLYSGVPSRFSGSRSGTDFTLTISSLQPEDFATYYCQQ"
                  "HYTTPPTFGQGTKVEIK")
LYSOZYME = ("KVFGRCELAAAMKRHGLDNYRGYSLGNWVCAAKFESNFNTQATNRNTDGSTDYGILQINSRWWCNDGRTPGSRNLCNIPCSALLSSDITASVNCA"
            "KKIVSDGNGMNAWVAWRNRCKGTDVQAWIRGCRL")  # 1AKI: eight cysteines and six tryptophans, no V domain


@pytest.mark.parametrize("model_type,name,kind,text", [
    ("esm", "facebook/esm2_t6_8M_UR50D", "protein", "UniRef50"),
    ("esm", "facebook/esm1b_t33_650M_UR50S", "protein", "UniRef50"),
    ("bert", "Rostlab/prot_bert", "protein", "UniRef100"),
    ("bert", "Rostlab/prot_bert_bfd", "protein", "BFD"),
    ("bert", "Exscientia/IgBert", "antibody", "antibody heavy/light chains"),
    ("roberta", "qilowoq/AbLang_heavy", "antibody", "antibody heavy/light chains"),
    ("esm", "/models/my-finetune", "unknown", "unknown"),  # an ESM architecture alone says nothing
    ("gpt2", "facebook/esm2_t6_8M_UR50D", "unknown", "unknown"),  # the name of one family on another's type
])
def test_training_domain_is_read_from_the_name_never_guessed(model_type, name, kind, text):
    found = training_domain(model_type, name)
    assert found[0] == kind and text in found[1]


def test_the_card_shows_the_training_domain():
    config = tiny_config("esm", 33)
    assert dict(architecture_card(config).rows())["training domain"] == "unknown"
    card = architecture_card(config, name="facebook/esm2_t6_8M_UR50D")
    assert "UniRef50" in card.domain and "UniRef50" in dict(card.rows())["training domain"]
    config._name_or_path = "Exscientia/IgBert"  # what from_pretrained records
    assert "antibody" in architecture_card(config).domain


def test_the_antibody_heuristic_finds_v_domains_and_nothing_else():
    assert has_antibody_v_domain(TRASTUZUMAB_VH) and has_antibody_v_domain(TRASTUZUMAB_VL)
    assert has_antibody_v_domain(TRASTUZUMAB_VH.lower())
    for other in (PROTEIN_G, UBIQUITIN, LYSOZYME, TRASTUZUMAB_VH[:60]):  # a truncated V domain: no Cys 104
        assert not has_antibody_v_domain(other)
    note = domain_note("bert", "Exscientia/IgBert", PROTEIN_G)
    assert "outside the model's domain" in note and "heuristic" in note
    assert domain_note("bert", "Exscientia/IgBert", TRASTUZUMAB_VL) is None
    assert domain_note("esm", "facebook/esm2_t6_8M_UR50D", TRASTUZUMAB_VL) is None  # UniRef holds antibodies
    assert chain_note("A", ("A",)) is None and "chain B used of 3 protein chains (A, B, C)" in chain_note(
        "B", ("A", "B", "C"))


def test_probe_contacts_prints_the_domain_note_and_names_the_chains(tmp_path, capsys, ubiquitin_structure):
    antibody = str(save_tiny("esm", tmp_path / "tiny-AbLang-heavy"))
    assert main(["contacts", "--model", antibody, "--sequence", PROTEIN_G]) == 0
    err = capsys.readouterr().err
    assert "outside the model's domain" in err and "no antibody V domain" in err
    assert main(["contacts", "--model", antibody, "--sequence", TRASTUZUMAB_VH]) == 0
    assert "outside the model's domain" not in capsys.readouterr().err
    structure = two_chains(ubiquitin_structure, tmp_path / "two.pdb")
    assert main(["contacts", "--model", antibody, "--structure", str(structure), "--chain", "B"]) == 0
    err = capsys.readouterr().err
    assert "chain B used of 2 protein chains (A, B)" in err and "outside the model's domain" in err
