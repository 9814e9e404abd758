"""Vig et al.'s feature shares: a hand-computed planted case, and the shipped structures against an
independent implementation written here from salesforce/provis' definition (compute_edge_features.py,
report_edge_features.py)."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from probe import models
from probe.engine import AttentionBlock, DenseSink, capture
from probe.proteins import features as vig
from probe.proteins.features import ResidueFeatures
from probe.proteins.sets import (
    ContactOptions,
    analyse_unit,
    bootstrap_means,
    chain_table,
    heads_table,
    summarize_heads,
)
from probe.proteins.sink import ContactSink
from probe.proteins.structure import binding_sites, contact_map, read_structure
from probe.proteins.units import structure_files, structure_units

SHARPNESS = 17.0  # a random tiny BERT with peaky attention: some heads above and some below 100 weights ≥ 0.3


def _block(layer, heads, alpha):
    n_tokens = alpha.shape[-1]
    return AttentionBlock(step=0, layer=layer, heads=heads, query_start=0, n_query=n_tokens, query_offset=0,
                          n_key=n_tokens, alpha=alpha.contiguous())


def _planted_sequence(length, spikes, rest):
    """α [1 head token token] over BOS + L residues + EOS: one head, the `spikes` {residue pair: weight},
    every other weight `rest` (well below θ)."""
    alpha = torch.full((1, 1, length + 2, length + 2), rest)
    for (i, j), value in spikes.items():
        alpha[0, 0, i + 1, j + 1] = value
    return alpha


def _planted_tables():
    # sequence A, L = 12: contacts (0, 8) and (1, 9) (separation ≥ 6) and (2, 4) (too close: never a contact
    # share)
    length_a = 12
    contacts_a = np.zeros((length_a, length_a), dtype=np.int8)
    for i, j in ((0, 8), (1, 9), (2, 4)):
        contacts_a[i, j] = contacts_a[j, i] = 1
    contacts_a[3, 10] = contacts_a[10, 3] = -1  # unknown: in the denominator, never a contact
    binding_a = np.zeros(length_a, dtype=np.int8)
    binding_a[[8, 4]] = 1
    secondary_a = np.array(list("aaaabbbbttnn"))  # helix, strand, turn/bend, blank
    # (1, 9) sits exactly at θ (in float32, as provis compares): counted (≥), but not summed (strictly >)
    spikes_a = {(0, 8): 0.9, (8, 0): 0.4, (1, 9): 0.3, (2, 4): 0.6, (3, 10): 0.5, (5, 5): 0.35}
    # sequence B, L = 8: contact (0, 7)
    length_b = 8
    contacts_b = np.zeros((length_b, length_b), dtype=np.int8)
    contacts_b[0, 7] = contacts_b[7, 0] = 1
    binding_b = np.full(length_b, 0, dtype=np.int8)
    binding_b[7] = -1  # not in the structure: never a binding site
    secondary_b = np.array(list("ttnnaaaa"))
    spikes_b = {(0, 7): 0.8, (1, 2): 0.45, (2, 3): 0.3, (6, 1): 0.7}
    tables, backgrounds = [], []
    for length, contacts, binding, secondary, spikes in ((length_a, contacts_a, binding_a, secondary_a,
                                                          spikes_a),
                                                         (length_b, contacts_b, binding_b,
                                                          secondary_b, spikes_b)):
        input_ids = torch.full((1, length + 2), 5)
        sink = ContactSink(torch.zeros(1, 1), 0.0, input_ids, torch.ones(1, length + 2, dtype=torch.long),
                           None, true_maps=[contacts], per_head=True,
                           features=[ResidueFeatures(binding=binding, secondary=secondary)], regression=False)
        sink.update(_block(0, (0,), _planted_sequence(length, spikes, rest=0.01)))
        table = sink.head_table(0, min_count=1, min_total=0.0)
        tables.append(table.assign(record=len(tables), id=f"s{len(tables)}"))
        backgrounds.append(sink.background_counts(0))
    return tables, backgrounds


def test_planted_weighted_shares_hand_computed_and_pooled():
    tables, backgrounds = _planted_tables()
    a, b = tables[0].iloc[0], tables[1].iloc[0]
    f32 = lambda value: float(np.float32(value))  # noqa: E731  α is float32
    # A, weighted (α > θ summed): 0.9 + 0.4 + 0.6 + 0.5 + 0.35; contacts (0,8), (8,0); (1,9) at θ is not > θ
    assert a["w_high"] == pytest.approx(sum(map(f32, (0.9, 0.4, 0.6, 0.5, 0.35))), abs=1e-12)
    assert a["w_contact"] == pytest.approx(f32(0.9) + f32(0.4), abs=1e-12)
    assert a["contact_share"] == pytest.approx(a["w_contact"] / a["w_high"], abs=1e-15)
    assert a["contact_share"] == pytest.approx(1.3 / 2.75, abs=1e-7)
    # binding "to": keys 8 (from (0,8), 0.9) and 4 (from (2,4), 0.6)
    assert a["binding_share"] == pytest.approx(1.5 / 2.75, abs=1e-7)
    # keys 8, 0, 9, 4, 10, 5 -> t, a, t, b, n, b: helix 0.4; strand 0.6 + 0.35; turn/bend 0.9 (0.3 is not >
    # θ); blank 0.5 — provis' four classes, turn/bend and blank apart
    assert (a["helix_share"], a["strand_share"], a["turn_bend_share"], a["blank_share"]) == (
        pytest.approx(0.4 / 2.75, abs=1e-7), pytest.approx(0.95 / 2.75, abs=1e-7),
        pytest.approx(0.9 / 2.75, abs=1e-7), pytest.approx(0.5 / 2.75, abs=1e-7))
    # A, counts (α ≥ θ): 6 high weights, 3 on contacts; binding 2; helix 1, strand 2, turn/bend 2, blank 1
    assert (a["n_high"], a["n_contact"], a["contact_count_share"]) == (6, 3, 0.5)
    assert (a["n_binding"], a["n_helix"], a["n_strand"], a["n_turn_bend"], a["n_blank"]) == (2, 1, 2, 2, 1)
    assert np.isnan(a["weight"]) and np.isnan(a["logit_share"])  # no regression
    # backgrounds: contact pairs with |i-j| >= 6 (both directions) over the known pairs |i-j| >= 6 (provis: 42
    # pairs of L = 12 are 6 or more apart, (3, 10) and (10, 3) are unknown), and over all L² (ours); binding
    # sites over L
    assert a["contact_background"] == pytest.approx(
        4 / 40) and a["contact_background_all_pairs"] == pytest.approx(
        4 / 144)
    assert a["binding_background"] == pytest.approx(2 / 12) and a["helix_background"] == pytest.approx(4 / 12)
    assert a["turn_bend_background"] == pytest.approx(
        2 / 12) and a["blank_background"] == pytest.approx(2 / 12)
    # B: weighted 0.8 + 0.45 + 0.7 (0.3 left out); contact 0.8; binding 0 (key 7 unknown); helix 0.8 (key 7)
    assert b["w_high"] == pytest.approx(1.95,
        abs=1e-7) and b["contact_share"] == pytest.approx(0.8 / 1.95, abs=1e-7)
    assert b["binding_share"] == 0.0 and b["helix_share"] == pytest.approx(0.8 / 1.95, abs=1e-7)
    assert (b["n_high"], b["n_contact"], b["n_binding"], b["n_helix"], b["n_turn_bend"], b["n_blank"]) == (
        4, 1, 0, 1, 1, 2)

    # pooled over the two sequences: Σ w_f / Σ w_high, not the mean of the two shares
    both = pd.concat(tables)
    pooled = vig.pooled_shares(both, min_total=0.0, min_count=1).iloc[0]
    assert pooled["contact_share"] == pytest.approx(2.1 / 4.7, abs=1e-7)
    assert pooled["binding_share"] == pytest.approx(1.5 / 4.7, abs=1e-7)
    assert pooled["n_high"] == 10 and pooled["contact_count_share"] == pytest.approx(4 / 10)
    # the minimum total applies to Σ α (4.7), not to the count (10)
    assert vig.pooled_shares(both, min_total=4.6, min_count=11).iloc[0]["contact_share"] == \
        pytest.approx(2.1 / 4.7, abs=1e-7)
    assert np.isnan(vig.pooled_shares(both, min_total=4.8, min_count=1).iloc[0]["contact_share"])
    assert np.isnan(vig.pooled_shares(both, min_total=0.0, min_count=11).iloc[0]["contact_count_share"])
    # B alone: 1.95 < 2
    assert np.isnan(vig.shares(tables[1], min_total=2.0, min_count=1).iloc[0]["contact_share"])
    background = vig.pooled_backgrounds(pd.DataFrame(backgrounds))
    # L = 8: 6 pairs 6 or more apart
    assert background["contact_background"] == pytest.approx((4 + 2) / (40 + 6))
    assert background["contact_background_all_pairs"] == pytest.approx((4 + 2) / (144 + 64))
    assert background["binding_background"] == pytest.approx((2 + 0) / (12 + 8))


def test_theta_strict_for_sums_inclusive_for_counts_and_configurable():
    alpha = torch.tensor([[[0.3, 0.2999], [0.7, 0.0]]])  # [head L L] float32
    masks = {"binding": torch.tensor([True, False])}
    counts = vig.feature_counts(alpha, masks, min_attention=0.3)
    assert counts["n_high"].tolist() == [2] and counts["n_binding"].tolist() == [2]
    assert (counts["w_high"].tolist() == [pytest.approx(0.7)]
            and counts["w_binding"].tolist() == [pytest.approx(0.7)])
    lower = vig.feature_counts(alpha, masks, min_attention=0.25)
    assert lower["n_high"].tolist() == [3] and lower["w_high"].tolist() == [pytest.approx(1.2999, abs=1e-6)]


def test_unknown_property_is_nan_not_zero():
    """A sequence without binding data: NaN counts, share and background for binding; the other properties
    stay."""
    length = 10
    contacts = np.zeros((length, length), dtype=np.int8)
    contacts[0, 9] = contacts[9, 0] = 1
    input_ids = torch.full((1, length + 2), 5)
    sink = ContactSink(torch.zeros(1, 1), 0.0, input_ids, torch.ones(1, length + 2, dtype=torch.long), None,
                       true_maps=[contacts], per_head=True, features=[ResidueFeatures()], regression=False)
    sink.update(_block(0, (0,), _planted_sequence(length, {(0, 9): 0.9}, rest=0.01)))
    row = sink.head_table(0, min_count=1, min_total=0.0).iloc[0]
    assert row["contact_share"] == pytest.approx(1.0)
    for name in ("binding", "helix", "strand", "turn_bend", "blank"):
        assert (np.isnan(row[f"w_{name}"]) and np.isnan(row[f"{name}_share"])
                and np.isnan(row[f"{name}_background"]))
        assert np.isnan(row[f"{name}_count_share"])


def test_a_chain_without_turn_bend_and_blank_has_them_unknown():
    """P-SEA's coil ("c") merges turn/bend and blank: those two are NaN (unknown), helix and strand are
    counted; a DSSP chain of the same length has all four (positive control)."""
    length = 10
    spikes = {(0, 9): 0.9, (1, 2): 0.8}
    rows = {}
    for name, codes in (("p-sea", "aabbccccbb"), ("dssp", "aabbttnnbb")):
        input_ids = torch.full((1, length + 2), 5)
        sink = ContactSink(torch.zeros(1, 1), 0.0, input_ids, torch.ones(1, length + 2, dtype=torch.long),
                           None, per_head=True, features=[ResidueFeatures(secondary=np.array(list(codes)))],
                           regression=False)
        sink.update(_block(0, (0,), _planted_sequence(length, spikes, rest=0.01)))
        rows[name] = sink.head_table(0, min_count=1, min_total=0.0).iloc[0]
    merged, split = rows["p-sea"], rows["dssp"]
    assert (merged["n_strand"] == 2 and merged["n_helix"] == 0
            and merged["strand_background"] == pytest.approx(0.4))
    for column in ("n_turn_bend", "n_blank", "turn_bend_share", "blank_count_share", "blank_background"):
        assert np.isnan(merged[column])
    assert split["n_strand"] == 2 and split["n_turn_bend"] == 0 and split["n_blank"] == 0
    assert split["turn_bend_background"] == pytest.approx(
        0.2) and split["blank_background"] == pytest.approx(0.2)


# ------------------------------------------------------------------------------------------------------------
# The shipped structures: equality with provis' loops, written out here as provis writes them
# ------------------------------------------------------------------------------------------------------------


# TAPE's 8-state labels in NetSurfP-2.0's order (index 7, "C", is DSSP's blank); the 3-class label NetSurfP
# derives from them (0 helix: G H I; 1 strand: B E; 2 coil: S T C)
TAPE_SS8 = "GHIBESTC"
TAPE_SS3 = {"G": 0, "H": 0, "I": 0, "B": 1, "E": 1, "S": 2, "T": 2, "C": 2}


def _dssp_states(path, chain, monkeypatch):
    """DSSP's 8-state letters of one chain, as our reader computed them (captured from the reader's own
    call)."""
    from probe.proteins import structure as module

    captured = []
    real = module.dssp_states

    def capture_states(protein):
        captured.append(real(protein))
        return captured[-1]

    with monkeypatch.context() as patch:
        patch.setattr(module, "dssp_states", capture_states)
        structure = read_structure(path, chain=chain)
    assert structure.secondary_method == "dssp" and len(captured) == 1
    return structure, captured[0]


def _provis_inputs(path, chain, monkeypatch):
    """One item as provis builds it: the sequence, TAPE's contact map (-1 where |i − j| < 6 or unresolved),
    the site indicator (None: no ligand, so no binding item), and compute_edge_features.convert_item's ``ss4``
    secondary structure: ``[ss4_blank_index if ss8 == ss8_blank_index else ss3 ...]`` with ss8_blank_index 7,
    ss4_blank_index 3 (0 Helix, 1 Beta, 2 Turn/Bend, 3 Blank: report_edge_features' ``secondary_names``)."""
    structure, states = _dssp_states(path, chain, monkeypatch)
    contact = contact_map(structure).astype(np.int64)  # the default virtual Cβ, 8 Å; -1 where unresolved
    yind, xind = np.indices(contact.shape)
    contact[np.abs(yind - xind) < 6] = -1
    sites = binding_sites(structure) if structure.ligands else None
    ss8 = [TAPE_SS8.index("C" if state == " " else state) for state in states]  # DSSP's blank is TAPE's C
    ss3 = [TAPE_SS3[TAPE_SS8[index]] for index in ss8]
    secondary = [3 if eight == 7 else three for three, eight in zip(ss3, ss8, strict=True)]
    return {"primary": structure.sequence, "contact_map": contact, "site_indic": sites,
            "secondary": secondary}


def _provis_features(item, from_index, to_index):
    """features.py's ContactMapFeature, BindingSiteFeature and SecStructFeature (include_to) of one pair."""
    values = {}
    assert item["contact_map"][from_index, to_index] == item["contact_map"][to_index, from_index]
    if item["contact_map"][from_index, to_index] == 1:
        values["contact_map"] = 1
    if item["site_indic"] is not None and item["site_indic"][to_index] == 1:
        values["binding_site_to"] = 1
    values[f"sec_struct_to_{item['secondary'][to_index]}"] = 1
    return values


def _attention(loaded, item):
    """get_attention: α of every layer, [CLS]/[SEP] rows and columns removed, [layer head L L] float32."""
    tokens = loaded.tokenizer(" ".join(item["primary"]), return_tensors="pt")
    # every layer and head: the α the analysis saw (the engine equals eager: test_capture)
    dense = DenseSink()
    with capture(loaded.model, dense), torch.no_grad():
        loaded.model(**tokens)
    attns = list(dense.attention().unbind(1))  # per layer [batch head token token]
    # Remove attention from <CLS> (first) and <SEP> (last) token
    attns = [attn[:, :, 1:-1, 1:-1] for attn in attns]
    return torch.stack([attn.squeeze(0) for attn in attns])  # [layer head L L]


def _provis_first_version(loaded, items, min_attn):
    """34e6869's analyze_heads: ``attns = [(attn > min_attn) * attn ...]``, weight_total the sum of those
    weights from start_index 0, every (to_index, from_index) pair's features weighted by them. The one
    liberty: the float32 weights (compared with θ in float32, as there) are summed in float64, so the
    comparison can be to 1e-9."""
    feature_to_weighted_sum = defaultdict(
        lambda: torch.zeros((loaded.n_layers, loaded.n_heads), dtype=torch.double))
    weight_total = torch.zeros((loaded.n_layers, loaded.n_heads), dtype=torch.double)
    start_index = 0
    for item in items:
        attns = _attention(loaded, item)
        attns = (attns > min_attn) * attns.double()  # Set attention weights below min_attn to zero
        weight_total += attns[:, :, start_index:, start_index:].sum((2, 3))
        seq_len = attns.size(2)
        for to_index in range(start_index, seq_len):
            for from_index in range(start_index, seq_len):
                for feature_name, value in _provis_features(item, from_index, to_index).items():
                    feature_to_weighted_sum[feature_name] += attns[:, :, from_index, to_index] * value
    return feature_to_weighted_sum, weight_total


def _provis_iclr_version(loaded, items, min_attn):
    """946e9b4's compute_mean_attention: ``mask = attns >= min_attn``, weight_total the count of the mask,
    every (to_index, from_index) pair's features counted where the mask holds."""
    feature_to_weighted_sum = defaultdict(
        lambda: torch.zeros((loaded.n_layers, loaded.n_heads), dtype=torch.double))
    weight_total = torch.zeros((loaded.n_layers, loaded.n_heads), dtype=torch.double)
    for item in items:
        attns = _attention(loaded, item)
        mask = attns >= min_attn
        weight_total += mask.long().sum((2, 3))
        seq_len = attns.size(2)
        for to_index in range(seq_len):
            for from_index in range(seq_len):
                for feature_name, value in _provis_features(item, from_index, to_index).items():
                    mask = attns[:, :, from_index, to_index] >= min_attn
                    feature_to_weighted_sum[feature_name] += mask * value
    return feature_to_weighted_sum, weight_total


def _provis_contact_background(items):
    """report_top_heads.create_figure's background for contact_map: background.contact_map_distribution's
    Counter of the contact maps' values over every pair, num_pos_background / (num_pos_background +
    num_neg_background) — the -1 pairs (|i − j| < 6, unresolved) are in neither."""
    counts = Counter()
    for item in items:
        counts.update(item["contact_map"].flatten().tolist())
    num_pos_background, num_neg_background = counts[1], counts[0]
    return num_pos_background / (num_pos_background + num_neg_background)


_PROVIS_NAMES = {"contact": "contact_map", "binding": "binding_site_to", "helix": "sec_struct_to_0",
                 "strand": "sec_struct_to_1", "turn_bend": "sec_struct_to_2", "blank": "sec_struct_to_3"}


# Each version at the θ its own scripts ran (compute_*_features.sh: --min-attn .1 at 34e6869, .3 at 946e9b4);
# at SHARPNESS some heads of the random tiny BERT fall below min_total = 100 and some not, in both versions
@pytest.mark.parametrize(("version", "theta"), [("first", 0.1), ("iclr", 0.3)], ids=["weighted_34e6869",
                                                                                    "counts_946e9b4"])
def test_shipped_structures_equal_the_provis_recipe(tiny_dir, structures_dir, monkeypatch, version, theta):
    loaded = models.load(str(tiny_dir("protbert", sharpness=SHARPNESS)))
    units, skipped = structure_units(structure_files(structures_dir))
    assert not skipped and [unit.id for unit in units] == ["1aki_A", "pdb1ejg_A", "pdb1ubi_A"]
    outcomes = [analyse_unit(loaded, unit, ContactOptions(min_attention=theta)) for unit in units]
    min_total = 100  # report_edge_features.py
    summary = summarize_heads(heads_table(outcomes), chain_table(outcomes), min_count=min_total,
                              min_total=min_total).set_index("name")
    items = [_provis_inputs(unit.structure, unit.chain, monkeypatch) for unit in units]
    reference = _provis_first_version if version == "first" else _provis_iclr_version
    feature_to_weighted_sum, weight_total = reference(loaded, items, theta)
    total_column, suffix = ("w_high", "share") if version == "first" else ("n_high", "count_share")
    kept = 0
    for layer in range(loaded.n_layers):
        for head in range(loaded.n_heads):
            row = summary.loc[f"L{layer}H{head}"]
            total = float(weight_total[layer, head])
            assert row[total_column] == pytest.approx(total, abs=1e-9)
            exclude_mask = total < min_total  # report_edge_features: np.array(weight_total) < min_total
            kept += not exclude_mask
            for name, provis_name in _PROVIS_NAMES.items():
                if provis_name not in feature_to_weighted_sum:  # no item has the feature (no ligand anywhere)
                    assert np.isnan(row[f"{name}_{suffix}"]) and np.isnan(row[f"{name}_background"])
                    continue
                mean_by_head = float(feature_to_weighted_sum[provis_name][layer, head]) / total
                if exclude_mask:
                    assert np.isnan(row[f"{name}_{suffix}"])
                else:
                    assert row[f"{name}_{suffix}"] == pytest.approx(mean_by_head, abs=1e-9)
    assert 0 < kept < loaded.n_layers * loaded.n_heads  # the planted sharpness gives both kinds of head
    # all four classes occur on the shipped structures, turn/bend apart from blank
    assert all(f"sec_struct_to_{index}" in feature_to_weighted_sum for index in range(4))
    # the contact background as report_top_heads computes it (946e9b4; the first version has none)
    assert summary["contact_background"].eq(_provis_contact_background(items)).all()
    # ours, on the share's scale: contacts over every pair of the analysed sequences (provis' is ~1.1x it
    # here)
    contacts = sum(int((item["contact_map"] == 1).sum()) for item in items)
    pairs = sum(len(item["primary"]) ** 2 for item in items)
    assert summary["contact_background_all_pairs"].eq(contacts / pairs).all()
    assert summary["contact_background"].iloc[0] > 1.05 * summary["contact_background_all_pairs"].iloc[0]
    classes = Counter(index for item in items for index in item["secondary"])
    for name, index in (("helix", 0), ("strand", 1), ("turn_bend", 2), ("blank", 3)):
        assert summary[f"{name}_background"].eq(classes[index] / sum(classes.values())).all()
    assert summary["binding_background"].isna().all() and summary["binding_share"].isna().all()  # no ligand
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
    assert (summary.loc["L1H2", "p_at_L_long_low"] <= per_protein.mean()
            <= summary.loc["L1H2", "p_at_L_long_high"])


def test_binding_site_share_on_a_structure_with_a_ligand(tiny_dir, tmp_path):
    from tests.proteins.test_structure import SEQ, atom_line, line_chain, write

    lines = line_chain(SEQ * 2)
    # beside residue 3
    lines.append(atom_line(900, "C1", "LIG", "B", 1, (12.0, 0.0, 3.0), "C", record="HETATM"))
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
        strong = torch.where(alpha > 0.3, alpha, torch.zeros_like(alpha)).double()  # [L L]
        assert row.w_binding == pytest.approx(float(strong[:, 3].sum()), abs=1e-5)
        assert row.w_high == pytest.approx(float(strong.sum()), abs=1e-4)
    assert os.path.exists(path)
