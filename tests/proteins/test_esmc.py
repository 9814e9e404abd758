"""ESM C (transformers' `esmc`) as a protein model: detected as one, analysed head by head, and given a
contact readout by `probe contacts --fit` (ESM C ships no contact regression) that predicts exactly sigmoid(b
+ Σ w·APC(sym α))."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from probe import models
from probe.cli import main
from probe.proteins import regression as fitting
from probe.proteins.regression_file import read_regression

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "EsmcConfig"):
    pytest.skip("this transformers has no ESM C (esmc)", allow_module_level=True)

SEQUENCE = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSLAKWKRQTLGQHDFSAG"


@pytest.fixture(scope="module")
def esmc(tmp_path_factory):
    """A tiny random ESM C (2 layers × 4 heads, QK-LayerNorm, rotary) with its own tokenizer."""
    torch.manual_seed(0)
    config = transformers.EsmcConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, max_position_embeddings=256,
                                     initializer_range=0.2)
    directory = tmp_path_factory.mktemp("tiny-esmc")
    transformers.EsmcForMaskedLM(config).eval().save_pretrained(directory)
    transformers.EsmcTokenizer().save_pretrained(directory)
    return str(directory)


def test_esm_c_is_a_protein_model_by_its_config(esmc):
    loaded = models.load(esmc)
    assert loaded.kind == models.ModelKind.PROTEIN_MLM and loaded.residue_format == "letters"
    assert type(loaded.model).__name__ == "EsmcForMaskedLM" and not loaded.has_contact_head
    assert loaded.residue_offset == 1 and (loaded.n_layers, loaded.n_heads) == (2, 4)
    # the rule itself: the config alone makes it a protein model (no tokenizer style needed); BERT stays text
    assert models._kind_of(loaded.model.config, None) == models.ModelKind.PROTEIN_MLM
    assert models._kind_of(transformers.BertConfig(), None) == models.ModelKind.MASKED_LM


def _eager_maps(directory: str, sequence: str) -> np.ndarray:
    """[layer head L L] APC(sym α) from the model's own eager attention (output_attentions), residues only."""
    model = transformers.EsmcForMaskedLM.from_pretrained(directory, attn_implementation="eager").eval()
    tokens = transformers.AutoTokenizer.from_pretrained(directory)(sequence, return_tensors="pt")
    with torch.no_grad():
        attentions = model(**tokens, output_attentions=True).attentions
    alpha = torch.stack(attentions, dim=1)[0, :, :, 1:-1, 1:-1].double()  # [layer head L L], no <cls>, <eos>
    symmetric = alpha + alpha.transpose(-1, -2)
    rows = symmetric.sum(-1, keepdim=True)
    total = symmetric.sum((-1, -2), keepdim=True)
    return (symmetric - rows * symmetric.sum(-2, keepdim=True) / total).numpy()


def test_fit_then_predict_equals_the_regression_on_eager_attention(esmc, structures_dir, tmp_path, capsys):
    target = tmp_path / "esmc.json"
    assert main(["contacts", "--model", esmc, "--fit", str(structures_dir), "--regression", str(target)]) == 0
    assert "leave-one-out) regression:" in capsys.readouterr().out
    fitted = read_regression(target)
    assert fitted.weight.shape == (2, 4) and len(fitted.structures) == 3 and len(fitted.evaluation) == 6
    out = tmp_path / "contacts.npz"
    assert main(["contacts", "--model", esmc, "--regression", str(target), "--sequence", SEQUENCE,
                 "--out", str(out)]) == 0
    with np.load(out) as data:
        predicted = data["contacts_0"]  # [L L]
    expected = fitting.predict_map(_eager_maps(esmc, SEQUENCE), fitted.weight, fitted.bias)
    assert predicted.shape == (len(SEQUENCE), len(SEQUENCE))
    assert np.abs(predicted - expected).max() <= 1e-5
    assert predicted.std() > 1e-3  # not a constant map: the heads' weights matter
    assert json.loads(target.read_text())["model"] == esmc


def test_without_a_regression_esm_c_gets_the_per_head_analysis(esmc, structures_dir, tmp_path, capsys):
    heads = tmp_path / "heads.parquet"
    assert main(["contacts", "--model", esmc, "--structure", f"{structures_dir}/pdb1ubi.pdb", "--heads-out",
                 str(heads)]) == 0
    assert "no contact regression" in capsys.readouterr().out
    table = pd.read_parquet(heads)
    assert len(table) == 8 and table["p_at_L_long"].notna().all() and table["weight"].isna().all()


def test_the_apps_protein_view_runs_on_esm_c(esmc, structures_dir):
    """The dashboard's protein analysis (probe_app.protein_analysis): per-head leaderboard and one head's APC
    map, equal to the map from the model's own eager attention."""
    analysis = pytest.importorskip("probe_app.protein_analysis")
    loaded = models.load(esmc)
    with open(f"{structures_dir}/pdb1ubi.pdb", "rb") as handle:
        result = analysis.analyse(loaded, None, handle.read(), filename="pdb1ubi.pdb")
    assert len(result.heads) == 8 and np.isnan(result.predicted).all()
    assert "no contact regression" in result.note
    expected = _eager_maps(esmc, result.sequence)[1, 2]  # [L L] L1H2
    assert np.abs(analysis.head_map(loaded, result.sequence, 1, 2) - expected).max() <= 1e-5
