"""The model organisms' recipes: what each one is trained on and how its tokenizer, model and batches are
built.

:data:`ORGANISMS` holds one frozen :class:`TrainConfig` per organism; :func:`build_tokenizer`,
:func:`build_model` and :func:`make_batch` turn a recipe into a word-level tokenizer, a fresh attention-only
transformers model and seeded `(tokens, targets)` batches (the generators of :mod:`probe.training.data`). The
loop that trains them is :mod:`probe.training.train`; the cards and label tables they ship with are
:mod:`probe.training.cards`.

* induction / positional: Llama-style (LlamaForCausalLM: rotary positions, RMSNorm). With GPT-2's learned
  absolute positions the same data was solved, in every one of five runs, by look-alike circuits (layer-0
  heads at a fixed offset of 5-6 or 14-15 tokens, layer-1 heads matching them) that are not previous-token or
  induction heads; with rotary positions (relative only) the canonical previous-token -> induction circuit
  forms.
* coreference: GPT-2 (GPT2LMHeadModel).
* natural-text / natural-text-1layer: Llama-style, trained on real text (GAP's validation split, a byte-level
  BPE tokenizer learnt from it: :mod:`probe.training.text`), 2 layers and its 1-layer twin, the control that
  cannot form an induction head (Olsson et al. 2022); checkpoints at log-spaced steps by default.
* stdlib-code / stdlib-code-1layer: the same architecture, width 128, on the standard library's Python
  source (:func:`probe.heads.corpus.code_passages`), batch 4 x context 256, a constant learning rate after
  the warm-up, trained to twice the induction-head formation point Aoyama, Wilcox & Schneider (2025) predict
  for that batch and context (issue 54: a previous-token -> induction circuit forms; docs/zoo.md), 12
  checkpoints dense around the formation window, stored in float16 (loaded as float32) to keep the package
  small.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import transformers

from probe.anatomy import find_layer_list
from probe.errors import ProbeError
from probe.heads.probesets import CausalityVocabulary, CorefVocabulary
from probe.training import data, text
from probe.zoo.tiny import word_tokenizer

BOS, UNK, PAD = "<bos>", "<unk>", "<pad>"

# field -> (lowest, highest) of every number a recipe or `probe train --set` may give (checked on
# construction, so also by dataclasses.replace): a negative step count, an infinite or NaN learning rate, an
# empty or absurd batch is one line, never a model trained on nonsense or an internal error halfway
BOUNDS: dict[str, tuple[float, float]] = {
    "n_words": (2, 1_000_000), "n_layer": (1, 256), "n_head": (1, 256), "n_embd": (1, 65_536),
    "n_positions": (2, 10_000_000), "length": (2, 10_000_000), "min_block": (1, 1_000_000),
    "max_block": (1, 1_000_000), "max_copies": (2, 1_000), "max_distractors": (1, 1_000),
    "max_depth": (1, 1_000),
    "steps": (1, 100_000_000), "batch": (1, 4_096), "lr": (1e-9, 1.0), "warmup": (0, 100_000_000),
    "lr_floor": (0.0, 1.0),
    "weight_decay": (0.0, 1.0), "eval_min_block": (1, 1_000_000), "eval_max_block": (1, 1_000_000),
    "needle_len": (1, 1_000_000), "key_len": (1, 1_000_000), "min_length": (0, 10_000_000),
    "rope_theta": (1.0, 1e12), "repeat_rows": (0, 4_096), "vocab_size": (2, 10_000_000),
    "checkpoints": (0, 10_000),
}
# (smaller, larger): the first may not exceed the second
CHECKPOINT_DTYPES = ("float32", "float16")  # what TrainConfig.checkpoint_dtype may be
ORDERED = (("min_block", "max_block"), ("eval_min_block", "eval_max_block"), ("length", "n_positions"),
           ("min_length", "length"))


def check_config(config) -> None:
    """One-line ProbeError for a TrainConfig field outside :data:`BOUNDS` (NaN and ±inf included), a
    number field of the wrong type, a pair of :data:`ORDERED` fields the wrong way round, or a width that the
    heads do not divide."""
    for name, (low, high) in BOUNDS.items():
        value = getattr(config, name)
        kind = type(TrainConfig.__dataclass_fields__[name].default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and
                                                                              not isinstance(value, int)):
            raise ProbeError(f"{name}={value!r}: give {'a whole number' if kind is int else 'a number'}")
        if not low <= value <= high:  # also refuses nan
            raise ProbeError(f"{name}={value}: must lie between {low:g} and {high:g}")
    for smaller, larger in ORDERED:
        if getattr(config, smaller) > getattr(config, larger):
            raise ProbeError(f"{smaller}={getattr(config, smaller)} is more than {larger}="
                             f"{getattr(config, larger)}")
    if config.n_embd % config.n_head:
        raise ProbeError(f"n_embd={config.n_embd} is not a multiple of n_head={config.n_head}")
    if config.checkpoint_dtype not in CHECKPOINT_DTYPES:
        raise ProbeError(f"checkpoint_dtype={config.checkpoint_dtype!r}: give one of "
                         f"{', '.join(CHECKPOINT_DTYPES)}")


@dataclass(frozen=True)
class TrainConfig:
    """How one organism is built and trained (defaults: a 2-layer, 4-head, width-64 attention-only GPT-2)."""

    task: str  # what the data teaches, one line for the card
    arch: str = "llama"  # "llama" (rotary positions, RMSNorm) | "gpt2" (learned absolute positions)
    # repeated_blocks | coreference | causality | brackets | sentences | needle (training.data)
    data: str = "repeated_blocks"
    n_words: int = 128  # repeated_blocks: pseudo-words in the vocabulary, besides the specials
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    n_positions: int = 64
    length: int = 64  # repeated_blocks: training sequence length, BOS included
    # repeated_blocks: block lengths log-uniform in [min_block, max_block]; equal = fixed period
    min_block: int = 1
    max_block: int = 24
    max_copies: int = 3  # repeated_blocks: each block written 2..max_copies times in a row (see data.py)
    max_distractors: int = 3  # coreference: 1..max_distractors nouns that disagree with the pronoun
    max_depth: int = 4  # brackets: deepest nesting
    mlp: bool = False  # keep the MLPs (width 4 · n_embd); False: attention-only (MLPs zeroed and frozen)
    # the unembedding is the embedding's transpose (True: every shipped organism) or its own matrix (False:
    # the direct path embedding -> logits can hold bigram statistics, as in Olsson et al.'s attention-only
    # models)
    tie_embeddings: bool = True
    steps: int = 2000
    batch: int = 32
    lr: float = 1e-2  # AdamW peak learning rate (1e-3 stays on the loss plateau for thousands of steps)
    warmup: int = 200  # linear warm-up steps, then cosine decay to lr · lr_floor
    lr_floor: float = 0.1  # the cosine's end as a share of lr (1.0: constant after the warm-up)
    weight_decay: float = 0.01
    eval_min_block: int = 6  # in-context loss probes: one random block (random length) repeated once
    eval_max_block: int = 24
    requirements: dict = field(default_factory=dict)  # what the classifier must find (copied to card.json)
    needle_len: int = 8  # needle: tokens to copy out of the haystack (probe.heads.retrieval.needle_sequence)
    key_len: int = 2  # needle: the cue written before the needle and again at the end of the prompt
    # needle: prompt lengths log-uniform in [min_length, length] per batch (0: always length)
    min_length: int = 0
    rope_theta: float = 10000.0  # llama: rotary base
    # needle: rows of repeated_blocks (length 64) added to every training batch (see below)
    repeat_rows: int = 0
    # needle: then stages on needles alone, each (steps, lr, min_length, length, batch): a fresh AdamW at a
    # constant lr, prompt lengths log-uniform in [min_length, length], the data generator seeded with seed +
    # stage number
    needle_stages: tuple = ()
    # LabelConfig fields the card's labels use ({} = defaults)
    label_config: dict = field(default_factory=dict)
    # natural_text: the BPE vocabulary learnt from the training split (probe.training.text), and that split
    vocab_size: int = 1024
    corpus_split: str = text.TRAIN_SPLIT
    # checkpoints saved when none are asked for: this many log-spaced steps from 0 to `steps` (0: none) ...
    checkpoints: int = 0
    # ... or these steps (when given: dense around a predicted formation point)
    checkpoint_steps: tuple = ()
    # the precision the step-N/ checkpoints' weights are stored in: "float32", or "float16" (half the bytes;
    # their config.json still says float32, so they load as float32: what shipped checkpoints use)
    checkpoint_dtype: str = "float32"

    def __post_init__(self) -> None:
        check_config(self)


# Aoyama, Wilcox & Schneider (2025): induction heads form after ~10^5.7 * sqrt(B * C) training tokens; at
# B = 4, C = 256 that is 16.04 M tokens, 15,662 steps of 1,024 tokens: trained to twice that. The checkpoints:
# log-spaced to 2,000, then every 1,000 steps through the window where the exploration runs formed (3,000 -
# 8,000), then log-spaced to the end (16,000: the predicted point). The learning rate stays at its peak after
# the warm-up (lr_floor 1.0): under the cosine to lr/10, seed 0's induction head peaked at the predicted point
# and slipped below the label rule's margin while the rate decayed (docs/zoo.md)
STDLIB_STEPS = 31_330
STDLIB_CHECKPOINTS = (0, 300, 1000, 2000, 3000, 4000, 5000, 6000, 8000, 11_000, 16_000, STDLIB_STEPS)

ORGANISMS: dict[str, TrainConfig] = {
    "induction": TrainConfig(
        task="predict the repeats of random blocks of random length (1-24 tokens, log-uniform), each written "
             "2-3 times in a row",
        requirements={"present": [{"layer": 0, "head_type": "previous_token"},
                                  {"layer": 1, "head_type": "induction"}],
                      "absent": []},
    ),
    "positional": TrainConfig(
        task="predict the repeats of random blocks of FIXED length 16, each written 2-3 times in a row: the "
             "negative control, whose repeats are predictable from position alone",
        min_block=16, max_block=16,
        requirements={"present": [{"layer": 1, "head_type": "fixed_offset", "offset": -15}],
                      "absent": [{"head_type": "induction"}]},
    ),
    "coreference": TrainConfig(
        task="predict the word after a pronoun (he / she / they), fixed by the one earlier noun that agrees "
             "with the pronoun in gender or number, among 1-3 disagreeing nouns",
        arch="gpt2", data="coreference", steps=1500, batch=64,
        # On templates the agreement baseline also scores 1.0, so no head can be labelled coreference: the
        # requirement is the measured accuracy and the absence of a label (see the card's note).
        requirements={"present": [],
                      "absent": [{"head_type": "coreference"}, {"head_type": "sentence_start"}],
                      "measured": [{"head_type": "coreference", "min_accuracy": 0.9}]},
    ),
    "implicit-causality": TrainConfig(
        task="predict the word after a pronoun, fixed by its antecedent among two names of the pronoun's "
             "gender; the verb's implicit causality picks the antecedent (A fascinated B because she -> A, A "
             "thanked B because she -> B), so nearest mention, first mention and agreement are each right "
             "half of the time",
        arch="gpt2", data="causality", steps=1500, batch=64,
        requirements={"present": [{"head_type": "coreference", "min_accuracy": 0.9}],
                      "absent": [{"head_type": "sentence_start"}]},
    ),
    "brackets": TrainConfig(
        task="nested brackets of three kinds among random words (depth <= 4): after each closing bracket, "
             "repeat the word written just before its matching opening bracket",
        data="brackets", n_words=64, steps=2000,
        requirements={"present": [{"head_type": "bracket"}], "absent": [{"head_type": "sentence_start"}]},
    ),
    "sentences": TrainConfig(
        task="sentences of 2-10 random words ending in . ! or ?; each sentence's first word is the successor "
             "of the first word of the sentence before it, predicted at the end of that sentence",
        data="sentences", n_words=64, steps=2000,
        requirements={"present": [{"head_type": "sentence_start"}], "absent": [{"head_type": "bracket"}]},
    ),
    "natural-text": TrainConfig(
        task="predict the next token of real English text: Wikipedia passages of GAP's validation split "
             "(probe/data/gap, Apache-2.0), the development split held out (probe label's probes and the "
             "in-context-learning score are measured there)",
        data="natural_text", n_layer=2, n_embd=64, vocab_size=512, n_positions=256, length=256, steps=3000,
        batch=8, lr=1e-2, warmup=100, checkpoints=16,
        requirements={"present": [{"layer": 0, "head_type": "previous_token"},
                                  {"layer": 1, "head_type": "induction"}],
                      "absent": []},
    ),
    "natural-text-1layer": TrainConfig(
        task="the same text and recipe with ONE layer: the control, which cannot form an induction head (an "
             "induction head reads a previous-token head's output, which needs a layer before it)",
        data="natural_text", n_layer=1, n_embd=64, vocab_size=512, n_positions=256, length=256, steps=3000,
        batch=8, lr=1e-2, warmup=100, checkpoints=16,
        requirements={"present": [], "absent": [{"head_type": "induction"}]},
    ),
    "stdlib-code": TrainConfig(
        task="predict the next token of Python source: the standard library's top-level modules of the "
             "Python that trains it (PSF licence, on every install), every 8th module held out (the ICL "
             "score and in-context loss are measured on it, cut into 40-line passages); 2x the induction-head"
             " formation point that Aoyama et al. (2025) predict for batch 4 x context 256, at a constant "
             "learning rate after the warm-up",
        data="natural_text", corpus_split=text.CODE_SPLIT, n_layer=2, n_embd=128, vocab_size=512,
        n_positions=256, length=256, batch=4, steps=STDLIB_STEPS, lr=5e-3, warmup=200, lr_floor=1.0,
        checkpoint_steps=STDLIB_CHECKPOINTS, checkpoint_dtype="float16",
        label_config={"twins": 3, "text": text.CODE_HELD_OUT_SPLIT},
        requirements={"present": [{"layer": 0, "head_type": "previous_token"},
                                  {"layer": 1, "head_type": "induction"}],
                      "absent": []},
    ),
    "stdlib-code-1layer": TrainConfig(
        task="the same Python source and recipe with ONE layer: the control, which cannot form an induction "
             "head",
        data="natural_text", corpus_split=text.CODE_SPLIT, n_layer=1, n_embd=128, vocab_size=512,
        n_positions=256, length=256, batch=4, steps=STDLIB_STEPS, lr=5e-3, warmup=200, lr_floor=1.0,
        checkpoint_steps=STDLIB_CHECKPOINTS, checkpoint_dtype="float16",
        label_config={"twins": 3, "text": text.CODE_HELD_OUT_SPLIT},
        requirements={"present": [], "absent": [{"head_type": "induction"}]},
    ),
    "retrieval": TrainConfig(
        task="copy an 8-token needle out of a random haystack: <bos> haystack key needle haystack key -> "
             "needle, the needle at a random depth; key and needle tokens never occur in the haystack. Stage "
             "1: prompts of 16-512 tokens (log-uniform), every batch also holding 16 rows of the induction "
             "organism's repeated blocks (64 tokens), whose ~30 copy targets a row let the copying circuit "
             "form (on needles alone, 8 targets a row, the loss stayed at log 61 for 600 steps); then "
             "needles alone at 128-768 tokens (600 steps), 1,024-4,096 tokens (150 + 250 steps) and "
             "2,048-4,096 tokens (150 steps)",
        data="needle", n_words=61, n_positions=32768, length=512, min_length=16, steps=2000, batch=16,
        rope_theta=1e6, repeat_rows=16,
        # teacher-forced needle accuracy at 4,096 tokens after each stage: stage 1 alone copies only ~100
        # tokens back; stage 2 up to its 768 (3 % at 4,096), stage 3 48 %, stage 4 83 %, stage 5 98 % (16
        # prompts each)
        needle_stages=((600, 2e-3, 128, 768, 16), (150, 1e-3, 1024, 4096, 4), (250, 1e-3, 1024, 4096, 4),
                       (150, 1e-3, 2048, 4096, 4)),
        requirements={"present": [{"layer": 1, "head_type": "retrieval"}], "absent": []},
        label_config={"types": ["retrieval"], "seq_len": 4096, "examples": 16},
    ),
}

GENERATORS = {"repeated_blocks": "repeated_blocks", "coreference": "coreference_batch",
              "causality": "causality_batch", "brackets": "bracket_batch", "sentences": "sentence_batch",
              "needle": "needle_haystack", "natural_text": "text_windows"}
VOCABULARY = {
    "repeated_blocks": lambda config: f"{config.n_words} pseudo-words (probe.training.data.pseudo_words)",
    "coreference": lambda config: "the words of probe.heads.probesets.CorefVocabulary",
    "causality": lambda config: "the words of probe.heads.probesets.CausalityVocabulary",
    "brackets": lambda config: f"{config.n_words} pseudo-words and ( ) [ ] {{ }}",
    "sentences": lambda config: f"{config.n_words} pseudo-words and . ! ?",
    "needle": lambda config: f"{config.n_words} pseudo-words (probe.training.data.pseudo_words)",
    "natural_text": lambda config: f"a byte-level BPE of {config.vocab_size} tokens learnt from "
                                   + ("the standard library's source"
                                      if config.corpus_split == text.CODE_SPLIT
                                      else f"GAP's {config.corpus_split} split") + " (probe.training.text)",
}
BRACKET_TOKENS = tuple(char for pair in data.BRACKETS for char in pair)
SENTENCE_ENDS = (".", "!", "?")


# ------------------------------------------------------------------------------------------------------------
# Tokenizer, model, data
# ------------------------------------------------------------------------------------------------------------


def build_tokenizer(config: TrainConfig):
    """A word-level fast tokenizer (pseudo-words, or the classifier's coreference vocabulary), or for natural
    text the BPE learnt from the training split; BOS first."""
    if config.data == "natural_text":
        return text.corpus_tokenizer(config.corpus_split, config.vocab_size)
    if config.data == "coreference":
        return word_tokenizer(CorefVocabulary().words(), bos_token=BOS)
    if config.data == "causality":
        return word_tokenizer(CausalityVocabulary().words(), bos_token=BOS)
    extra = {"brackets": BRACKET_TOKENS, "sentences": SENTENCE_ENDS}.get(config.data, ())
    return word_tokenizer([*data.pseudo_words(config.n_words), *extra], bos_token=BOS)


def word_ids(tokenizer) -> list[int]:
    """Ids of the vocabulary minus the special tokens and the punctuation (what random words are drawn
    from)."""
    specials = set(tokenizer.all_special_ids)
    vocab = tokenizer.get_vocab()
    punctuation = {vocab[token] for token in (*BRACKET_TOKENS, *SENTENCE_ENDS) if token in vocab}
    return sorted(i for i in vocab.values() if i not in specials and i not in punctuation)


def build_model(config: TrainConfig, tokenizer, seed: int):
    """A fresh attention-only model: MLPs of width 1 with zeroed, frozen weights; no dropout."""
    if config.arch == "llama":
        model_config = transformers.LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=config.n_embd, num_hidden_layers=config.n_layer,
            num_attention_heads=config.n_head, num_key_value_heads=config.n_head, intermediate_size=1,
            max_position_embeddings=config.n_positions, tie_word_embeddings=config.tie_embeddings,
            rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
            bos_token_id=tokenizer.bos_token_id, eos_token_id=None, pad_token_id=tokenizer.pad_token_id,
        )
        if config.mlp:
            model_config.intermediate_size = 4 * config.n_embd
        model_class = transformers.LlamaForCausalLM
    else:
        model_config = transformers.GPT2Config(
            vocab_size=len(tokenizer), n_positions=config.n_positions, n_embd=config.n_embd,
            n_layer=config.n_layer, n_head=config.n_head, n_inner=4 * config.n_embd if config.mlp else 1,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=tokenizer.bos_token_id,
            eos_token_id=None, pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=config.tie_embeddings,
        )
        model_class = transformers.GPT2LMHeadModel
    torch.manual_seed(seed)
    model = model_class(model_config)
    if config.mlp:
        return model
    with torch.no_grad():
        for layer in find_layer_list(model):
            for parameter in layer.mlp.parameters():
                parameter.zero_()
                parameter.requires_grad_(False)
    return model


def make_batch(config: TrainConfig, tokenizer, generator: torch.Generator, batch: int,
               **overrides) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, targets) `[batch position]` of the organism's training language."""
    if config.data == "coreference":
        return data.coreference_batch(generator, batch, CorefVocabulary(), tokenizer.get_vocab(),
                                      tokenizer.bos_token_id, tokenizer.pad_token_id,
                                      overrides.get("max_distractors", config.max_distractors))
    if config.data == "causality":
        return data.causality_batch(generator, batch, CausalityVocabulary(), tokenizer.get_vocab(),
                                    tokenizer.bos_token_id, tokenizer.pad_token_id)
    if config.data == "brackets":
        vocab = tokenizer.get_vocab()
        pairs = [(vocab[opening], vocab[closing]) for opening, closing in data.BRACKETS]
        return data.bracket_batch(generator, batch, config.length, word_ids(tokenizer), pairs,
                                  tokenizer.bos_token_id, config.max_depth)
    if config.data == "sentences":
        vocab = tokenizer.get_vocab()
        return data.sentence_batch(generator, batch, config.length, word_ids(tokenizer),
                                   [vocab[end] for end in SENTENCE_ENDS], tokenizer.bos_token_id)
    if config.data == "natural_text":
        stream = text.token_stream(tokenizer, overrides.get("split", config.corpus_split))
        return text.text_windows(generator, stream, batch, overrides.get("length", config.length),
                                 tokenizer.bos_token_id)
    if config.data == "needle":
        length = overrides.get("length", config.length)
        if "length" not in overrides and config.min_length:
            length = data.block_length(generator, config.min_length, config.length)
        tokens, targets = data.needle_haystack(generator, batch, length, word_ids(tokenizer),
                                               tokenizer.bos_token_id, config.needle_len, config.key_len)
        # training: plus copy-rich rows (evaluation: none)
        if config.repeat_rows and "length" not in overrides:
            extra = data.repeated_blocks(generator, config.repeat_rows, 64, word_ids(tokenizer),
                                         tokenizer.bos_token_id, 1, 24, 3)
            tokens, targets = data.stack_right_padded([(tokens, targets), extra], tokenizer.pad_token_id)
        return tokens, targets
    return data.repeated_blocks(generator, batch, config.length, word_ids(tokenizer), tokenizer.bos_token_id,
                                overrides.get("min_block", config.min_block),
                                overrides.get("max_block", config.max_block), config.max_copies)
