"""Streamed head scores: exact values on planted attention, TransformerLens' "mul" score on hand-computed
cases, equality of the streamed scores with the dense definitions on real models, and purity (inputs never
change)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from probe.engine import AttentionBlock, capture_attention
from probe.heads.probesets import (
    SpanExample,
    coreference_probes,
    encode_span_example,
    pad_span_batch,
    repeated_blocks,
)
from probe.heads.registry import TOKEN_TYPES, batch_pattern, target_pattern
from probe.heads.scores import ScoreSink, run_sink, span_words, tl_mul_score, valid_row_score, word_attention
from probe.heads.stats import uniform_chance
from probe.zoo.tiny import build_tiny, word_tokenizer


def block(layer: int, alpha: torch.Tensor, start: int, n_query: int,
          n_key: int | None = None) -> AttentionBlock:
    """An AttentionBlock as the engine makes it (alpha: [batch head rows key])."""
    values = dict(step=0, layer=layer, heads=tuple(range(alpha.shape[1])), query_start=start, n_query=n_query,
                  query_offset=0, alpha=alpha)
    if "n_key" in {field.name for field in dataclasses.fields(AttentionBlock)}:
        values["n_key"] = n_key if n_key is not None else alpha.shape[-1]
    return AttentionBlock(**values)


def stream(sink: ScoreSink, alpha: torch.Tensor, rows_per_block: int = 3, crop: bool = False) -> None:
    """Feed α [batch layer head query key] to the sink block by block, like the engine does.
    crop: drop the keys after each block's last row (the engine's causal crop)."""
    n = alpha.shape[3]
    for layer in range(alpha.shape[1]):
        for start in range(0, n, rows_per_block):
            stop = min(start + rows_per_block, n)
            piece = alpha[:, layer, :, start:stop]
            if crop:
                piece = piece[..., :stop]
            sink.update(block(layer, piece, start, n, n))


def causal_uniform(n: int) -> torch.Tensor:
    return torch.ones(n, n).tril() / torch.arange(1, n + 1)[:, None]  # [query key]


def one_hot_rows(targets: list[int], n: int) -> torch.Tensor:
    alpha = torch.zeros(n, n)
    alpha[torch.arange(n), torch.tensor(targets)] = 1.0
    return alpha  # [query key]


# ---- planted attention: exact values -----------------------------------------------------------------------


@pytest.mark.parametrize("crop", [False, True])
def test_perfect_previous_token_head_scores_one_and_its_tl_value(crop):
    n = 8
    ids = torch.arange(10, 10 + n)[None]  # [batch seq]
    perfect = one_hot_rows([0] + list(range(n - 1)), n)  # row 0 can only attend to itself
    alpha = torch.stack([perfect, causal_uniform(n)])[None, None]  # [batch layer head query key]
    sink = ScoreSink({"previous_token": batch_pattern("previous_token", ids)}, torch.tensor([n]), 1, 2)
    stream(sink, alpha, crop=crop)
    scores = sink.result()["previous_token"]
    assert scores.score[0, 0, 0].item() == pytest.approx(1.0, abs=1e-7)
    # TL "mul": Σ α·D / Σ α = 7 target hits / 8 rows (row 0 has no target but stays in the denominator)
    assert scores.tl_score[0, 0, 0].item() == pytest.approx(7 / 8, abs=1e-7)
    # the uniform head: Σ_{i=1..7} 1/(i+1) over 7 valid rows, and over 8 rows for TL
    harmonic = sum(1 / (i + 1) for i in range(1, n))
    assert scores.score[0, 0, 1].item() == pytest.approx(harmonic / 7, abs=1e-6)
    assert scores.tl_score[0, 0, 1].item() == pytest.approx(harmonic / 8, abs=1e-6)


@pytest.mark.parametrize("head_type", TOKEN_TYPES)
def test_uniform_head_scores_the_analytic_chance(head_type):
    tokenizer = word_tokenizer([f"w{i}" for i in range(12)], bos_token="<bos>")
    ids = repeated_blocks(tokenizer, 6, 30, seed=0).input_ids  # [batch seq]
    n = ids.shape[1]
    pattern = batch_pattern(head_type, ids, delimiter_ids=(3, 4, 5))  # a few ids play delimiters
    lengths = torch.full((6,), n)
    causal = causal_uniform(n).expand(6, 1, 1, n, n)  # [batch layer head query key]
    sink = ScoreSink({head_type: pattern}, lengths, 1, 1)
    stream(sink, causal, rows_per_block=7)
    expected = uniform_chance(pattern, lengths, causal=True)  # [batch]
    assert torch.allclose(sink.result()[head_type].score[:, 0, 0], expected, atol=1e-6, equal_nan=True)
    bidirectional = torch.full((6, 1, 1, n, n), 1.0 / n)
    sink = ScoreSink({head_type: pattern}, lengths, 1, 1)
    stream(sink, bidirectional, rows_per_block=7)
    expected = uniform_chance(pattern, lengths, causal=False)
    assert torch.allclose(sink.result()[head_type].score[:, 0, 0], expected, atol=1e-6, equal_nan=True)


def test_padding_rows_and_keys_do_not_count():
    n, real = 6, 4
    ids = torch.tensor([[1, 2, 3, 4, 0, 0]])
    alpha = one_hot_rows([0, 0, 1, 2, 3, 4], n)[None, None, None]  # pad rows attend "previous" too
    sink = ScoreSink({"previous_token": batch_pattern("previous_token", ids)}, torch.tensor([real]), 1, 1)
    stream(sink, alpha)
    scores = sink.result()["previous_token"]
    assert scores.score.item() == pytest.approx(1.0) and scores.tl_score.item() == pytest.approx(3 / 4)


def test_example_without_targets_is_nan():
    ids = torch.tensor([[1, 2, 3, 4]])  # no repeats: no duplicate-token target
    sink = ScoreSink({"duplicate_token": batch_pattern("duplicate_token", ids)}, torch.tensor([4]), 1, 1)
    stream(sink, causal_uniform(4)[None, None, None])
    assert torch.isnan(sink.result()["duplicate_token"].score).all()


def test_scoring_never_changes_its_input():
    ids = torch.tensor([[5, 6, 5, 6, 7]])
    alpha = torch.softmax(
        torch.randn(1, 1, 2, 5, 5).masked_fill(~torch.ones(5, 5).tril().bool(), -torch.inf), -1)
    patterns = {t: batch_pattern(t, ids) for t in TOKEN_TYPES}
    alpha_before, patterns_before = alpha.clone(), {t: p.clone() for t, p in patterns.items()}
    sink = ScoreSink(patterns, torch.tensor([5]), 1, 2)
    stream(sink, alpha)
    sink.result()
    for t in TOKEN_TYPES:
        valid_row_score(alpha[0, 0], patterns[t][0])
        tl_mul_score(alpha[0, 0], patterns[t][0], exclude_bos=True, exclude_current_token=True)
    assert torch.equal(alpha, alpha_before)
    assert all(torch.equal(patterns[t], patterns_before[t]) for t in TOKEN_TYPES)


# ---- TransformerLens "mul" on hand-computed cases ----------------------------------------------------------

ALPHA = torch.tensor([[1.0, 0.0, 0.0],
                      [0.3, 0.7, 0.0],
                      [0.2, 0.5, 0.3]])
PREVIOUS = target_pattern("previous_token", torch.tensor([4, 5, 6]))  # (1, 0), (2, 1)


def test_tl_mul_score_hand_computed():
    # Σ α·D = 0.3 + 0.5 = 0.8 ; Σ α = 3
    assert tl_mul_score(ALPHA, PREVIOUS).item() == pytest.approx(0.8 / 3)
    # exclude_bos zeroes key 0 in both sums: (0.5) / (0 + 0.7 + 0.5 + 0.3)
    assert tl_mul_score(ALPHA, PREVIOUS, exclude_bos=True).item() == pytest.approx(0.5 / 1.5)
    # exclude_current_token zeroes the diagonal: 0.8 / (0.3 + 0.2 + 0.5)
    assert tl_mul_score(ALPHA, PREVIOUS, exclude_current_token=True).item() == pytest.approx(0.8)
    # duplicate tokens [4, 5, 4]: target (2, 0) -> 0.2 / 3 ; induction: (2, 1) -> 0.5 / 3
    tokens = torch.tensor([4, 5, 4])
    assert tl_mul_score(ALPHA, target_pattern("duplicate_token", tokens)).item() == pytest.approx(0.2 / 3)
    assert tl_mul_score(ALPHA, target_pattern("induction", tokens)).item() == pytest.approx(0.5 / 3)


def test_streamed_tl_score_equals_the_hand_computed_value():
    sink = ScoreSink({"previous_token": PREVIOUS[None],
                      "induction": target_pattern("induction", torch.tensor([4, 5, 4]))[None]},
                     torch.tensor([3]), 1, 1)
    stream(sink, ALPHA[None, None, None], rows_per_block=2)
    result = sink.result()
    assert result["previous_token"].tl_score.item() == pytest.approx(0.8 / 3, abs=1e-7)
    assert result["previous_token"].score.item() == pytest.approx(0.8 / 2, abs=1e-7)  # valid rows: 1 and 2
    assert result["induction"].tl_score.item() == pytest.approx(0.5 / 3, abs=1e-7)
    assert result["induction"].score.item() == pytest.approx(0.5, abs=1e-7)  # one valid row


# ---- coreference accuracy on planted attention -------------------------------------------------------------


def test_word_level_accuracy_sums_attended_pieces_and_averages_attending_pieces():
    # words: 0 "ab" = tokens 1, 2 ; 1 "c" = token 3 ; 2 "d" = token 4 ; 3 "ef" (attending) = tokens 5, 6
    from probe.heads.probesets import EncodedSpanExample

    example = EncodedSpanExample(input_ids=(9, 1, 2, 3, 4, 5, 6), query_tokens=(5, 6), target_tokens=(1, 2),
                                 word_ids=(-1, 0, 0, 1, 2, 3, 3), target_words=(0,), query_words=(3,))
    n = 7
    alpha = torch.zeros(2, n, n)  # [head query key]
    # head 0: the target word's two pieces get 0.25 + 0.2 = 0.45 < 0.5 on word 1 from piece 5, but piece 6
    # gives the target word 0.3 + 0.3: mean over pieces -> word 0: (0.45 + 0.6) / 2 = 0.525, word 1: (0.5 +
    # 0.1) / 2 = 0.3
    alpha[0, 5, [1, 2, 3, 0]] = torch.tensor([0.25, 0.2, 0.5, 0.05])
    alpha[0, 6, [1, 2, 3, 0]] = torch.tensor([0.3, 0.3, 0.1, 0.3])
    # head 1: the <bos> sink holds most mass (specials never count); then word 2 wins
    alpha[1, 5, [0, 1, 4]] = torch.tensor([0.6, 0.1, 0.3])
    alpha[1, 6, [0, 1, 4]] = torch.tensor([0.6, 0.1, 0.3])
    words = word_attention(alpha, example.word_ids, example.query_tokens)
    assert torch.allclose(words[0], torch.tensor([0.525, 0.3, 0.0, 0.0]))
    pattern = target_pattern("coreference", example)
    batch = pad_span_batch([example], 0)
    sink = ScoreSink({"coreference": pattern[None]}, torch.tensor([n]), 1, 2, words=span_words(batch))
    stream(sink, alpha[None, None], rows_per_block=2)
    result = sink.result()["coreference"]
    assert result.correct[0, 0].tolist() == [1.0, 0.0]
    # mass on the target pieces, mean of rows
    assert result.score[0, 0].tolist() == pytest.approx([0.525, 0.1])
    assert torch.isnan(result.tl_score).all()


# ---- streamed == dense on real models ----------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama"])
def test_streamed_scores_equal_dense_scores_on_tiny_models(arch):
    model, tokenizer = build_tiny(arch, seed=1)
    ids = repeated_blocks(tokenizer, 3, 40, seed=0).input_ids
    patterns = {t: batch_pattern(t, ids, causal=arch != "bert", delimiter_ids=(5, 6, 7)) for t in TOKEN_TYPES}
    sink = ScoreSink(patterns, torch.full((3,), 40), model.config.num_hidden_layers,
                     model.config.num_attention_heads)
    run_sink(model, sink, ids, block_bytes=4 * 40 * 4 * 7)  # several blocks per layer
    alpha = capture_attention(model, {"input_ids": ids})  # [batch layer head query key]
    result = sink.result()
    for t in TOKEN_TYPES:
        dense = torch.stack([valid_row_score(alpha[b], patterns[t][b]) for b in range(3)])
        dense_tl = torch.stack([tl_mul_score(alpha[b], patterns[t][b]) for b in range(3)])
        assert torch.allclose(result[t].score, dense, atol=1e-5, equal_nan=True)
        if not patterns[t].triu(1).any():  # TransformerLens' score keeps the lower triangle only
            assert torch.allclose(result[t].tl_score, dense_tl, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("arch", ["gpt2", "bert"])
def test_streamed_coreference_equals_dense_on_a_padded_batch(arch):
    model, tokenizer = build_tiny(arch, seed=2)
    examples = coreference_probes(6, 0, tokenizer)
    examples.append(encode_span_example(SpanExample("mary saw john because she left the house , said bob",
                                                    (22, 25), ((0, 4),), ((9, 13),)), tokenizer))
    batch = pad_span_batch(examples, tokenizer.pad_token_id)
    n = batch.input_ids.shape[1]
    pattern = torch.zeros(len(examples), n, n, dtype=torch.bool)
    for row, example in enumerate(examples):
        pattern[row, :len(example.input_ids), :len(example.input_ids)] = target_pattern("coreference",
                                                                                        example)
    sink = ScoreSink({"coreference": pattern}, batch.attention_mask.sum(-1), 2, 4, words=span_words(batch))
    run_sink(model, sink, batch.input_ids, batch.attention_mask)
    result = sink.result()["coreference"]
    alpha = capture_attention(model, {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask})
    for row, example in enumerate(examples):
        size = len(example.input_ids)
        a = alpha[row, ..., :size, :size]  # [layer head query key]
        assert torch.allclose(result.score[row], valid_row_score(a, target_pattern("coreference", example)),
                              atol=1e-6)
        words = word_attention(a, example.word_ids, example.query_tokens)  # [layer head word]
        words[..., list(example.query_words)] = -1.0
        # Clark et al.: the argmax over every word but the attending word
        clark = torch.isin(words.argmax(-1), torch.tensor(example.target_words)).float()
        assert torch.equal(result.clark_correct[row], clark)
        if example.candidate_words:  # marked mentions only
            others = [w for w in range(words.shape[-1]) if w not in example.candidate_words]
            words[..., others] = -1.0
        hit = torch.isin(words.argmax(-1), torch.tensor(example.target_words)).float()
        assert torch.equal(result.correct[row], hit)
