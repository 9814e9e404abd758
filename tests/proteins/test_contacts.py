"""Contact prediction: equality with HF `predict_contacts` (eager), the streaming sink, and hand-computed
precision."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import EsmForMaskedLM
from transformers.models.esm.modeling_esm import EsmContactPredictionHead

from probe import models
from probe.engine import AttentionBlock
from probe.errors import ProbeError
from probe.proteins.contacts import (
    head_attention_map,
    predict_contacts,
    predict_contacts_batch,
    predict_contacts_windowed,
)
from probe.proteins.precision import apc, precision_by_range, precision_columns, symmetrize
from probe.proteins.sink import ContactSink, contact_regression

SEQUENCES = ["MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", "GAVLIMFWPSTC", "MQIFVKTLTGKTITLEVEPSDTIENVK"]


def _scale_regression(model: torch.nn.Module, factor: float, zero_every: int = 0) -> None:
    """Make the random contact head strong enough that probabilities spread over (0, 1) (a sensitive
    comparison)."""
    regression = model.esm.contact_head.regression
    with torch.no_grad():
        regression.weight.mul_(factor)
        if zero_every:
            regression.weight[0, ::zero_every] = 0.0


@pytest.fixture()
def esm_pair(tiny_dir):
    """(ours: probe-loaded sdpa model, reference: the same checkpoint on eager attention), same scaled
    regression."""
    directory = tiny_dir("esm", seed=3, num_hidden_layers=3)
    loaded = models.load(str(directory))
    reference = EsmForMaskedLM.from_pretrained(str(directory), attn_implementation="eager").eval()
    assert loaded.model.config._attn_implementation == "sdpa"
    for model in (loaded.model, reference):
        _scale_regression(model, 300.0)
    return loaded, reference


def _reference(reference: EsmForMaskedLM, loaded, sequences: list[str]) -> torch.Tensor:
    encoded = loaded.tokenizer(sequences, return_tensors="pt", padding=True)
    with torch.no_grad():
        return reference.predict_contacts(encoded["input_ids"], encoded["attention_mask"])  # [batch T-2 T-2]


def test_contacts_equal_hf_predict_contacts_eager(esm_pair):
    loaded, reference = esm_pair
    for sequence in SEQUENCES:
        expected = _reference(reference, loaded, [sequence])[0]  # [L L]
        ours = predict_contacts(loaded, sequence).contacts
        assert ours.shape == (len(sequence), len(sequence))
        assert float(expected.std()) > 0.05  # a spread map: a wrong APC or a missed EOS would show
        np.testing.assert_allclose(ours, expected.numpy(), atol=1e-5, rtol=0)


def test_contacts_equal_hf_on_padded_batch_of_unequal_lengths(esm_pair):
    loaded, reference = esm_pair
    expected = _reference(reference, loaded, SEQUENCES)  # [batch T-2 T-2], padded to the longest
    results = predict_contacts_batch(loaded, SEQUENCES)
    for b, (sequence, result) in enumerate(zip(SEQUENCES, results, strict=True)):
        length = len(sequence)
        assert result.contacts.shape == (length, length)  # cropped to its own length
        np.testing.assert_allclose(result.contacts, expected[b, :length, :length].numpy(), atol=1e-5, rtol=0)


def test_zero_weight_heads_are_skipped_and_result_unchanged(esm_pair):
    loaded, reference = esm_pair
    for model in (loaded.model, reference):
        _scale_regression(model, 1.0, zero_every=2)
    weight, bias = contact_regression(loaded.model)
    encoded = loaded.tokenizer([SEQUENCES[0]], return_tensors="pt")
    sink = ContactSink(weight, bias, encoded["input_ids"], encoded["attention_mask"], eos_id=2)
    wanted = list(sink.heads_for(0, loaded.n_heads))
    assert wanted == [head for head in range(loaded.n_heads)
                      if weight[0, head] != 0] and len(wanted) < loaded.n_heads
    expected = _reference(reference, loaded, [SEQUENCES[0]])[0]
    np.testing.assert_allclose(predict_contacts(loaded, SEQUENCES[0]).contacts, expected.numpy(),
                               atol=1e-5, rtol=0)


def test_all_zero_regression_gives_the_bias_alone(esm_pair):
    loaded, reference = esm_pair
    for model in (loaded.model, reference):
        _scale_regression(model, 0.0)
    expected = _reference(reference, loaded, [SEQUENCES[1]])[0]
    np.testing.assert_allclose(predict_contacts(loaded, SEQUENCES[1]).contacts, expected.numpy(), atol=1e-6)


def test_sink_memory_does_not_grow_with_layers_times_heads(tiny_dir):
    """The sink keeps one [L L] accumulator per sequence and [layer head L] sums, never [layer head L L]."""
    sequence = SEQUENCES[0]
    length = len(sequence)
    for layers, heads in ((2, 4), (6, 8)):
        loaded = models.load(str(tiny_dir("esm", num_hidden_layers=layers, num_attention_heads=heads)))
        weight, bias = contact_regression(loaded.model)
        encoded = loaded.tokenizer([sequence], return_tensors="pt")
        sink = ContactSink(weight, bias, encoded["input_ids"], encoded["attention_mask"], eos_id=2)
        from probe.engine import capture

        with capture(loaded.model, sink, block_bytes=4 * heads * (length + 2) * 5), torch.inference_mode():
            loaded.model(**encoded)  # about 5 query rows per block: many blocks per layer
        state = sink.sequences[0]
        assert state.weighted.shape == (length, length)
        assert state.layer_alpha is None
        kept = sum(t.numel() for t in (state.weighted, state.row_sums, state.col_sums))
        assert kept == length * length + 2 * layers * heads * length


def _block(layer: int, heads: tuple[int, ...], start: int, alpha: torch.Tensor) -> AttentionBlock:
    """An engine block of a non-causal forward over alpha.shape[-1] tokens (query rows start .. start +
    rows)."""
    n_tokens = alpha.shape[-1]
    return AttentionBlock(step=0, layer=layer, heads=heads, query_start=start, n_query=n_tokens,
                          query_offset=0, n_key=n_tokens, alpha=alpha.contiguous())


def test_eos_inside_the_block_is_zeroed_like_the_reference():
    """A sequence containing an EOS token: the sink zeroes its row and column exactly as HF's contact head
    does."""
    generator = torch.Generator().manual_seed(0)
    layers, heads, tokens = 2, 3, 12
    alpha = torch.rand(2, layers, heads, tokens, tokens, generator=generator)  # [batch layer head query key]
    alpha = alpha / alpha.sum(-1, keepdim=True)
    input_ids = torch.randint(4, 20, (2, tokens), generator=generator)
    input_ids[:, 0], input_ids[0, -1] = 0, 2
    input_ids[1, 5], input_ids[1, 8], input_ids[1, 9:] = 2, 2, 1  # an EOS inside, then EOS + padding
    attention_mask = (input_ids != 1).long()
    alpha = alpha * attention_mask[:, None, None, None, :] * attention_mask[:, None, None, :, None]
    reference_head = EsmContactPredictionHead(layers * heads, eos_idx=2)
    with torch.no_grad():
        reference_head.regression.weight.normal_(0, 3.0, generator=generator)
        expected = reference_head(input_ids, alpha)  # [batch T-2 T-2]
    weight = reference_head.regression.weight.detach().reshape(layers, heads)
    sink = ContactSink(weight, float(reference_head.regression.bias.detach()), input_ids,
                       attention_mask, eos_id=2)
    for layer in range(layers):
        for start in range(0, tokens, 5):  # blocks of 5 query rows
            block = alpha[:, layer, :, start:start + 5]  # [batch head rows key]
            sink.update(_block(layer, tuple(range(heads)), start, block))
    for b in range(2):
        length = int(attention_mask[b].sum()) - 2
        np.testing.assert_allclose(sink.contacts(b).numpy(), expected[b, :length, :length].numpy(), atol=1e-6)


def test_head_attention_map_equals_apc_of_eager_attention(esm_pair):
    loaded, reference = esm_pair
    sequence = SEQUENCES[2]
    encoded = loaded.tokenizer([sequence], return_tensors="pt")
    with torch.no_grad():
        attentions = reference(**encoded, output_attentions=True).attentions
    alpha = attentions[1][0, 2, 1:-1, 1:-1]  # [L L] layer 1 head 2, residues only
    expected = apc(symmetrize(alpha))
    np.testing.assert_allclose(head_attention_map(loaded, sequence, 1, 2), expected.numpy(), atol=1e-5)
    with pytest.raises(ProbeError, match="does not exist"):
        head_attention_map(loaded, sequence, 9, 0)


# ------------------------------------------------------------------------------------------------------------
# Precision by range, per-head statistics: hand-computed values
# ------------------------------------------------------------------------------------------------------------


def test_precision_by_range_hand_computed():
    length = 30
    true_map = np.zeros((length, length), dtype=np.int8)
    scores = np.zeros((length, length))
    # short range (6-11): pairs (0,6) .. (9,15) get descending scores; contacts at (0,6), (2,8), (5,11)
    for rank, i in enumerate(range(10)):
        scores[i, i + 6] = scores[i + 6, i] = 10.0 - rank
    for i in (0, 2, 5):
        true_map[i, i + 6] = true_map[i + 6, i] = 1
    # long range: the best-scoring long pair is a contact, the second is unknown (skipped), the third is not
    scores[0, 29], scores[1, 29], scores[2, 28] = 5.0, 4.0, 3.0
    true_map[0, 29] = 1
    true_map[1, 29] = -1
    result = precision_by_range(scores, true_map)
    assert list(result) == precision_columns()
    # L/5 = 6 top short pairs: (0,6)..(5,11) hold 3 contacts; L/2 = 15: 3 of 15; L = 30: 3 of 30
    assert result["p_at_L5_short"] == pytest.approx(3 / 6)
    assert result["p_at_L2_short"] == pytest.approx(3 / 15)
    assert result["p_at_L_short"] == pytest.approx(3 / 30)
    assert result["p_at_L5_medium"] == 0.0  # no medium contacts at all
    # long: (0,29) first, (1,29) unknown, so the 6 taken are (0,29), (2,28) and 4 zero-score pairs: 1 contact
    assert result["p_at_L5_long"] == pytest.approx(1 / 6)
    # 21 long pairs in total, 20 known: L/2 = 15 of them, L = 30 capped at the 20 known
    assert result["p_at_L2_long"] == pytest.approx(1 / 15)
    assert result["p_at_L_long"] == pytest.approx(1 / 20)


def _planted_case():
    """Two heads over L = 30 residues: head 0 spikes on 6 long-range pairs (4 of them contacts), head 1 is
    uniform except one strong weight; α includes BOS (token 0) and EOS (token 31)."""
    length, tokens = 30, 32
    true_map = np.zeros((length, length), dtype=np.int8)
    position = np.arange(length)
    separation = np.abs(position[:, None] - position[None, :])
    true_map[(separation >= 6) & (separation <= 11)] = 1  # every short-range pair is a contact
    spikes = [(0, 24), (1, 25), (2, 27), (3, 29), (4, 28), (5, 29)]  # residue pairs, all long range
    for i, j in spikes[:4]:
        true_map[i, j] = true_map[j, i] = 1
    alpha = torch.full((1, 2, tokens, tokens), 0.5 / tokens)  # [batch head query key]
    for i, j in spikes:
        alpha[0, 0, i + 1, j + 1] = 0.5  # token = residue + 1
    alpha[0, 1, 20 + 1, 5 + 1] = 0.45  # head 1: one weight >= 0.3, on a medium-range pair (never a contact)
    return true_map, alpha, spikes


def test_per_head_statistics_hand_computed():
    true_map, alpha, spikes = _planted_case()
    tokens = alpha.shape[-1]
    input_ids = torch.full((1, tokens), 5)
    input_ids[0, 0], input_ids[0, -1] = 0, 2
    weight = torch.tensor([[2.0, -1.0]])  # [layer head]
    sink = ContactSink(weight, 0.1, input_ids, torch.ones(1, tokens, dtype=torch.long), eos_id=2,
                       true_maps=[true_map], per_head=True)
    for start in range(0, tokens, 7):  # streamed in blocks of 7 query rows
        sink.update(_block(0, (0, 1), start, alpha[:, :, start:start + 7]))
    table = sink.head_table(0).set_index("name")
    spiky = table.loc["L0H0"]
    # long range: the 6 spikes rank first (4 contacts); there are no other long contacts
    assert spiky["p_at_L5_long"] == pytest.approx(4 / 6)
    assert spiky["p_at_L2_long"] == pytest.approx(4 / 15)
    long_pairs = sum(30 - s for s in range(24, 30))
    assert spiky["p_at_L_long"] == pytest.approx(4 / min(30, long_pairs))
    assert spiky["p_at_L_short"] == 1.0 and spiky["p_at_L_medium"] == 0.0  # all / no pairs are contacts there
    # provis: head 0 has 6 weights >= 0.3 on pairs |i-j| >= 6, 4 on contacts; head 1 one weight, not a contact
    assert spiky["far_high_count"] == 6 and spiky["far_contact_share"] == pytest.approx(4 / 6)
    assert table.loc["L0H1", "far_high_count"] == 1 and table.loc["L0H1", "far_contact_share"] == 0.0
    known = np.abs(np.subtract.outer(np.arange(30), np.arange(30))) >= 6
    assert spiky["far_background"] == pytest.approx(true_map[known].sum() / known.sum())
    # weights and logit shares: |w|·Σ|APC(sym α)| over pairs |i-j| >= 6, normalised over the heads
    residues = alpha[0, :, 1:-1, 1:-1]  # [head L L]
    mass = [abs(w) * float(apc(symmetrize(residues[h])).abs()[torch.as_tensor(known)].sum())
            for h, w in enumerate((2.0, -1.0))]
    assert spiky["weight"] == 2.0 and table.loc["L0H1", "weight"] == -1.0
    assert spiky["logit_share"] == pytest.approx(mass[0] / sum(mass))
    assert table["logit_share"].sum() == pytest.approx(1.0)
    # the sink's logits are b + Σ w·APC(sym α) of the residue block
    expected = 0.1 + 2.0 * apc(symmetrize(residues[0])) - 1.0 * apc(symmetrize(residues[1]))
    torch.testing.assert_close(sink.logits(0), expected, atol=1e-6, rtol=0)


def test_predict_contacts_with_true_map_gives_head_table_and_precision(esm_pair):
    loaded, _ = esm_pair
    sequence = SEQUENCES[0]
    length = len(sequence)
    true_map = (np.abs(np.subtract.outer(np.arange(length), np.arange(length))) % 7 == 0).astype(np.int8)
    result = predict_contacts(loaded, sequence, true_map=true_map)
    assert result.precision == precision_by_range(result.contacts, true_map)
    assert len(result.heads) == loaded.n_layers * loaded.n_heads
    assert list(result.heads["name"][:2]) == ["L0H0", "L0H1"]
    head = result.heads.iloc[5]
    layer, index = int(head["layer"]), int(head["head"])
    expected = precision_by_range(head_attention_map(loaded, sequence, layer, index), true_map)
    for column in precision_columns():
        assert head[column] == pytest.approx(expected[column])


# ------------------------------------------------------------------------------------------------------------
# Input validation and the window mode
# ------------------------------------------------------------------------------------------------------------


def test_bad_letters_rejected_with_positions_lowercase_accepted(esm_pair):
    loaded, _ = esm_pair
    with pytest.raises(ProbeError, match="'J' at 3"):
        predict_contacts(loaded, "MKJAY")
    upper = predict_contacts(loaded, SEQUENCES[1]).contacts
    np.testing.assert_array_equal(predict_contacts(loaded, SEQUENCES[1].lower()).contacts, upper)


def test_too_long_sequence_errors_and_window_mode_covers_it(tiny_dir):
    loaded = models.load(str(tiny_dir("esm", max_position_embeddings=22)))  # 20 tokens: 18 residues
    sequence = SEQUENCES[0][:25]
    with pytest.raises(ProbeError, match="--window"):
        predict_contacts(loaded, sequence)
    result = predict_contacts_windowed(loaded, sequence, window=18, stride=7)  # windows at 0 and 7
    first = predict_contacts(loaded, sequence[:18]).contacts
    second = predict_contacts(loaded, sequence[7:]).contacts
    np.testing.assert_allclose(result.contacts[:7, :7], first[:7, :7], atol=1e-7)  # only in window 0
    np.testing.assert_allclose(result.contacts[18:, 18:], second[11:, 11:], atol=1e-7)  # only in window 1
    np.testing.assert_allclose(result.contacts[8, 12], (first[8, 12] + second[1, 5]) / 2, atol=1e-7)  # both
    assert np.isnan(result.contacts[0, 24])  # no window holds both
    short = SEQUENCES[1]
    np.testing.assert_allclose(predict_contacts_windowed(loaded, short, window=18).contacts,
                               predict_contacts(loaded, short).contacts, atol=1e-7)
    with pytest.raises(ProbeError, match="between 1 and 18"):
        predict_contacts_windowed(loaded, sequence, window=40)


def test_non_esm_model_is_refused(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")))
    with pytest.raises(ProbeError, match="ESM"):
        predict_contacts(loaded, "MKT")


# ------------------------------------------------------------------------------------------------------------
# Protein models without a contact regression (ProtBert-style BERT, ProtT5 encoder)
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["protbert", "prott5"])
def test_per_head_analysis_without_a_contact_regression(tiny_dir, arch):
    loaded = models.load(str(tiny_dir(arch)))
    assert not loaded.has_contact_head
    sequence = SEQUENCES[0]
    length = len(sequence)
    true_map = (np.abs(np.subtract.outer(np.arange(length), np.arange(length))) % 7 == 0).astype(np.int8)
    result = predict_contacts(loaded, sequence, true_map=true_map)
    assert result.contacts is None and result.precision is None
    assert len(result.heads) == loaded.n_layers * loaded.n_heads
    assert result.heads["weight"].isna().all() and result.heads["logit_share"].isna().all()
    # each head's precision is that of its own APC map, taken from eager attention over the residue tokens
    eager = type(loaded.model).from_pretrained(str(tiny_dir(arch)), attn_implementation="eager").eval()
    inputs = models.tokenize_protein(loaded, sequence)
    with torch.no_grad():
        attentions = eager(**inputs, output_attentions=True).attentions
    start = loaded.residue_offset
    for row in result.heads.itertuples():
        alpha = attentions[row.layer][0, row.head, start:start + length, start:start + length]  # [L L]
        expected = precision_by_range(apc(symmetrize(alpha)).numpy(), true_map)
        assert row.p_at_L_long == pytest.approx(expected["p_at_L_long"], abs=1e-9)
        assert row.p_at_L5_short == pytest.approx(expected["p_at_L5_short"], abs=1e-9)
        np.testing.assert_allclose(head_attention_map(loaded, sequence, row.layer, row.head),
                                   apc(symmetrize(alpha)).numpy(), atol=1e-5)
    # without a true map the per-head table still comes (n_high counts), precision NaN
    bare = predict_contacts(loaded, sequence)
    assert bare.contacts is None and bare.heads["p_at_L_long"].isna().all()
    with pytest.raises(ProbeError, match="contact regression"):
        predict_contacts_windowed(loaded, sequence, window=10)


def test_padded_batch_of_a_spaced_model_equals_one_by_one(tiny_dir):
    loaded = models.load(str(tiny_dir("protbert", sharpness=17.0)))
    maps = [(np.abs(np.subtract.outer(np.arange(len(s)), np.arange(len(s)))) % 5 == 0).astype(np.int8)
            for s in SEQUENCES]
    batch = predict_contacts_batch(loaded, SEQUENCES, maps)
    for sequence, true_map, result in zip(SEQUENCES, maps, batch, strict=True):
        alone = predict_contacts(loaded, sequence, true_map)
        pd.testing.assert_frame_equal(result.heads, alone.heads, atol=1e-6)


# ------------------------------------------------------------------------------------------------------------
# The exchangeable (hypergeometric) p-values, pooled over proteins, Benjamini–Hochberg; the set summary
# ------------------------------------------------------------------------------------------------------------


def test_hypergeometric_and_pooled_p_values_by_enumeration():
    from itertools import combinations, product
    from math import comb

    from probe.proteins.significance import benjamini_hochberg, hypergeometric_p_value, pooled_p_value

    # N = 10 known pairs, C = 3 contacts, k = 4 drawn, h = 2 hits: P(X >= 2) by counting subsets
    expected = sum(comb(3, x) * comb(7, 4 - x) for x in (2, 3)) / comb(10, 4)
    assert hypergeometric_p_value(2, 10, 3, 4) == pytest.approx(expected, abs=1e-14)
    assert hypergeometric_p_value(0, 10, 3, 4) == pytest.approx(1.0)
    assert np.isnan(hypergeometric_p_value(0, 0, 0, 0))
    # two proteins (N, C, k) = (6, 2, 2) and (5, 1, 3), pooled hits 2: enumerate every pair of draws
    draws = [list(combinations(range(6), 2)), list(combinations(range(5), 3))]
    at_least = sum((sum(i < 2 for i in a) + sum(i < 1 for i in b)) >= 2 for a, b in product(*draws))
    assert pooled_p_value([1, 1], [6, 5], [2, 1], [2, 3]) == pytest.approx(at_least / (15 * 10), abs=1e-14)
    # BH by hand: p = (0.01, 0.04, 0.03, nan, 0.5): sorted 0.01, 0.03, 0.04, 0.5 with m = 4
    q = benjamini_hochberg([0.01, 0.04, 0.03, np.nan, 0.5])
    np.testing.assert_allclose(q[[0, 1, 2, 4]], [0.04, 0.04 * 4 / 3, 0.04 * 4 / 3, 0.5], rtol=1e-12)
    assert np.isnan(q[3])


def test_random_heads_are_not_above_the_base_rate(tiny_dir, structures_dir):
    from probe.proteins.sets import (
        ContactOptions,
        analyse_unit,
        chain_table,
        control_table,
        heads_table,
        summarize_heads,
    )
    from probe.proteins.significance import best_significant
    from probe.proteins.units import structure_files, structure_units

    loaded = models.load(str(tiny_dir("protbert")))  # random weights: no head knows contacts
    units, _ = structure_units(structure_files(structures_dir))
    outcomes = [analyse_unit(loaded, unit, ContactOptions()) for unit in units]
    heads = heads_table(outcomes)
    control = control_table(outcomes)  # 3 twins × 8 heads per protein
    assert len(control) == 3 * 8 * len(units) and set(control["seed"]) == {10_000, 10_001, 10_002}
    summary = summarize_heads(heads, chain_table(outcomes), control=control)
    for name in ("short", "medium", "long"):
        assert not summary[f"significant_L_{name}"].fillna(False).any()
        assert best_significant(summary, name) is None
        assert summary[f"p_value_L_{name}"].between(0, 1).all()
        assert summary[f"p_fwer_L_{name}"].between(0, 1).all()
        assert f"p_exchangeable_L_{name}" not in summary and f"q_exchangeable_L_{name}" not in heads
        assert summary[f"untrained_p99_L_{name}"].notna().all()
        # the pooled base rate is what a random ranking gets: Σ k·C/N over Σ k
        row = heads[heads["name"] == "L0H0"]
        expected = (row[f"top_L_{name}"] * row[f"n_true_{name}"] / row[f"n_known_{name}"]).sum() / row[
            f"top_L_{name}"].sum()
        assert summary.loc[0, f"base_rate_{name}"] == pytest.approx(expected)
        pooled = summary[f"pooled_p_at_L_{name}"] / summary[f"base_rate_{name}"]
        np.testing.assert_allclose(summary[f"enrichment_L_{name}"], pooled)
    # per protein: the hits behind P@L are P@L's own, and enrichment = P@L / base rate
    for name in ("short", "medium", "long"):
        np.testing.assert_allclose(heads[f"hits_L_{name}"] / heads[f"top_L_{name}"], heads[f"p_at_L_{name}"])
    first = heads.iloc[0]
    assert first["enrichment_L_long"] == pytest.approx(first["p_at_L_long"] / first["base_rate_long"])
    _check_the_retired_hypergeometric_columns_on_request(outcomes, heads, chain_table(outcomes), summary,
                                                         control)


def _check_the_retired_hypergeometric_columns_on_request(outcomes, heads, chains, summary, control):
    """exchangeable=True (probe contacts --hypergeometric-exchangeable-pairs) adds p_exchangeable /
    q_exchangeable at the end and changes nothing else: per protein the hypergeometric tail of the head's
    hits and BH over that protein's heads; pooled, the exact sum of independent hypergeometrics."""
    from scipy.stats import hypergeom

    from probe.proteins.sets import EXCHANGEABLE_SUMMARY_COLUMNS, heads_table, summarize_heads
    from probe.proteins.significance import benjamini_hochberg, pooled_p_value

    wide = heads_table(outcomes, exchangeable=True)
    pd.testing.assert_frame_equal(wide[heads.columns], heads)
    full = summarize_heads(heads, chains, control=control, exchangeable=True)
    assert list(full.columns) == list(summary.columns) + list(EXCHANGEABLE_SUMMARY_COLUMNS)
    pd.testing.assert_frame_equal(full[summary.columns], summary)
    for name in ("short", "medium", "long"):
        expected = hypergeom.sf(heads[f"hits_L_{name}"] - 1, heads[f"n_known_{name}"],
                                heads[f"n_true_{name}"], heads[f"top_L_{name}"])
        np.testing.assert_allclose(wide[f"p_exchangeable_L_{name}"], expected, rtol=1e-12)
        for _, rows in wide.groupby("record"):  # BH over one protein's heads, never across proteins
            np.testing.assert_allclose(rows[f"q_exchangeable_L_{name}"],
                                       benjamini_hochberg(rows[f"p_exchangeable_L_{name}"].to_numpy()))
        first = heads[heads["name"] == "L0H0"]
        pooled = pooled_p_value(*(first[f"{c}_{name}"].astype(int) for c in ("hits_L", "n_known", "n_true",
                                                                             "top_L")))
        assert full.loc[0, f"p_exchangeable_L_{name}"] == pytest.approx(pooled, abs=1e-14)
        assert full[f"q_exchangeable_L_{name}"].between(0, 1).all()


def test_the_hypergeometric_columns_only_with_their_flag(tiny_dir, structures_dir, tmp_path):
    """probe contacts writes no p_exchangeable / q_exchangeable unless --hypergeometric-exchangeable-pairs
    asks; with it the per-head table carries them and is otherwise the same."""
    from probe.cli import main

    model, structure = str(tiny_dir("protbert")), str(Path(structures_dir) / "pdb1ejg.pdb")
    plain, wide = tmp_path / "plain.csv", tmp_path / "wide.csv"
    for out, extra in ((plain, []), (wide, ["--hypergeometric-exchangeable-pairs"])):
        assert main(["contacts", "--model", model, "--structure", structure, "--heads-out", str(out),
                     "--control", "none", *extra]) == 0
    plain, wide = pd.read_csv(plain), pd.read_csv(wide)
    assert not plain.filter(like="exchangeable").columns.any()
    added = [f"{c}_L_{r}" for r in ("short", "medium", "long") for c in ("p_exchangeable", "q_exchangeable")]
    assert list(wide.columns) == list(plain.columns) + added
    pd.testing.assert_frame_equal(wide[plain.columns], plain)
    assert wide[added].notna().all().all()


def test_model_level_planted_contact_head_is_significant(tiny_dir, structures_dir):
    """A real BERT forward whose L0H0 is wired to attend to 1AKI's true contacts: one-hot position embeddings
    (word and token-type embeddings zeroed), W_Q = I and W_K = s·A on that head, with A[i+1, j+1] = 1 for the
    contacts
    |i − j| ≥ 6, so its logits are ≈ s·512/16·A. The other heads keep their random weights."""
    from probe.proteins.sets import ContactOptions, analyse_unit
    from probe.proteins.significance import best_significant
    from probe.proteins.structure import contact_map, read_structure
    from probe.proteins.units import structure_units

    directory = tiny_dir("protbert", hidden_size=512, num_attention_heads=2, intermediate_size=64)
    loaded = models.load(str(directory))
    path = f"{structures_dir}/1aki.pdb"
    true_map = contact_map(read_structure(path))
    length = true_map.shape[0]
    separation = np.abs(np.subtract.outer(np.arange(length), np.arange(length)))
    planted = torch.zeros(256, 256)
    planted[1:length + 1, 1:length + 1] = torch.as_tensor(
        ((true_map == 1) & (separation >= 6)).astype(np.float32))
    bert = loaded.model.bert
    attention = bert.encoder.layer[0].attention.self
    with torch.no_grad():
        bert.embeddings.word_embeddings.weight.zero_()
        bert.embeddings.token_type_embeddings.weight.zero_()
        bert.embeddings.position_embeddings.weight.zero_()
        bert.embeddings.position_embeddings.weight[:256, :256] = torch.eye(256)
        bert.embeddings.LayerNorm.weight.fill_(1.0)
        bert.embeddings.LayerNorm.bias.zero_()
        for linear, block in ((attention.query, torch.eye(256)), (attention.key, 0.6 * planted)):
            linear.weight[:256] = 0.0
            linear.weight[:256, :256] = block
            linear.bias[:256] = 0.0
    units, _ = structure_units([Path(path)])
    outcome = analyse_unit(loaded, units[0], ContactOptions())  # default control: 3 untrained twins
    heads = outcome.result.heads.set_index("name")
    assert heads.loc["L0H0", "p_at_L_long"] > 0.5
    assert heads.loc["L0H0", "p_fwer_L_long"] == pytest.approx(1 / length)
    for name in ("short", "medium", "long"):
        assert heads.loc["L0H0", f"p_at_L_{name}"] > heads.loc["L0H0", f"untrained_p99_L_{name}"]
        assert bool(heads.loc["L0H0", f"significant_L_{name}"])
        assert best_significant(heads.reset_index(), name)["name"] == "L0H0"
    # its random neighbour in the same layer (layer-1 heads read L0H0's output, which mixes contacts)
    assert not heads.loc["L0H1"].filter(like="significant_L").fillna(False).any()
