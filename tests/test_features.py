"""Vig et al.'s feature shares: a hand-computed planted case, and the shipped structures against an independent
implementation written here from salesforce/provis' definition (compute_edge_features.py, report_edge_features.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from probe import models
from probe.engine import AttentionBlock
from probe.proteins import features as vig
from probe.proteins.contacts import ContactSink
from probe.proteins.features import ResidueFeatures
from probe.proteins.sets import (
    ContactOptions,
    analyse_unit,
    bootstrap_means,
    chain_table,
    heads_table,
    structure_files,
    structure_units,
    summarize_heads,
)
from probe.proteins.structure import binding_sites, contact_map, read_structure, secondary_structure

SHARPNESS = 17.0  # a random tiny BERT with peaky attention: some heads above and some below 100 weights ≥ 0.3


def _block(layer, heads, alpha):
    n_tokens = alpha.shape[-1]
    return AttentionBlock(step=0, layer=layer, heads=heads, query_start=0, n_query=n_tokens, query_offset=0,
                          n_key=n_tokens, alpha=alpha.contiguous())


def _planted_sequence(length, spikes, rest):
    """α [1 head token token] over BOS + L residues + EOS: one head, the `spikes` (residue pairs) at 0.5, every
    other weight `rest` (well below θ)."""
    alpha = torch.full((1, 1, length + 2, length + 2), rest)
    for i, j in spikes:
        alpha[0, 0, i + 1, j + 1] = 0.5
    return alpha


def test_planted_shares_hand_computed_and_pooled():
    # sequence A, L = 12: contacts (0, 8) and (1, 9) (separation ≥ 6) and (2, 4) (too close: never a contact share)
    length_a = 12
    contacts_a = np.zeros((length_a, length_a), dtype=np.int8)
    for i, j in ((0, 8), (1, 9), (2, 4)):
        contacts_a[i, j] = contacts_a[j, i] = 1
    contacts_a[3, 10] = contacts_a[10, 3] = -1  # unknown: counted in n_high, never a contact
    binding_a = np.zeros(length_a, dtype=np.int8)
    binding_a[[8, 4]] = 1
    secondary_a = np.array(list("aaaabbbbcccc"))
    spikes_a = [(0, 8), (8, 0), (1, 9), (2, 4), (3, 10), (5, 5)]  # 6 high weights
    # sequence B, L = 8: contact (0, 7); 4 high weights, one on the contact
    length_b = 8
    contacts_b = np.zeros((length_b, length_b), dtype=np.int8)
    contacts_b[0, 7] = contacts_b[7, 0] = 1
    binding_b = np.full(length_b, 0, dtype=np.int8)
    binding_b[7] = -1  # not in the structure: unknown, never a binding site
    secondary_b = np.array(list("ccccaaaa"))
    spikes_b = [(0, 7), (1, 2), (2, 3), (6, 1)]
    tables, backgrounds = [], []
    for length, contacts, binding, secondary, spikes in ((length_a, contacts_a, binding_a, secondary_a, spikes_a),
                                                         (length_b, contacts_b, binding_b, secondary_b, spikes_b)):
        input_ids = torch.full((1, length + 2), 5)
        sink = ContactSink(torch.zeros(1, 1), 0.0, input_ids, torch.ones(1, length + 2, dtype=torch.long), None,
                           true_maps=[contacts], per_head=True,
                           features=[ResidueFeatures(binding=binding, secondary=secondary)], regression=False)
        sink.update(_block(0, (0,), _planted_sequence(length, spikes, rest=0.01)))
        table = sink.head_table(0, min_count=1)
        tables.append(table.assign(record=len(tables), id=f"s{len(tables)}"))
        backgrounds.append(sink.background_counts(0))

    a, b = tables[0].iloc[0], tables[1].iloc[0]
    # A: high weights on (0,8), (8,0), (1,9) are contacts (3 of 6); (2,4) is too close, (3,10) unknown
    assert (a["n_high"], a["n_contact"], a["contact_share"]) == (6, 3, 0.5)
    # binding "to": keys 8 (from (0,8)) and 4 (from (2,4)): 2 of 6; secondary of the attended residue
    assert (a["n_binding"], a["binding_share"]) == (2, pytest.approx(2 / 6))
    # keys 8, 0, 9, 4, 10, 5 -> c, a, c, b, c, b
    assert (a["n_helix"], a["n_strand"], a["n_coil"]) == (1, 2, 3)
    assert np.isnan(a["weight"]) and np.isnan(a["logit_share"])  # no regression
    # backgrounds: contact pairs with |i-j| >= 6 over L² (both directions); binding sites over L
    assert a["contact_background"] == pytest.approx(4 / 144) and a["binding_background"] == pytest.approx(2 / 12)
    assert a["helix_background"] == pytest.approx(4 / 12)
    assert (b["n_high"], b["n_contact"], b["n_binding"], b["n_helix"], b["n_coil"]) == (4, 1, 0, 1, 3)

    # pooled over the two sequences: Σ n_f / Σ n_high, not the mean of 0.5 and 0.25
    pooled = vig.pooled_shares(pd.concat(tables), min_count=1).iloc[0]
    assert pooled["n_high"] == 10 and pooled["contact_share"] == pytest.approx(4 / 10)
    assert pooled["binding_share"] == pytest.approx(2 / 10) and pooled["coil_share"] == pytest.approx(6 / 10)
    # the minimum count: 10 high weights < 11 -> left out
    assert np.isnan(vig.pooled_shares(pd.concat(tables), min_count=11).iloc[0]["contact_share"])
    assert np.isnan(tables[1].pipe(vig.shares, 5).iloc[0]["contact_share"])  # B alone: 4 < 5
    background = vig.pooled_backgrounds(pd.DataFrame(backgrounds))
    assert background["contact_background"] == pytest.approx((4 + 2) / (144 + 64))
    assert background["binding_background"] == pytest.approx((2 + 0) / (12 + 8))


def test_theta_is_inclusive_and_configurable():
    alpha = torch.tensor([[[0.3, 0.2999], [0.7, 0.0]]])  # [head L L]
    masks = {"binding": torch.tensor([True, False])}
    counts = vig.feature_counts(alpha, masks, min_attention=0.3)
    assert counts["n_high"].tolist() == [2] and counts["n_binding"].tolist() == [2]
    assert vig.feature_counts(alpha, masks, min_attention=0.25)["n_high"].tolist() == [3]


# ----------------------------------------------------------------------------------------------------------------
# The shipped structures: equality with an independent implementation of provis' loops
# ----------------------------------------------------------------------------------------------------------------


def _provis_reference(loaded, chains, min_attention=0.3):
    """provis' compute_mean_attention + report_edge_features, written out here: eager attention of each sequence,
    [CLS]/[SEP] rows and columns dropped; for every (from, to) pair, a mask of α ≥ θ over [layer head] is added to
    weight_total, and to each feature's weighted sum when the feature holds. Contact maps as TAPE builds them:
    -1 where |i − j| < 6 or a residue is unresolved."""
    n_layers, n_heads = loaded.n_layers, loaded.n_heads
    weight_total = torch.zeros(n_layers, n_heads, dtype=torch.double)
    sums = {name: torch.zeros(n_layers, n_heads, dtype=torch.double) for name in vig.FEATURES}
    counter = {"pairs": 0, "contacts": 0, "residues": 0, "binding": 0, "helix": 0, "strand": 0, "coil": 0}
    eager = type(loaded.model).from_pretrained(loaded.name, attn_implementation="eager").eval()
    for path, chain in chains:
        structure = read_structure(path, chain=chain)
        sequence = structure.sequence
        length = len(sequence)
        contact = contact_map(structure).astype(np.int64)  # the default virtual Cβ, 8 Å
        yind, xind = np.indices(contact.shape)
        contact[np.abs(yind - xind) < 6] = -1
        sites = binding_sites(structure)
        secondary = secondary_structure(structure)
        tokens = loaded.tokenizer(" ".join(sequence), return_tensors="pt")
        with torch.no_grad():
            attentions = eager(**tokens, output_attentions=True).attentions
        attns = torch.stack([attn[0, :, 1:-1, 1:-1] for attn in attentions])  # [layer head L L]
        weight_total += (attns >= min_attention).long().sum((2, 3))
        for to_index in range(length):
            for from_index in range(length):
                mask = attns[:, :, from_index, to_index] >= min_attention
                if contact[from_index, to_index] == 1:
                    sums["contact"] += mask
                if sites[to_index] == 1:
                    sums["binding"] += mask
                name = {"a": "helix", "b": "strand", "c": "coil"}.get(str(secondary[to_index]))
                if name:
                    sums[name] += mask
        counter["pairs"] += length * length
        counter["contacts"] += int((contact == 1).sum())
        counter["residues"] += length
        counter["binding"] += int((sites == 1).sum())
        for code, name in (("a", "helix"), ("b", "strand"), ("c", "coil")):
            counter[name] += int((secondary == code).sum())
    return weight_total, sums, counter


def test_shipped_structures_equal_the_provis_definition(tiny_dir, structures_dir):
    loaded = models.load(str(tiny_dir("protbert", sharpness=SHARPNESS)))
    units, skipped = structure_units(structure_files(structures_dir))
    assert not skipped and [unit.id for unit in units] == ["1aki_A", "pdb1ejg_A", "pdb1ubi_A"]
    outcomes = [analyse_unit(loaded, unit, ContactOptions()) for unit in units]
    summary = summarize_heads(heads_table(outcomes, 100), chain_table(outcomes), min_count=100).set_index("name")

    weight_total, sums, counter = _provis_reference(loaded, [(unit.structure, unit.chain) for unit in units])
    min_total = 100  # report_edge_features.py
    kept = 0
    for layer in range(loaded.n_layers):
        for head in range(loaded.n_heads):
            row = summary.loc[f"L{layer}H{head}"]
            total = float(weight_total[layer, head])
            assert row["n_high"] == total
            for name in vig.FEATURES:
                assert row[f"n_{name}"] == float(sums[name][layer, head])
                if total < min_total:
                    assert np.isnan(row[f"{name}_share"])
                else:
                    assert row[f"{name}_share"] == pytest.approx(float(sums[name][layer, head]) / total, abs=1e-12)
            kept += total >= min_total
    assert 0 < kept < loaded.n_layers * loaded.n_heads  # the planted sharpness gives both kinds of head
    assert (summary["contact_background"] == counter["contacts"] / counter["pairs"]).all()
    assert (summary["helix_background"] == counter["helix"] / counter["residues"]).all()
    assert (summary["n_proteins"] == 3).all()


def test_bootstrap_interval_of_the_mean_across_proteins():
    values = np.array([[0.1, np.nan, 0.5], [0.3, 0.2, 0.5], [0.5, np.nan, 0.5], [0.9, np.nan, 0.5]])
    mean, low, high = bootstrap_means(values, samples=4000, seed=1)
    assert mean[0] == pytest.approx(0.45) and mean[1] == pytest.approx(0.2) and mean[2] == 0.5
    assert 0.1 <= low[0] < 0.45 < high[0] <= 0.9  # a real interval around the mean
    assert np.isnan(low[1]) and np.isnan(high[1])  # one protein: no interval
    assert low[2] == high[2] == 0.5
    again = bootstrap_means(values, samples=4000, seed=1)
    np.testing.assert_array_equal(np.nan_to_num(again[1]), np.nan_to_num(low))  # seeded


def test_summary_means_are_over_proteins(tiny_dir, structures_dir):
    loaded = models.load(str(tiny_dir("protbert", sharpness=SHARPNESS)))
    units, _ = structure_units(structure_files(structures_dir))
    outcomes = [analyse_unit(loaded, unit, ContactOptions()) for unit in units]
    heads = heads_table(outcomes)
    summary = summarize_heads(heads, chain_table(outcomes)).set_index("name")
    per_protein = heads[heads["name"] == "L1H2"]["p_at_L_long"]
    assert summary.loc["L1H2", "p_at_L_long"] == pytest.approx(per_protein.mean())
    assert summary.loc["L1H2", "p_at_L_long_low"] <= per_protein.mean() <= summary.loc["L1H2", "p_at_L_long_high"]


def test_binding_site_share_on_a_structure_with_a_ligand(tiny_dir, tmp_path):
    from tests.test_structure import SEQ, atom_line, line_chain, write

    lines = line_chain(SEQ * 2)
    lines.append(atom_line(900, "C1", "LIG", "B", 1, (12.0, 0.0, 3.0), "C", record="HETATM"))  # beside residue 3
    path = write(tmp_path, "ligand.pdb", lines)
    loaded = models.load(str(tiny_dir("protbert", sharpness=SHARPNESS)))
    units, _ = structure_units([Path(path)])
    outcome = analyse_unit(loaded, units[0], ContactOptions(min_attention=0.3))
    assert outcome.row["ligands"] == "LIG" and outcome.row["n_binding_residues"] == 1
    heads = outcome.result.heads
    eager = type(loaded.model).from_pretrained(str(tiny_dir("protbert", sharpness=SHARPNESS)),
                                               attn_implementation="eager").eval()
    with torch.no_grad():
        attentions = eager(**loaded.tokenizer(" ".join(SEQ * 2), return_tensors="pt"), output_attentions=True)
    for row in heads.itertuples():
        alpha = attentions.attentions[row.layer][0, row.head, 1:-1, 1:-1]  # [L L]
        assert row.n_binding == int((alpha[:, 3] >= 0.3).sum())  # attention *to* the site, from every residue
        assert row.n_high == int((alpha >= 0.3).sum())
    assert os.path.exists(path)
