"""Head-type target patterns: exact matrices on hand-made sequences, TransformerLens' definitions, the
registry."""

from __future__ import annotations

import re
from typing import get_args

import pytest
import torch

from probe.errors import ProbeError
from probe.heads.probesets import SpanExample, delimiter_ids, encode_span_example
from probe.heads.registry import (
    HEAD_TYPES,
    MAX_OFFSET,
    REGISTRY,
    TOKEN_TYPES,
    HeadType,
    TargetContext,
    batch_pattern,
    bracket_pairs,
    offsets_for,
    parse_head_types,
    sentence_start_pairs,
    target_pattern,
    target_slots,
)
from probe.zoo.tiny import word_tokenizer


def as_pairs(pattern: torch.Tensor) -> set[tuple[int, int]]:
    return {tuple(pair) for pair in pattern.nonzero().tolist()}


def test_registry_has_one_snake_case_list_of_names():
    assert HEAD_TYPES == get_args(HeadType) == tuple(REGISTRY)
    assert set(HEAD_TYPES) == {"previous_token", "next_token", "self", "first_token", "fixed_offset",
                               "delimiter", "sentence_start", "bracket", "duplicate_token", "induction",
                               "coreference", "retrieval"}
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", name) for name in HEAD_TYPES)
    assert "coreference" not in TOKEN_TYPES and len(TOKEN_TYPES) == 10
    for name, spec in REGISTRY.items():
        assert spec.name == name and spec.probe in ("natural", "repeated", "spans", "sentences", "brackets",
                                                    "generation")
        assert spec.kinds
    assert REGISTRY["sentence_start"].text_only and REGISTRY["bracket"].text_only
    assert REGISTRY["next_token"].kinds == {"masked_lm", "protein_mlm"}  # a causal row cannot see i + 1
    assert REGISTRY["coreference"].text_only and REGISTRY["delimiter"].text_only
    assert not REGISTRY["induction"].text_only


def test_no_module_branches_on_a_type_name():
    """Head types are data: the pipeline never compares a type's name with a literal."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "probe"
    names = ("heads/label/pipeline.py", "heads/label/config.py", "heads/label/probes.py",
             "heads/label/scoring.py", "heads/pairs.py",
             "heads/label/summary.py", "heads/label/table.py", "heads/scores.py", "heads/registry.py",
             "heads/stats.py", "heads/label/ablation.py", "heads/targets.py", "heads/copying.py",
             "heads/direct_logit.py", "heads/retrieval_ablation.py", "heads/sink_rate.py",
             "commands/label.py")
    files = [root / name for name in names]
    pattern = re.compile(r"""(head_type|name|type)\s*[!=]=\s*["']({})["']""".format("|".join(HEAD_TYPES)))
    for file in files:
        assert not pattern.search(file.read_text()), file


TOKENS = torch.tensor([5, 7, 8, 7, 9, 8, 7])  # positions 0..6


def test_previous_token_pattern_is_the_subdiagonal():
    assert as_pairs(target_pattern("previous_token", TOKENS)) == {(i, i - 1) for i in range(1, 7)}


def test_duplicate_token_pattern_hand_computed():
    # 7 at 1, 3, 6; 8 at 2, 5: earlier copies only
    assert as_pairs(target_pattern("duplicate_token", TOKENS)) == {(3, 1), (5, 2), (6, 1), (6, 3)}


def test_induction_pattern_hand_computed():
    # key j is a target of query i when t_{j-1} = t_i and j <= i: the token after an earlier copy
    # t: 0:5 1:7 2:8 3:7 4:9 5:8 6:7 ; query 3 (7): after the 7 at 1 -> j = 2 ; query 5 (8): after 8 at 2 -> 3
    # query 6 (7): after 7 at 1 -> 2, after 7 at 3 -> 4 ; query 1, 2, 4: no earlier copy
    assert as_pairs(target_pattern("induction", TOKENS)) == {(3, 2), (5, 3), (6, 2), (6, 4)}


def test_induction_includes_the_current_position_after_a_repeat():
    # t_{i-1} = t_i: the current position itself is "the token after an earlier copy"
    assert as_pairs(target_pattern("induction", torch.tensor([3, 4, 4]))) == {(2, 2)}


def test_first_token_and_self_leave_row_zero_out():
    assert as_pairs(target_pattern("first_token", TOKENS)) == {(i, 0) for i in range(1, 7)}
    assert as_pairs(target_pattern("self", TOKENS)) == {(i, i) for i in range(1, 7)}


# TransformerLens' detection patterns, written out from their definition (head_detector.py): the
# previous-token pattern is ones below the diagonal; duplicate is token equality with the diagonal cleared,
# lower triangle; induction is the duplicate pattern shifted one column to the right, first column zero, lower
# triangle.
def tl_previous(tokens):
    n = len(tokens)
    pattern = torch.zeros(n, n)
    pattern[1:, :-1] = torch.eye(n - 1)
    return pattern.tril().bool()


def tl_duplicate(tokens):
    equal = (tokens[None, :] == tokens[:, None]).float()
    equal.fill_diagonal_(0)
    return equal.tril().bool()


def tl_induction(tokens):
    duplicate = tl_duplicate(tokens).float()
    shifted = torch.roll(duplicate, shifts=1, dims=1)
    shifted[:, 0] = 0
    return shifted.tril().bool()


@pytest.mark.parametrize("head_type, reference", [
    ("previous_token", tl_previous), ("duplicate_token", tl_duplicate), ("induction", tl_induction),
])
def test_patterns_equal_transformer_lens_definitions(head_type, reference):
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        tokens = torch.randint(0, 6, (40,), generator=generator)  # small vocabulary: many repeats
        assert torch.equal(target_pattern(head_type, tokens), reference(tokens))


def test_next_token_and_bidirectional_duplicates():
    assert as_pairs(target_pattern("next_token", TOKENS)) == {(i, i + 1) for i in range(6)}
    # both directions in a bidirectional model: 7 at 1, 3, 6; 8 at 2, 5
    pairs = as_pairs(target_pattern("duplicate_token", TOKENS, causal=False))
    assert pairs == {(3, 1), (5, 2), (6, 1), (6, 3), (1, 3), (2, 5), (1, 6), (3, 6)}


def test_fixed_offset_candidates_are_one_diagonal_each():
    ids = torch.arange(80)[None]
    targets = REGISTRY["fixed_offset"].targets(TargetContext(ids, causal=True))
    assert sorted(targets) == list(range(-MAX_OFFSET, -1))  # −32 … −2: never −1, 0, +1
    # key 0 is the first-token type's
    assert as_pairs(targets[-15][0]) == {(i, i - 15) for i in range(16, 80)}
    both = REGISTRY["fixed_offset"].targets(TargetContext(ids, causal=False))
    assert sorted(both) == [*range(-MAX_OFFSET, -1), *range(2, MAX_OFFSET + 1)]
    # at most n/2: targets in at least half of the rows
    assert offsets_for(10, causal=True) == [-2, -3, -4, -5]
    assert torch.equal(target_pattern("fixed_offset", torch.arange(80), candidate=-15), targets[-15][0])
    with pytest.raises(ProbeError, match="no candidate 15"):
        target_pattern("fixed_offset", torch.arange(80), candidate=15)  # causal: only d < 0


def test_delimiter_targets_punctuation_and_separators_but_not_position_zero_or_self():
    tokenizer = word_tokenizer(["a", "b", ",", ".", "[SEP]", "x1"], bos_token="<bos>")
    ids = torch.tensor([tokenizer.convert_tokens_to_ids(t) for t in ["<bos>", "a", ",", "b", ".", "x1", "a"]])
    delimiters = delimiter_ids(tokenizer)
    assert {tokenizer.convert_ids_to_tokens(i) for i in delimiters} >= {",", "."}
    assert (tokenizer.convert_tokens_to_ids("a") not in delimiters
            and tokenizer.convert_tokens_to_ids("x1") not in delimiters)
    causal = as_pairs(target_pattern("delimiter", ids, delimiter_ids=delimiters))
    assert causal == {(3, 2), (4, 2), (5, 2), (5, 4), (6, 2), (6, 4)}  # keys 2 (",") and 4 ("."), j < i
    both = as_pairs(target_pattern("delimiter", ids, causal=False, delimiter_ids=delimiters))
    assert (0, 2) in both and (2, 2) not in both and (2, 4) in both and all(j in (2, 4) for _, j in both)


def test_small_vocabulary_restricts_repeat_targets_to_the_planted_copy():
    ids = torch.tensor([[1, 2, 3, 2, 3, 1, 2, 3, 2, 3]])  # block [1 2 3 2 3] at 0 planted twice (L = 5)
    ctx = TargetContext(ids, causal=True, repeat_start=torch.tensor([0]), repeat_len=torch.tensor([5]),
                        restrict_to_repeat=True)
    assert as_pairs(REGISTRY["duplicate_token"].targets(ctx)[None][0]) == {(i, i - 5) for i in range(5, 10)}
    assert as_pairs(REGISTRY["induction"].targets(ctx)[None][0]) == {(i, i - 4) for i in range(5, 10)}
    mirrored = TargetContext(ids, causal=False, repeat_start=torch.tensor([0]), repeat_len=torch.tensor([5]),
                             restrict_to_repeat=True)
    pairs = as_pairs(REGISTRY["duplicate_token"].targets(mirrored)[None][0])
    assert pairs == {(i, i - 5) for i in range(5, 10)} | {(i, i + 5) for i in range(5)}
    # unrestricted, the coincidental repeats count too
    assert len(as_pairs(target_pattern("duplicate_token", ids[0]))) > 5


def test_batch_pattern_matches_per_sequence_patterns_and_does_not_touch_input():
    ids = torch.randint(0, 5, (3, 12), generator=torch.Generator().manual_seed(0))
    before = ids.clone()
    for head_type in TOKEN_TYPES:
        batch = batch_pattern(head_type, ids)
        assert batch.shape == (3, 12, 12)
        for row in range(3):
            assert torch.equal(batch[row], target_pattern(head_type, ids[row]))
    assert torch.equal(ids, before)


def test_target_slots_round_trip():
    ids = torch.randint(0, 4, (2, 16), generator=torch.Generator().manual_seed(3))
    for head_type in TOKEN_TYPES:
        pattern = batch_pattern(head_type, ids)
        slots = target_slots(pattern)  # [batch query slot]
        assert slots.shape[-1] == max(1, int(pattern.sum(-1).max()))
        rebuilt = torch.zeros_like(pattern)
        b, q, s = (slots >= 0).nonzero(as_tuple=True)
        rebuilt[b, q, slots[b, q, s]] = True
        assert torch.equal(rebuilt, pattern)


def test_target_slots_of_one_target_per_row_equal_the_general_path():
    """Patterns with at most one target per row take target_slots' argmax path: the key of each row's target,
    −1 in rows without one (row 0 of a diagonal, a key-0 target is not confused with none)."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        n = int(torch.randint(1, 24, (1,), generator=generator))
        pattern = torch.zeros(2, n, n, dtype=torch.bool)  # [batch query key]
        has = torch.rand(2, n, generator=generator) < 0.6  # [batch query]
        key = torch.randint(0, n, (2, n), generator=generator)  # [batch query]; key 0 often
        b, q = has.nonzero(as_tuple=True)
        pattern[b, q, key[b, q]] = True
        expected = torch.full((2, n, 1), -1, dtype=torch.long)
        expected[b, q, 0] = key[b, q]
        assert torch.equal(target_slots(pattern), expected)


def test_coreference_pattern_comes_from_the_span_example():
    tokenizer = word_tokenizer("mary saw john because she left".split(), bos_token="<bos>")
    example = encode_span_example(
        SpanExample("mary saw john because she left", (22, 25), ((0, 4),)), tokenizer)
    pattern = target_pattern("coreference", example)
    assert as_pairs(pattern) == {(5, 1)}  # <bos> mary saw john because she: "she" (5) -> "mary" (1)
    with pytest.raises(ProbeError, match="spans"):
        target_pattern("coreference", torch.tensor([1, 2, 3]))


def test_parse_head_types():
    assert parse_head_types(None) == HEAD_TYPES
    assert parse_head_types("induction, previous_token,induction") == ("induction", "previous_token")
    with pytest.raises(ProbeError, match="unknown head type 'inducton'"):
        parse_head_types("inducton")
    with pytest.raises(ProbeError, match="unknown head type"):
        target_pattern("name_mover", TOKENS)


# ------------------------------------------------------------------------------------------------------------
# sentence_start and bracket: hand-written texts, targets computed by hand
# ------------------------------------------------------------------------------------------------------------

ENGLISH = ("mary left early e g at 3 5 pm she saw dr smith did he or go yes no u s the cats said and then "
           "hi end x").split() + list(".!?,()[]{}")


@pytest.fixture(scope="module")
def english():
    """A word-level tokenizer that splits every punctuation character off ("e.g." -> e . g .), with <bos>."""
    from probe.heads.probesets import token_classes

    tokenizer = word_tokenizer(ENGLISH, bos_token="<bos>")
    return tokenizer, token_classes(tokenizer)


def pairs_of(head_type: str, text: str, english) -> tuple[list[str], set[tuple[int, int]]]:
    tokenizer, classes = english
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.unk_token_id not in ids, text
    return tokenizer.convert_ids_to_tokens(ids), as_pairs(target_pattern(head_type, ids, classes=classes))


def test_sentence_start_targets_on_hand_written_text(english):
    tokens, pairs = pairs_of("sentence_start", "mary left early. she saw dr. smith! did he go? yes", english)
    # 0 <bos> 1 mary 2 left 3 early 4 . 5 she 6 saw 7 dr 8 . 9 smith 10 ! 11 did 12 he 13 go 14 ? 15 yes
    assert tokens[4] == "." and tokens[8] == "." and tokens[10] == "!" and tokens[14] == "?"
    assert pairs == {(4, 1), (10, 5), (14, 11)}  # "dr." is an abbreviation; "yes" has no end: no pair
    # causal and bidirectional targets agree (the first token always precedes the end)
    ids = english[0]("mary left early. she saw dr. smith! did he go? yes")["input_ids"]
    assert as_pairs(target_pattern("sentence_start", ids, causal=False, classes=english[1])) == pairs


def test_sentence_start_abbreviations_and_decimals_do_not_end_a_sentence(english):
    tokens, pairs = pairs_of("sentence_start", "mary left e.g. at 3.5 pm. she saw u.s. cats. x. end", english)
    # 0 <bos> 1 mary 2 left 3 e 4 . 5 g 6 . 7 at 8 3 9 . 10 5 11 pm 12 . 13 she 14 saw 15 u 16 . 17 s 18 . 19
    # cats 20 . 21 x 22 . 23 end
    assert [tokens[i] for i in (4, 6, 9, 12, 16, 18, 20, 22)] == ["."] * 8
    # e.g. (4, 6) and 3.5 (9) are not ends; "pm." is; "u.s." (16, 18) is an abbreviation, so "cats." ends the
    # sentence that began at "she"; "x." is a one-letter word before a period: an abbreviation (documented
    # miss)
    assert pairs == {(12, 1), (20, 13)}


def test_sentence_start_empty_sentences_and_framing(english):
    tokens, pairs = pairs_of("sentence_start", "hi ... end ! ? said", english)
    # 0 <bos> 1 hi 2 . 3 . 4 . 5 end 6 ! 7 ? 8 said: the second and third periods and "?" end empty sentences
    assert pairs == {(2, 1), (6, 5)}
    assert 0 not in {key for _, key in pairs}  # <bos> is never a sentence's first token


def test_sentence_end_special_token_closes_the_last_sentence():
    """[SEP] / EOS end the sentence in progress ("the tokenizer's sentence-end"), unless it is empty."""
    from probe.heads.registry import TokenClasses, sentence_start_pairs

    classes = TokenClasses(special=frozenset({0, 9}), sentence_end=frozenset({9}), period=frozenset({5}))
    # [CLS]=0 a b . c d [SEP]=9
    assert sentence_start_pairs([0, 1, 2, 5, 3, 4, 9], classes) == [(3, 1), (6, 4)]
    assert sentence_start_pairs([0, 1, 2, 5, 9], classes) == [(3, 1)]  # [SEP] right after "." closes nothing


def test_bracket_targets_on_hand_written_text(english):
    tokens, pairs = pairs_of("bracket", "mary ( saw [ dr ] and { he ( go ) } ) then", english)
    # 0 <bos> 1 mary 2 ( 3 saw 4 [ 5 dr 6 ] 7 and 8 { 9 he 10 ( 11 go 12 ) 13 } 14 ) 15 then
    # nesting respected: the outer ")" skips the inner pair
    assert pairs == {(6, 4), (12, 10), (13, 8), (14, 2)}
    ids = english[0]("mary ( saw [ dr ] and { he ( go ) } ) then")["input_ids"]
    assert as_pairs(target_pattern("bracket", ids, causal=False, classes=english[1])) == pairs


def test_unmatched_and_mismatched_brackets_have_no_target(english):
    tokens, pairs = pairs_of("bracket", ") mary ( saw ] go ) [ he ( no", english)
    # 0 <bos> 1 ) 2 mary 3 ( 4 saw 5 ] 6 go 7 ) 8 [ 9 he 10 ( 11 no
    # ")" at 1: nothing open; "]" at 5: the innermost open is "(", another kind: unmatched, the stack is kept,
    # so ")" at 7 still matches 3; "[" at 8 and "(" at 10 are never closed
    assert pairs == {(7, 3)}


def test_bracket_and_sentence_targets_are_empty_without_token_classes():
    """A tokenizer without sentence ends or brackets (classes empty): no targets, so the scores are NaN."""
    for head_type in ("sentence_start", "bracket"):
        assert not target_pattern(head_type, TOKENS).any()


def test_token_classes_of_a_byte_level_bpe_vocabulary():
    """GPT-2-style pieces: "Ġ(" is an opening bracket; a one-letter piece after a word ("cat" "s") is no
    abbreviation, one with a space marker is; digit_start needs no space marker."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from probe.heads.probesets import token_classes

    vocab = {t: i for i, t in enumerate(["<|endoftext|>", "Ġ(", ")", ".", "Ġcat", "s", "ĠJ", "Ġ3", "5", "Ġ5",
                                         "Ġmr", "!", "Ġ]", "["])}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(
        models.WordLevel(vocab, unk_token="<|endoftext|>")),
                                        bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    classes = token_classes(tokenizer)
    assert classes.openers == (frozenset({1}), frozenset({13}), frozenset())
    assert classes.closers == (frozenset({2}), frozenset({12}), frozenset())
    assert classes.period == {3} and classes.sentence_end == {11}  # <|endoftext|> is also BOS: not an end
    assert classes.abbreviation == {6, 10} and classes.letter == {5, 6}
    assert classes.digit_end == {7, 8, 9} and classes.digit_start == {8}


# ------------------------------------------------------------------------------------------------------------
# HeadTypeSpec.slots: the sparse form the label scorer reads instead of the dense pattern
# ------------------------------------------------------------------------------------------------------------


# The dense `[batch query key]` targets each built-in type was written as before its slots became its one
# definition, copied here as the reference its derived pattern (slots_pattern of the slots) must equal.


def old_diagonal(ctx, offset, first_row=0):
    batch, n = ctx.input_ids.shape
    pattern = torch.ones(n, n, dtype=torch.bool).triu(offset).tril(offset)  # [query key]: j = i + offset
    pattern[:first_row] = False
    return pattern.expand(batch, n, n).clone()  # [batch query key]


def old_first_token(ctx):
    batch, n = ctx.input_ids.shape
    pattern = torch.zeros(batch, n, n, dtype=torch.bool)
    pattern[:, 1:, 0] = True
    return {None: pattern}


def old_fixed_offset(ctx):
    targets = {}
    for d in offsets_for(ctx.input_ids.shape[1], ctx.causal):
        pattern = old_diagonal(ctx, d)
        pattern[:, :, 0] = False
        targets[d] = pattern
    return targets


def old_delimiter(ctx):
    ids, n = ctx.input_ids, ctx.input_ids.shape[1]
    is_delimiter = torch.isin(ids, torch.tensor(ctx.delimiter_ids, dtype=ids.dtype))  # [batch key]
    is_delimiter[:, 0] = False
    pattern = is_delimiter[:, None, :].expand(-1, n, -1).clone() & ~torch.eye(n, dtype=torch.bool)
    return {None: pattern.tril(-1) if ctx.causal else pattern}


def old_pairs(find):
    """A pair type's pattern, one (query, key) pair at a time (the old one went through the slots itself)."""
    def targets(ctx):
        batch, n = ctx.input_ids.shape
        pattern = torch.zeros(batch, n, n, dtype=torch.bool)
        for row in range(batch):
            for query, key in find(ctx.input_ids[row].tolist(), ctx.classes):
                pattern[row, query, key] = True
        return {None: pattern}
    return targets


def old_repeat(ctx, shift, mirror):
    """Only the planted repeat, one pair at a time: query i of the second copy -> key i − L + shift."""
    batch, n = ctx.input_ids.shape
    pattern = torch.zeros(batch, n, n, dtype=torch.bool)
    starts, lengths = ctx.repeat_start.tolist(), ctx.repeat_len.tolist()
    for row, (start, length) in enumerate(zip(starts, lengths, strict=True)):
        for i in range(start + length, min(start + 2 * length, n)):
            pattern[row, i, i - length + shift] = True
        for i in range(start, start + length) if mirror else ():
            pattern[row, i, i + length] = True
    return pattern


def old_duplicate(ctx):
    if ctx.restrict_to_repeat:
        return {None: old_repeat(ctx, 0, mirror=not ctx.causal)}
    ids = ctx.input_ids
    same = ids[:, :, None] == ids[:, None, :]
    return {None: same.tril(-1) if ctx.causal else same & ~torch.eye(ids.shape[1], dtype=torch.bool)}


def old_tl_induction(ctx):
    ids = ctx.input_ids
    pattern = torch.zeros(ids.shape[0], ids.shape[1], ids.shape[1], dtype=torch.bool)
    pattern[:, :, 1:] = ids[:, :, None] == ids[:, None, :-1]  # key j holds t_{j-1}
    return pattern.tril(0)


def old_induction(ctx):
    return {None: old_repeat(ctx, 1, mirror=False) if ctx.restrict_to_repeat else old_tl_induction(ctx)}


OLD_TARGETS = {
    "previous_token": lambda ctx: {None: old_diagonal(ctx, -1)},
    "next_token": lambda ctx: {None: old_diagonal(ctx, 1)},
    "self": lambda ctx: {None: old_diagonal(ctx, 0, first_row=1)},
    "first_token": old_first_token, "fixed_offset": old_fixed_offset, "delimiter": old_delimiter,
    "sentence_start": old_pairs(sentence_start_pairs), "bracket": old_pairs(bracket_pairs),
    "duplicate_token": old_duplicate, "induction": old_induction,
}
OLD_TL = {  # TransformerLens' three patterns (never restricted to the planted repeat)
    "previous_token": lambda ctx: old_diagonal(ctx, -1),
    "duplicate_token": lambda ctx: (ctx.input_ids[:, :, None] == ctx.input_ids[:, None, :]).tril(-1),
    "induction": old_tl_induction,
}


@pytest.mark.parametrize("causal", [True, False])
def test_each_types_pattern_derived_from_its_slots_equals_its_old_dense_definition(english, causal):
    """Slots are a built-in type's one definition: the dense targets (and TransformerLens' pattern) a view
    reads are derived from them by slots_pattern, and equal the old hand-written dense definitions above,
    candidate by candidate, on text with delimiters, sentences, brackets and none of them, and on repeated
    blocks (targets on every earlier copy, and restricted to the planted repeat)."""
    from probe.heads.targets import FromSlots

    tokenizer, classes = english
    texts = ["mary ( saw [ dr ] and { he ( go ) } ) then. she saw dr. smith! did he go? yes, no",
             "mary left early e g at 3 5 pm she saw",  # no delimiter, sentence end or bracket
             ". , ! ? ( ) [ ] { } . . ,"]  # delimiters only
    encoded = [tokenizer(text)["input_ids"] for text in texts]
    width = max(len(ids) for ids in encoded)
    # one batch, right-padded with a non-delimiter token (padding is cleared by the scorer, not the targets)
    ids = torch.tensor([ids + [encoded[1][1]] * (width - len(ids)) for ids in encoded])
    ctx = TargetContext(ids, causal=causal, delimiter_ids=delimiter_ids(tokenizer), classes=classes)
    sparse = [name for name, spec in REGISTRY.items() if spec.slots is not None]
    assert sparse == list(OLD_TARGETS)
    for name in sparse:  # no hand-written dense target left: the pattern is the slots', derived
        spec = REGISTRY[name]
        assert spec.targets == FromSlots(spec.slots), name
        assert (spec.tl_targets == FromSlots(spec.tl_slots)) if name in OLD_TL else spec.tl_slots is None
    repeated = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3],
                             [2, 7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5, 9, 0, 4, 5, 2, 3, 5, 3, 6, 0]])
    contexts = [ctx] + [TargetContext(repeated, causal=causal, repeat_start=torch.tensor([5, 10]),
                                      repeat_len=torch.tensor([8, 4]), restrict_to_repeat=restrict)
                        for restrict in (False, True)]
    for ctx in contexts:
        for name in sparse:
            spec = REGISTRY[name]
            derived, old = spec.targets(ctx), OLD_TARGETS[name](ctx)
            assert list(derived) == list(old) == list(spec.slots(ctx)), name  # the same candidates, in order
            for candidate, pattern in old.items():
                assert derived[candidate].dtype == torch.bool and derived[candidate].is_contiguous()
                assert torch.equal(derived[candidate], pattern), (name, candidate)
                if ctx.repeat_start is None or name in ("duplicate_token", "induction"):
                    assert pattern.any(), (name, candidate)  # no vacuous agreement
            if name in OLD_TL:  # TransformerLens' pattern; its slots in target_slots' own form
                assert torch.equal(spec.tl_targets(ctx), OLD_TL[name](ctx)), name
                assert torch.equal(spec.tl_slots(ctx), target_slots(OLD_TL[name](ctx))), name
    # a planted check, not only agreement: delimiter keys before row 6 of the third text (". , ! ? ( )")
    third = REGISTRY["delimiter"].slots(contexts[0])[None][2, 6]
    assert sorted(int(key) for key in third if key >= 0) == ([1, 2, 3, 4, 5] if causal else
                                                             [1, 2, 3, 4, 5, *range(7, 14)])
    # negative control: the references tell the types apart (a wrong derivation would fail above)
    assert not torch.equal(OLD_TARGETS["induction"](contexts[1])[None], OLD_TARGETS["duplicate_token"](
        contexts[1])[None])


def test_slots_pattern_marks_each_named_key_once_and_ignores_none():
    """The one derivation, on planted slots: −1 anywhere in a row names nothing, a repeated key is one True,
    the result is a new `[batch query key]` bool tensor."""
    from probe.heads.registry import slots_pattern

    slots = torch.tensor([[[-1, -1], [0, -1], [-1, 1], [2, 2]],
                          [[3, 0], [-1, -1], [1, 0], [-1, 3]]])  # [batch=2 query=4 slot=2]
    pattern = slots_pattern(slots, 4)
    assert pattern.shape == (2, 4, 4) and pattern.dtype == torch.bool
    assert as_pairs(pattern[0]) == {(1, 0), (2, 1), (3, 2)}
    assert as_pairs(pattern[1]) == {(0, 0), (0, 3), (2, 0), (2, 1), (3, 3)}
    assert not slots_pattern(torch.full((1, 3, 2), -1), 3).any()  # no slot: no target
    with pytest.raises(ProbeError, match=r"key slots must be a \[batch query slot\] long tensor"):
        slots_pattern(pattern, 4)  # a dense pattern given as slots
