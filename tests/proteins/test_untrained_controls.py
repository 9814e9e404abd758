"""Models that know no contacts get no significant contact head at the defaults (issue 39's acceptance): a
random-weight model of ESM-2 8M's shape and one of a 12-layer BERT shape with a protein vocabulary, on every
structure in tests/data; the untrained twins themselves and a shuffled-sequence run label nothing either; the
false-positive rate over ≥ 200 random-weight runs is at or below the nominal level (slow; the benchmark
benchmarks/contact_null_fpr.py measures it, docs/proteins.md gives the numbers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from probe.layers import attention_plan, set_engine
from probe.models import LoadedModel, ModelKind, residue_format
from probe.proteins.contacts import predict_contacts
from probe.proteins.structure import contact_map, read_structure
from probe.untrained import untrained_twins
from probe.zoo.tiny import esm_tokenizer, protbert_tokenizer

ROOT = Path(__file__).resolve().parents[2]
STRUCTURES = ("1aki.pdb", "pdb1ejg.pdb", "pdb1ubi.pdb")
RANGES = ("short", "medium", "long")


def _loaded(model, tokenizer, name: str, contact_head: bool) -> LoadedModel:
    model = model.eval()
    plan = attention_plan(model)
    set_engine(model, plan.engine)
    return LoadedModel(model, tokenizer, ModelKind.PROTEIN_MLM, name, name,
                       residue_format=residue_format(tokenizer), has_contact_head=contact_head, plan=plan,
                       engine=plan.engine)


def esm2_8m_random(seed: int = 0) -> LoadedModel:
    """facebook/esm2_t6_8M_UR50D's config (6 layers × 20 heads, width 320, 1026 positions, rotary), weights
    from EsmForMaskedLM's own initialiser under `seed`."""
    config = transformers.EsmConfig(
        vocab_size=33, hidden_size=320, num_hidden_layers=6, num_attention_heads=20, intermediate_size=1280,
        max_position_embeddings=1026, position_embedding_type="rotary", token_dropout=True,
        emb_layer_norm_before=False, layer_norm_eps=1e-5, pad_token_id=1, mask_token_id=32,
        is_folding_model=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = esm_tokenizer(scratch)
    return _loaded(transformers.EsmForMaskedLM(config), tokenizer, f"random-esm2-8M-seed{seed}", True)


def bert12_random(seed: int = 0, width: int = 768) -> LoadedModel:
    """A 12-layer BERT (12 heads, BERT-base's width 768 by default) with ProtBert's vocabulary, random
    weights."""
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = protbert_tokenizer(scratch)
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=width, num_hidden_layers=12,
                                     num_attention_heads=12, intermediate_size=4 * width,
                                     max_position_embeddings=1024, pad_token_id=0)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return _loaded(transformers.BertForMaskedLM(config), tokenizer, f"random-bert12-seed{seed}", False)


@pytest.fixture(scope="module")
def structures():
    return {name: read_structure(ROOT / "tests" / "data" / name) for name in STRUCTURES}


def _significant(loaded: LoadedModel, sequence: str, true_map: np.ndarray) -> list[str]:
    """The (head, range) pairs called significant at the defaults (3 untrained twins)."""
    heads = predict_contacts(loaded, sequence, true_map, per_head=True).heads
    assert heads["untrained_p99_L_long"].notna().all()  # the control ran
    return [f"{head} {name}" for name in RANGES
            for head in heads.loc[heads[f"significant_L_{name}"].fillna(False).astype(bool), "name"]]


@pytest.mark.parametrize("build", [
    esm2_8m_random,
    lambda seed: bert12_random(seed, width=192),  # 12 layers × 12 heads (head size 16): the default suite's
    pytest.param(bert12_random, marks=pytest.mark.slow),  # BERT-base's width 768 (a minute on 2 busy cores)
], ids=["esm2-8M-shape", "bert-12x12-width192", "bert-base-shape"])
def test_a_random_weight_model_gets_no_significant_contact_head(build, structures):
    loaded = build(0)
    assert loaded.residue_format == ("letters" if build is esm2_8m_random else "spaced")
    assert (loaded.n_layers, loaded.n_heads) == ((6, 20) if build is esm2_8m_random else (12, 12))
    for name, structure in structures.items():
        assert _significant(loaded, structure.sequence, contact_map(structure)) == [], name


def test_the_untrained_twins_and_a_shuffled_sequence_label_nothing(structures):
    """Negative controls: an untrained twin analysed as the model (against its own twins), and the random
    model reading each protein's sequence shuffled (scored against the real structure's contacts)."""
    loaded = esm2_8m_random(1)
    twin = untrained_twins(loaded, 1)[0]
    rng = np.random.default_rng(0)
    for name, structure in structures.items():
        true_map = contact_map(structure)
        assert _significant(twin, structure.sequence, true_map) == [], name
        shuffled = "".join(rng.permutation(list(structure.sequence)))
        assert _significant(loaded, shuffled, true_map) == [], name


@pytest.mark.slow
def test_false_positive_rate_over_210_random_weight_runs_is_at_most_nominal(tmp_path):
    """70 seeds × 3 structures of ESM-2 8M's shape at the defaults: the share of runs with any significant
    head is at most 0.05 (the nominal family-wise level), and the shift test alone (p_fwer ≤ 0.05 anywhere in
    a run) is consistent with its nominal 0.05 (its exact 95 % interval reaches 0.05)."""
    from scipy.stats import beta

    out = tmp_path / "fpr.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "contact_null_fpr.py"), "--arch", "esm",
                    "--seeds", "70", "--out", str(out)], check=True, env=env, cwd=ROOT, timeout=7200)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    runs = len(records)
    assert runs == 210
    default = sum(any(record["significant"].values()) for record in records)
    alone = sum(any(record["fwer"].values()) for record in records)
    assert default / runs <= 0.05
    low = beta.ppf(0.025, alone, runs - alone + 1) if alone else 0.0  # Clopper–Pearson lower bound
    assert low <= 0.05
