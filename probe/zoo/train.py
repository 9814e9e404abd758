"""Train a model organism from scratch: `python -m probe.zoo.train NAME --seed S --out DIR`.

Writes DIR/ with safetensors weights, config.json, tokenizer files, card.json and MODEL_CARD.md. The models are
transformers models made attention-only: MLPs of width 1 whose weights are zeroed and frozen, so every MLP adds
exactly 0 to the residual stream and `from_pretrained` loads them like any checkpoint.

* induction / positional: Llama-style (LlamaForCausalLM: rotary positions, RMSNorm). With GPT-2's learned
  absolute positions the same data was solved, in every one of five runs, by look-alike circuits (layer-0 heads at
  a fixed offset of 5-6 or 14-15 tokens, layer-1 heads matching them) that are not previous-token or induction
  heads; with rotary positions (relative only) the canonical previous-token -> induction circuit forms.
* coreference: GPT-2 (GPT2LMHeadModel).

When the head classifier (probe.heads.label) is importable, the card also records the labels it gives the model.
`--checkpoint-steps 0,50,100,...` also saves the model after those optimizer steps to DIR/step-N/ (for sweeps:
`probe label --model DIR --revisions step-0,step-50,...`); the run itself is unchanged.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from probe.engine import find_layer_list
from probe.zoo import data

BOS, UNK, PAD = "<bos>", "<unk>", "<pad>"


@dataclass(frozen=True)
class TrainConfig:
    """How one organism is built and trained (defaults: a 2-layer, 4-head, width-64 attention-only GPT-2)."""

    task: str  # what the data teaches, one line for the card
    arch: str = "llama"  # "llama" (rotary positions, RMSNorm) | "gpt2" (learned absolute positions)
    data: str = "repeated_blocks"  # repeated_blocks | coreference | causality | brackets | sentences | needle (zoo.data)
    n_words: int = 128  # repeated_blocks: pseudo-words in the vocabulary, besides the specials
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    n_positions: int = 64
    length: int = 64  # repeated_blocks: training sequence length, BOS included
    min_block: int = 1  # repeated_blocks: block lengths log-uniform in [min_block, max_block]; equal = fixed period
    max_block: int = 24
    max_copies: int = 3  # repeated_blocks: each block written 2..max_copies times in a row (see data.py)
    max_distractors: int = 3  # coreference: 1..max_distractors nouns that disagree with the pronoun
    max_depth: int = 4  # brackets: deepest nesting
    mlp: bool = False  # keep the MLPs (width 4 · n_embd); False: attention-only (MLPs zeroed and frozen)
    steps: int = 2000
    batch: int = 32
    lr: float = 1e-2  # AdamW peak learning rate (1e-3 stays on the loss plateau for thousands of steps)
    warmup: int = 200  # linear warm-up steps, then cosine decay to lr/10
    weight_decay: float = 0.01
    eval_min_block: int = 6  # in-context loss probes: one random block (random length) repeated once
    eval_max_block: int = 24
    requirements: dict = field(default_factory=dict)  # what the classifier must find (copied to card.json)
    needle_len: int = 8  # needle: tokens to copy out of the haystack (probe.heads.retrieval.needle_sequence)
    key_len: int = 2  # needle: the cue written before the needle and again at the end of the prompt
    min_length: int = 0  # needle: prompt lengths log-uniform in [min_length, length] per batch (0: always length)
    rope_theta: float = 10000.0  # llama: rotary base
    repeat_rows: int = 0  # needle: rows of repeated_blocks (length 64) added to every training batch (see below)
    # needle: then stages on needles alone, each (steps, lr, min_length, length, batch): a fresh AdamW at a constant
    # lr, prompt lengths log-uniform in [min_length, length], the data generator seeded with seed + stage number
    needle_stages: tuple = ()
    label_config: dict = field(default_factory=dict)  # LabelConfig fields the card's labels use ({} = defaults)


ORGANISMS: dict[str, TrainConfig] = {
    "induction": TrainConfig(
        task="predict the repeats of random blocks of random length (1-24 tokens, log-uniform), each written 2-3 "
             "times in a row",
        requirements={"present": [{"layer": 0, "head_type": "previous_token"}, {"layer": 1, "head_type": "induction"}],
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
        task="predict the word after a pronoun (he / she / they), fixed by the one earlier noun that agrees with "
             "the pronoun in gender or number, among 1-3 disagreeing nouns",
        arch="gpt2", data="coreference", steps=1500, batch=64,
        # On templates the agreement baseline also scores 1.0, so no head can be labelled coreference: the
        # requirement is the measured accuracy and the absence of a label (see the card's note).
        requirements={"present": [], "absent": [{"head_type": "coreference"}, {"head_type": "sentence_start"}],
                      "measured": [{"head_type": "coreference", "min_accuracy": 0.9}]},
    ),
    "implicit-causality": TrainConfig(
        task="predict the word after a pronoun, fixed by its antecedent among two names of the pronoun's gender; the "
             "verb's implicit causality picks the antecedent (A fascinated B because she -> A, A thanked B because "
             "she -> B), so nearest mention, first mention and agreement are each right half of the time",
        arch="gpt2", data="causality", steps=1500, batch=64,
        requirements={"present": [{"head_type": "coreference", "min_accuracy": 0.9}],
                      "absent": [{"head_type": "sentence_start"}]},
    ),
    "brackets": TrainConfig(
        task="nested brackets of three kinds among random words (depth <= 4): after each closing bracket, repeat the "
             "word written just before its matching opening bracket",
        data="brackets", n_words=64, steps=2000,
        requirements={"present": [{"head_type": "bracket"}], "absent": [{"head_type": "sentence_start"}]},
    ),
    "sentences": TrainConfig(
        task="sentences of 2-10 random words ending in . ! or ?; each sentence's first word is the successor of the "
             "first word of the sentence before it, predicted at the end of that sentence",
        data="sentences", n_words=64, steps=2000,
        requirements={"present": [{"head_type": "sentence_start"}], "absent": [{"head_type": "bracket"}]},
    ),
    "retrieval": TrainConfig(
        task="copy an 8-token needle out of a random haystack: <bos> haystack key needle haystack key -> needle, "
             "the needle at a random depth; key and needle tokens never occur in the haystack. Stage 1: prompts "
             "of 16-512 tokens (log-uniform), every batch also holding 16 rows of the induction organism's "
             "repeated blocks (64 tokens), whose ~30 copy targets a row let the copying circuit form (on needles "
             "alone, 8 targets a row, the loss stayed at log 61 for 600 steps); then needles alone at 128-768 "
             "tokens (600 steps), 1,024-4,096 tokens (150 + 250 steps) and 2,048-4,096 tokens (150 steps)",
        data="needle", n_words=61, n_positions=32768, length=512, min_length=16, steps=2000, batch=16,
        rope_theta=1e6, repeat_rows=16,
        # teacher-forced needle accuracy at 4,096 tokens after each stage: stage 1 alone copies only ~100 tokens back;
        # stage 2 up to its 768 (3 % at 4,096), stage 3 48 %, stage 4 83 %, stage 5 98 % (16 prompts each)
        needle_stages=((600, 2e-3, 128, 768, 16), (150, 1e-3, 1024, 4096, 4), (250, 1e-3, 1024, 4096, 4),
                       (150, 1e-3, 2048, 4096, 4)),
        requirements={"present": [{"layer": 1, "head_type": "retrieval"}], "absent": []},
        label_config={"types": ["retrieval"], "seq_len": 4096, "examples": 16},
    ),
}

GENERATORS = {"repeated_blocks": "repeated_blocks", "coreference": "coreference_batch", "causality": "causality_batch",
              "brackets": "bracket_batch", "sentences": "sentence_batch", "needle": "needle_haystack"}
VOCABULARY = {
    "repeated_blocks": lambda config: f"{config.n_words} pseudo-words (probe.zoo.data.pseudo_words)",
    "coreference": lambda config: "the words of probe.heads.probesets.CorefVocabulary",
    "causality": lambda config: "the words of probe.heads.probesets.CausalityVocabulary",
    "brackets": lambda config: f"{config.n_words} pseudo-words and ( ) [ ] {{ }}",
    "sentences": lambda config: f"{config.n_words} pseudo-words and . ! ?",
    "needle": lambda config: f"{config.n_words} pseudo-words (probe.zoo.data.pseudo_words)",
}
BRACKET_TOKENS = tuple(char for pair in data.BRACKETS for char in pair)
SENTENCE_ENDS = (".", "!", "?")


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer, model, data
# ---------------------------------------------------------------------------------------------------------------


def build_tokenizer(config: TrainConfig):
    """A word-level fast tokenizer (pseudo-words, or the classifier's coreference vocabulary); BOS first."""
    from probe.zoo.tiny import word_tokenizer

    if config.data == "coreference":
        from probe.heads.probesets import CorefVocabulary

        return word_tokenizer(CorefVocabulary().words(), bos_token=BOS)
    if config.data == "causality":
        from probe.heads.probesets import CausalityVocabulary

        return word_tokenizer(CausalityVocabulary().words(), bos_token=BOS)
    extra = {"brackets": BRACKET_TOKENS, "sentences": SENTENCE_ENDS}.get(config.data, ())
    return word_tokenizer([*data.pseudo_words(config.n_words), *extra], bos_token=BOS)


def word_ids(tokenizer) -> list[int]:
    """Ids of the vocabulary minus the special tokens and the punctuation (what random words are drawn from)."""
    specials = set(tokenizer.all_special_ids)
    vocab = tokenizer.get_vocab()
    punctuation = {vocab[token] for token in (*BRACKET_TOKENS, *SENTENCE_ENDS) if token in vocab}
    return sorted(i for i in vocab.values() if i not in specials and i not in punctuation)


def build_model(config: TrainConfig, tokenizer, seed: int):
    """A fresh attention-only model: MLPs of width 1 with zeroed, frozen weights; no dropout."""
    import transformers

    if config.arch == "llama":
        model_config = transformers.LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=config.n_embd, num_hidden_layers=config.n_layer,
            num_attention_heads=config.n_head, num_key_value_heads=config.n_head, intermediate_size=1,
            max_position_embeddings=config.n_positions, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
            bos_token_id=tokenizer.bos_token_id, eos_token_id=None, pad_token_id=tokenizer.pad_token_id,
        )
        if config.mlp:
            model_config.intermediate_size = 4 * config.n_embd
        model_class = transformers.LlamaForCausalLM
    else:
        model_config = transformers.GPT2Config(
            vocab_size=len(tokenizer), n_positions=config.n_positions, n_embd=config.n_embd, n_layer=config.n_layer,
            n_head=config.n_head, n_inner=4 * config.n_embd if config.mlp else 1, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            bos_token_id=tokenizer.bos_token_id, eos_token_id=None, pad_token_id=tokenizer.pad_token_id,
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
        from probe.heads.probesets import CorefVocabulary

        return data.coreference_batch(generator, batch, CorefVocabulary(), tokenizer.get_vocab(),
                                      tokenizer.bos_token_id, tokenizer.pad_token_id,
                                      overrides.get("max_distractors", config.max_distractors))
    if config.data == "causality":
        from probe.heads.probesets import CausalityVocabulary

        return data.causality_batch(generator, batch, CausalityVocabulary(), tokenizer.get_vocab(),
                                    tokenizer.bos_token_id, tokenizer.pad_token_id)
    if config.data == "brackets":
        vocab = tokenizer.get_vocab()
        pairs = [(vocab[opening], vocab[closing]) for opening, closing in data.BRACKETS]
        return data.bracket_batch(generator, batch, config.length, word_ids(tokenizer), pairs, tokenizer.bos_token_id,
                                  config.max_depth)
    if config.data == "sentences":
        vocab = tokenizer.get_vocab()
        return data.sentence_batch(generator, batch, config.length, word_ids(tokenizer),
                                   [vocab[end] for end in SENTENCE_ENDS], tokenizer.bos_token_id)
    if config.data == "needle":
        length = overrides.get("length", config.length)
        if "length" not in overrides and config.min_length:
            length = data.block_length(generator, config.min_length, config.length)
        tokens, targets = data.needle_haystack(generator, batch, length, word_ids(tokenizer), tokenizer.bos_token_id,
                                               config.needle_len, config.key_len)
        if config.repeat_rows and "length" not in overrides:  # training: plus copy-rich rows (evaluation: none)
            extra = data.repeated_blocks(generator, config.repeat_rows, 64, word_ids(tokenizer),
                                         tokenizer.bos_token_id, 1, 24, 3)
            tokens, targets = data.stack_right_padded([(tokens, targets), extra], tokenizer.pad_token_id)
        return tokens, targets
    return data.repeated_blocks(generator, batch, config.length, word_ids(tokenizer), tokenizer.bos_token_id,
                                overrides.get("min_block", config.min_block), overrides.get("max_block", config.max_block),
                                config.max_copies)


def learning_rate(step: int, config: TrainConfig) -> float:
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def masked_loss(model, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats) over the predictable positions only."""
    logits = model(input_ids=tokens).logits  # [batch position vocab]
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=data.IGNORE)


# ---------------------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def held_out_loss(model, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, float]:
    """(mean loss in nats, top-1 accuracy) over the predictable tokens of held-out batches."""
    model.eval()
    total, correct, count = 0.0, 0, 0
    for tokens, targets in batches:
        logits = model(input_ids=tokens).logits  # [batch position vocab]
        keep = targets != data.IGNORE  # [batch position]
        total += float(torch.nn.functional.cross_entropy(logits[keep], targets[keep], reduction="sum"))
        correct += int((logits[keep].argmax(-1) == targets[keep]).sum())
        count += int(keep.sum())
    return total / count, correct / count


def evaluate(model, config: TrainConfig, tokenizer, seed: int, n_batches: int = 8, batch: int = 32) -> dict:
    """The card's numbers: in-context loss (nats) and accuracy on held-out probes of the organism's task."""
    generator = torch.Generator().manual_seed(10_000 + seed)
    result: dict = {}
    if config.data == "coreference":
        batches = [make_batch(config, tokenizer, generator, batch, max_distractors=1) for _ in range(n_batches)]
        loss, accuracy = held_out_loss(model, batches)
        result.update(probe="held-out sentences with one distractor noun; target: the word after the pronoun",
                      in_context_loss=round(loss, 4), accuracy=round(accuracy, 4),
                      nearest_noun_baseline=0.5)  # the antecedent is the nearer noun in half the sentences
        return result
    if config.data in ("causality", "brackets", "sentences"):
        batches = [make_batch(config, tokenizer, generator, batch) for _ in range(n_batches)]
        loss, accuracy = held_out_loss(model, batches)
        what = {"causality": "held-out implicit-causality sentences; target: the word after the pronoun",
                "brackets": "held-out bracket sequences; target: the word after each closing bracket",
                "sentences": "held-out sentences; target: the next sentence's first word, at each sentence end"}
        result.update(probe=what[config.data], in_context_loss=round(loss, 4), accuracy=round(accuracy, 4))
        if config.data == "causality":
            result["nearest_first_agreement_baselines"] = 0.5  # balanced by construction (probesets)
        return result
    if config.data == "needle":  # teacher-forced answer accuracy at the longest training length and far beyond it
        for length, n in ((config.length, n_batches), (4096, 2)):
            batches = [make_batch(config, tokenizer, generator, 8, length=length) for _ in range(n)]
            loss, accuracy = held_out_loss(model, batches)
            result[f"answer_loss_{length}"], result[f"answer_accuracy_{length}"] = round(loss, 4), round(accuracy, 4)
        result["probe"] = ("<bos> haystack key needle haystack key at random depth; target: the needle's tokens "
                           "(teacher-forced)")
        return result
    ids, bos = word_ids(tokenizer), tokenizer.bos_token_id
    batches = [data.repeat_probe(generator, batch, ids, bos, config.eval_min_block, config.eval_max_block)
               for _ in range(n_batches)]
    loss, accuracy = held_out_loss(model, batches)
    result.update(probe=f"<bos> + one random block of random length {config.eval_min_block}-{config.eval_max_block} "
                        "+ its copy; target: the copy's tokens after its first",
                  in_context_loss=round(loss, 4), accuracy=round(accuracy, 4))
    if config.min_block == config.max_block:  # the control: also on its own fixed period
        period = config.min_block
        batches = [data.repeat_probe(generator, batch, ids, bos, period, period) for _ in range(n_batches)]
        loss, accuracy = held_out_loss(model, batches)
        result.update(fixed_period=period, in_context_loss_fixed_period=round(loss, 4),
                      accuracy_fixed_period=round(accuracy, 4))
    return result


def classifier_labels(directory: Path, label_config: dict | None = None) -> tuple[dict, object]:
    """The labels probe.heads.label gives the saved model with its default LabelConfig: ({head_type: [head names]} plus
    the scores of the labelled heads, for the card; the whole label table, for probe.zoo.check_requirements)."""
    from probe.heads.label import LabelConfig, label_model
    from probe.models import load

    options = {key: tuple(value) if isinstance(value, list) else value for key, value in (label_config or {}).items()}
    table = label_model(load(str(directory)), LabelConfig(**options))
    labelled = table[table["label"]]
    labels = {t: sorted(g.loc[g["label"], "head_name"]) for t, g in table.groupby("head_type", sort=False)}
    scores = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
              for row in labelled[["head_name", "head_type", "score", "ci_low", "chance", "accuracy",
                                   "baseline_accuracy"]].to_dict("records")]
    return {"labels": labels, "labelled_scores": scores}, table


# ---------------------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------------------


def train(name: str, seed: int, out: Path, threads: int = 1, overrides: dict | None = None,
          label: bool = True, checkpoint_steps: tuple[int, ...] = ()) -> dict:
    """Train organism `name` with `seed`, save it to `out` and return its card (also written to out/card.json).

    `checkpoint_steps`: also save the model after each of these numbers of optimizer steps (0: the initial weights)
    to out/step-N/, a model directory `probe.models.load` reads (with a small card.json: step, seed, training loss).
    The training itself is unchanged: the same seed gives the same final model with or without checkpoints."""
    from tqdm import tqdm

    config = ORGANISMS[name]
    if overrides:
        config = TrainConfig(**{**asdict(config), **overrides})
    torch.set_num_threads(threads)
    tokenizer = build_tokenizer(config)
    model = build_model(config, tokenizer, seed)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay, betas=(0.9, 0.98))
    generator = torch.Generator().manual_seed(seed)

    started = time.perf_counter()
    model.train()
    running = math.nan
    wanted = sorted(set(checkpoint_steps))
    if wanted and (wanted[0] < 0 or wanted[-1] > config.steps):
        raise ValueError(f"checkpoint steps must lie in 0..{config.steps} (the run's steps), got {wanted}")
    bar = tqdm(range(config.steps), desc=f"train {name}", file=sys.stderr, mininterval=2.0)
    for step in bar:
        if step in wanted:
            save_checkpoint(model, tokenizer, out / f"step-{step}", name, seed, step, running)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        tokens, targets = make_batch(config, tokenizer, generator, config.batch)
        running = optimizer_step(model, optimizer, trainable, tokens, targets, running)
        if step % 50 == 0:
            bar.set_postfix(loss=f"{running:.3f}")
    for number, stage in enumerate(config.needle_stages, start=1):
        running = needle_stage(model, config, tokenizer, seed + number, *stage)
    train_seconds = time.perf_counter() - started
    model.eval()
    if config.steps in wanted:
        save_checkpoint(model, tokenizer, out / f"step-{config.steps}", name, seed, config.steps, running)

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    card = {
        "name": name,
        "task": config.task,
        "architecture": (f"{type(model).__name__}, "
                         + ("with MLPs (width 4 x embedding)" if config.mlp else
                            "attention-only: MLPs of width 1 with weights zeroed and frozen (they add exactly 0)")
                         + "; " + ("rotary positions" if config.arch == "llama"
                                   else "learned absolute positions, no dropout")
                         + "; tied embeddings"),
        "config": {k: v for k, v in asdict(config).items() if k not in ("task", "requirements", "label_config")},
        "parameters": sum(p.numel() for p in trainable),
        "vocabulary": f"{len(tokenizer)} tokens: <unk>, <pad>, <bos> and " + VOCABULARY[config.data](config)
                      + "; every text starts with <bos>",
        "data_generator": f"probe.zoo.data.{GENERATORS[config.data]}",
        "seed": seed,
        "steps": config.steps,
        "threads": threads,
        "train_seconds": round(train_seconds, 1),
        "final_train_loss": round(running, 4),
        "evaluation": evaluate(model, config, tokenizer, seed),
        "requirements": config.requirements,
        "command": f"python -m probe.zoo.train {name} --seed {seed} --out DIR",
    }
    if label:
        add_labels(card, config, out)
    return write_card(card, out)


def add_labels(card: dict, config: TrainConfig, out: Path) -> None:
    """Run the classifier on the organism in `out` with the card's label settings and put its labels, the settings
    and the requirements it misses into `card`."""
    from probe.zoo import check_requirements

    summary, table = classifier_labels(out, config.label_config)
    card["classifier"] = ("probe.heads.label.label_model with the default LabelConfig()" if not config.label_config
                          else f"probe.heads.label.label_model with LabelConfig(**{config.label_config})")
    if config.label_config:
        card["label_config"] = config.label_config
    card.update(summary)
    card["requirements_failed"] = check_requirements(table, config.requirements)


def write_card(card: dict, out: Path) -> dict:
    """card.json and MODEL_CARD.md into `out`, files made readable; returns `card`."""
    (out / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    (out / "MODEL_CARD.md").write_text(model_card_markdown(card))
    readable(out)
    return card


def relabel(name: str, out: Path) -> dict:
    """Run the classifier on the trained organism in `out` (its card.json written by :func:`train`) and update the
    card's labels, requirements and MODEL_CARD.md; the weights are not touched."""
    card = json.loads((out / "card.json").read_text())
    config = ORGANISMS[name]
    card["requirements"] = config.requirements
    add_labels(card, config, out)
    return write_card(card, out)


def optimizer_step(model, optimizer, trainable, tokens: torch.Tensor, targets: torch.Tensor, running: float) -> float:
    """One step on the masked next-token loss (gradients clipped to norm 1); returns the running loss (EMA 0.98)."""
    loss = masked_loss(model, tokens, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    optimizer.step()
    value = loss.item()
    return value if math.isnan(running) else 0.98 * running + 0.02 * value


def needle_stage(model, config: TrainConfig, tokenizer, data_seed: int, steps: int, lr: float, min_length: int,
                 length: int, batch: int) -> float:
    """One later stage of the retrieval organism (config.needle_stages): needles alone, a fresh AdamW at a constant
    lr, prompts log-uniform in [min_length, length] and a data generator seeded with `data_seed`, so a stage depends
    on the weights before it and the seed only. Returns the running training loss."""
    from tqdm import tqdm

    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=config.weight_decay, betas=(0.9, 0.98))
    generator = torch.Generator().manual_seed(data_seed)
    model.train()
    running = math.nan
    bar = tqdm(range(steps), desc=f"needles {min_length}-{length}", file=sys.stderr, mininterval=2.0)
    for step in bar:
        size = data.block_length(generator, min_length, length)
        tokens, targets = data.needle_haystack(generator, batch, size, word_ids(tokenizer),
                                               tokenizer.bos_token_id, config.needle_len, config.key_len)
        running = optimizer_step(model, optimizer, trainable, tokens, targets, running)
        if step % 50 == 0:
            bar.set_postfix(loss=f"{running:.3f}")
    return running


def save_checkpoint(model, tokenizer, directory: Path, name: str, seed: int, step: int, loss: float) -> None:
    """One training checkpoint: what save_pretrained writes plus card.json {name, seed, step, train_loss}."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    card = {"name": name, "seed": seed, "step": step,
            "train_loss": None if math.isnan(loss) else round(loss, 4),  # running mean of the steps before it
            "command": f"python -m probe.zoo.train {name} --seed {seed} --checkpoint-steps ..."}
    (directory / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    readable(directory)


def readable(directory: Path) -> None:
    """save_pretrained writes the weights 0600; shipped files must be readable by every user of an install."""
    for file in directory.iterdir():
        if file.is_file():
            file.chmod(0o644)


ESM_RANDOM = "esm-random"


def save_esm_random(seed: int, out: Path, label: bool = True) -> dict:
    """zoo:esm-random: a tiny ESM-2-shaped EsmForMaskedLM with RANDOM weights and a random, non-zero contact
    head (probe.zoo.tiny). Untrained: it exists so the protein views and contact code run offline."""
    from probe.zoo.tiny import save_tiny

    save_tiny("esm", out, seed=seed)
    card = {
        "name": ESM_RANDOM,
        "task": "none: UNTRAINED, random weights. It exists only so the protein views and the contact code work "
                "offline; its attention and contacts mean nothing",
        "architecture": "EsmForMaskedLM (ESM-2 layout: rotary positions, 33-token ESM vocabulary), 2 layers, "
                        "4 heads, width 32, random contact regression (probe.zoo.tiny.build_tiny('esm'))",
        "seed": seed,
        "steps": 0,
        "command": f"python -m probe.zoo.train {ESM_RANDOM} --seed {seed} --out DIR",
        "requirements": {"present": [], "absent": []},
    }
    if label:
        card["classifier"] = "probe.heads.label.label_model with the default LabelConfig()"
        card.update(classifier_labels(out)[0])
        card["requirements_failed"] = []
    (out / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    lines = [f"# zoo:{ESM_RANDOM}", "", "**UNTRAINED.** " + card["task"] + ".", "",
             f"**Architecture.** {card['architecture']}.", "", f"**Built by** `{card['command']}` (no training).", ""]
    if "labels" in card:
        lines += [f"**Labels** given by {card['classifier']} on random weights (effect over chance, clustered bootstrap, Benjamini–Hochberg FDR 0.05; the tests check the requirements below, not this list):", ""]
        lines += [f"- {head_type}: {', '.join(heads) or 'none'}" for head_type, heads in card["labels"].items()]
        lines.append("")
    lines += ["Machine-readable: `card.json` next to this file.", ""]
    (out / "MODEL_CARD.md").write_text("\n".join(lines))
    readable(out)
    return card


def model_card_markdown(card: dict) -> str:
    """MODEL_CARD.md from card.json (the JSON is the machine-readable truth)."""
    config = card["config"]
    lines = [
        f"# zoo:{card['name']}",
        "",
        f"**Task.** {card['task']}.",
        "",
        f"**Architecture.** {card['architecture']}. {config['n_layer']} layers, {config['n_head']} heads, width "
        f"{config['n_embd']}, {config['n_positions']} positions, {card['parameters']} trainable parameters.",
        "",
        f"**Vocabulary.** {card['vocabulary']}.",
        "",
        f"**Data.** `{card['data_generator']}`; the loss is computed only on tokens predictable from context.",
        "",
        f"**Training.** `{card['command']}`: seed {card['seed']}, {card['steps']} steps of batch {config['batch']}, "
        f"AdamW lr {config['lr']} ({config['warmup']} warm-up steps, cosine to lr/10), {card['threads']} CPU "
        f"thread(s): {card['train_seconds']} s measured. Final training loss {card['final_train_loss']} nats.",
        "",
        "**Evaluation** (held-out):",
        "",
    ]
    lines += [f"- {key}: {value}" for key, value in card["evaluation"].items()]
    if "labels" in card:
        lines += ["", f"**Labels** given by {card['classifier']} (effect over chance, clustered bootstrap, Benjamini–Hochberg FDR 0.05; the tests check the requirements below, not this list):", ""]
        lines += [f"- {head_type}: {', '.join(heads) or 'none'}" for head_type, heads in card["labels"].items()]
        lines += ["", "Requirements: " + json.dumps(card["requirements"])
                  + (" — all met." if not card.get("requirements_failed")
                     else " — FAILED: " + "; ".join(card["requirements_failed"]))]
    lines += ["", "Machine-readable: `card.json` next to this file.", ""]
    return "\n".join(lines)


if __name__ == "__main__":  # the command line lives with the other commands (probe/commands/train.py)
    from probe.commands.train import main

    sys.exit(main())
