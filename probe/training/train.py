"""Train a model organism from scratch: ``probe train NAME --seed S --out DIR``.

Writes DIR/ with safetensors weights, config.json, tokenizer files, card.json, MODEL_CARD.md and labels.csv
(the label table, :mod:`probe.training.cards`). The models are transformers models made attention-only: MLPs
of width 1 whose weights are zeroed and frozen, so every MLP adds exactly 0 to the residual stream and
``from_pretrained`` loads them like any checkpoint. The recipes are :mod:`probe.training.organisms`.

``checkpoint_steps=(0, 50, 100, ...)`` also saves the model after those optimizer steps to DIR/step-N/ (for
sweeps: ``probe label --model DIR --revisions step-0,step-50,...`` and ``probe history --model DIR``); the run
itself is unchanged. A recipe with ``checkpoints=N`` saves N log-spaced steps from 0 when none are asked for
(:func:`log_spaced_steps`). A run with checkpoints also writes DIR/train_loss.csv, the loss of every optimizer
step.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm import tqdm

from probe.errors import ProbeError
from probe.training import data, incontext, text
from probe.training.cards import add_labels, label_config_of, readable, write_card
from probe.training.organisms import (
    GENERATORS,
    ORGANISMS,
    VOCABULARY,
    TrainConfig,
    build_model,
    build_tokenizer,
    make_batch,
    word_ids,
)
from probe.training.repetition import repetition


def learning_rate(step: int, config: TrainConfig) -> float:
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    floor = config.lr_floor  # 0.1: 0.1 + 0.9 · cosine, bit for bit the schedule before lr_floor existed
    return config.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def log_spaced_steps(total: int, count: int) -> tuple[int, ...]:
    """`count` checkpoint steps from 0 to `total`: 0, then steps log-spaced from 1 to `total` (rounded, so
    the early ones are every step and fewer than `count` may remain). () when `count` is 0."""
    if count <= 0:
        return ()
    if count == 1 or total == 0:
        return (0,)
    ratio = total ** (1 / (count - 2)) if count > 2 else float(total)
    return tuple(sorted({0, total, *(min(total, round(ratio ** k)) for k in range(count - 1))}))


def masked_loss(model, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats) over the predictable positions only."""
    logits = model(input_ids=tokens).logits  # [batch position vocab]
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                                             ignore_index=data.IGNORE)


# ------------------------------------------------------------------------------------------------------------
# Evaluation
# ------------------------------------------------------------------------------------------------------------


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
        batches = [make_batch(config, tokenizer, generator, batch, max_distractors=1)
                   for _ in range(n_batches)]
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
                "sentences": "held-out sentences; target: the next sentence's first word, at each sentence "
                             "end"}
        result.update(probe=what[config.data], in_context_loss=round(loss, 4), accuracy=round(accuracy, 4))
        if config.data == "causality":
            result["nearest_first_agreement_baselines"] = 0.5  # balanced by construction (probesets)
        return result
    if config.data == "natural_text":
        return natural_text_evaluation(model, tokenizer, text.held_out_split(config.corpus_split))
    # teacher-forced answer accuracy at the longest training length and far beyond it
    if config.data == "needle":
        for length, n in ((config.length, n_batches), (4096, 2)):
            batches = [make_batch(config, tokenizer, generator, 8, length=length) for _ in range(n)]
            loss, accuracy = held_out_loss(model, batches)
            result[f"answer_loss_{length}"], result[f"answer_accuracy_{length}"] = round(loss,
                4), round(accuracy, 4)
        result["probe"] = ("<bos> haystack key needle haystack key at random depth; target: the needle's "
                           "tokens (teacher-forced)")
        return result
    ids, bos = word_ids(tokenizer), tokenizer.bos_token_id
    batches = [data.repeat_probe(generator, batch, ids, bos, config.eval_min_block, config.eval_max_block)
               for _ in range(n_batches)]
    loss, accuracy = held_out_loss(model, batches)
    result.update(probe="<bos> + one random block of random length "
                        f"{config.eval_min_block}-{config.eval_max_block} + its copy; target: the copy's "
                        "tokens after its first",
                  in_context_loss=round(loss, 4), accuracy=round(accuracy, 4))
    if config.min_block == config.max_block:  # the control: also on its own fixed period
        period = config.min_block
        batches = [data.repeat_probe(generator, batch, ids, bos, period, period) for _ in range(n_batches)]
        loss, accuracy = held_out_loss(model, batches)
        result.update(fixed_period=period, in_context_loss_fixed_period=round(loss, 4),
                      accuracy_fixed_period=round(accuracy, 4))
    return result


def natural_text_evaluation(model, tokenizer, split: str = text.HELD_OUT_SPLIT) -> dict:
    """The natural-text organisms' card numbers, on the held-out split `split`: the mean loss over tokens 1 …
    ICL_LATE of every held-out passage that long, the loss at the two ICL tokens and Olsson's ICL score
    (:mod:`probe.training.incontext`)."""
    rows = text.held_out_rows(tokenizer, incontext.ICL_LATE, split)
    losses = incontext.position_losses(model, rows)  # [row position]
    early, late = incontext.ICL_EARLY, incontext.ICL_LATE
    where = ("the standard library's held-out modules (40-line passages)" if split == text.CODE_HELD_OUT_SPLIT
             else f"GAP's {split} split (held out)")
    return {"probe": f"the first {late} tokens of every passage of {where} that has {late}; in-context "
                     f"learning score = loss at token {late} - loss at "
                     f"token {early} (Olsson et al. 2022, positions 500 and 50 scaled to the passages)",
            "held_out_passages": len(rows), "held_out_loss": round(float(losses.mean()), 4),
            f"loss_at_token_{early}": round(float(losses[:, early - 1].mean()), 4),
            f"loss_at_token_{late}": round(float(losses[:, late - 1].mean()), 4),
            "icl_score": round(incontext.icl_score(losses, early, late), 4)}


def train(name: str, seed: int, out: Path, threads: int = 1, overrides: dict | None = None,
          label: bool = True, checkpoint_steps: tuple[int, ...] = ()) -> dict:
    """Train organism `name` with `seed`, save it to `out` and return its card (also written to
    out/card.json).

    `checkpoint_steps`: also save the model after each of these numbers of optimizer steps (0: the initial
    weights) to out/step-N/, a model directory `probe.models.load` reads (with a small card.json: step, seed,
    training loss). The training itself is unchanged: the same seed gives the same final model with or without
    checkpoints."""
    config = ORGANISMS[name]
    if overrides:
        config = TrainConfig(**{**asdict(config), **overrides})
    torch.set_num_threads(threads)
    tokenizer = build_tokenizer(config)
    model = build_model(config, tokenizer, seed)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay,
                                  betas=(0.9, 0.98))
    generator = torch.Generator().manual_seed(seed)

    started = time.perf_counter()
    model.train()
    running = math.nan
    wanted = sorted(set(checkpoint_steps or config.checkpoint_steps
                        or log_spaced_steps(config.steps, config.checkpoints)))
    step_losses: list[float] = []
    if wanted and (wanted[0] < 0 or wanted[-1] > config.steps):
        raise ValueError(f"checkpoint steps must lie in 0..{config.steps} (the run's steps), got {wanted}")
    identity = {"name": name, "seed": seed, "config": repr(asdict(config)), "checkpoints": wanted}
    first, running, step_losses = resume_state(out, identity, model, optimizer, generator) if wanted else (
        0, running, step_losses)
    bar = tqdm(range(first, config.steps), desc=f"train {name}", file=sys.stderr, mininterval=2.0,
               initial=first, total=config.steps)
    for step in bar:
        if step in wanted:
            save_checkpoint(model, tokenizer, out / f"step-{step}", name, seed, step, running, config)
        if wanted and step > first and (step in wanted or step % RESUME_EVERY == 0):
            save_state(out, identity, step, model, optimizer, generator, running, step_losses)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        tokens, targets = make_batch(config, tokenizer, generator, config.batch)
        running, value = optimizer_step(model, optimizer, trainable, tokens, targets, running)
        step_losses.append(value)
        if step % 50 == 0:
            bar.set_postfix(loss=f"{running:.3f}")
    for number, stage in enumerate(config.needle_stages, start=1):
        running = needle_stage(model, config, tokenizer, seed + number, *stage)
    train_seconds = time.perf_counter() - started
    model.eval()
    if config.steps in wanted:
        save_checkpoint(model, tokenizer, out / f"step-{config.steps}", name, seed, config.steps, running,
                        config)

    out.mkdir(parents=True, exist_ok=True)
    if wanted:  # beside the checkpoints (the shipped organisms' folders stay as they are)
        write_loss_log(out / TRAIN_LOSS_FILE, step_losses)
        (out / STATE_FILE).unlink(missing_ok=True)  # the run is complete: nothing to resume
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    card = {
        "name": name,
        "task": config.task,
        "architecture": (f"{type(model).__name__}, "
                         + ("with MLPs (width 4 x embedding)" if config.mlp else
                            "attention-only: MLPs of width 1 with weights zeroed and frozen (they add "
                            "exactly 0)")
                         + "; " + ("rotary positions" if config.arch == "llama"
                                   else "learned absolute positions, no dropout")
                         + "; tied embeddings"),
        "config": {k: v for k,
                   v in asdict(config).items() if k not in ("task", "requirements", "label_config")},
        "parameters": sum(p.numel() for p in trainable),
        "vocabulary": f"{len(tokenizer)} tokens: <unk>, <pad>, <bos> and " + VOCABULARY[config.data](config)
                      + "; every text starts with <bos>",
        "data_generator": f"probe.training.data.{GENERATORS[config.data]}",
        "seed": seed,
        "steps": config.steps,
        "threads": threads,
        "train_seconds": round(train_seconds, 1),
        "final_train_loss": round(running, 4),
        "evaluation": evaluate(model, config, tokenizer, seed),
        **data_figures(config, tokenizer),
        "requirements": config.requirements,
        "command": f"probe train {name} --seed {seed} --out DIR",
    }
    if label:
        add_labels(card, out, label_config_of(config.label_config), config.requirements)
    return write_card(card, out)



def optimizer_step(model, optimizer, trainable, tokens: torch.Tensor, targets: torch.Tensor,
                   running: float) -> tuple[float, float]:
    """One step on the masked next-token loss (gradients clipped to norm 1); returns the running loss (EMA
    0.98) and the step's own loss."""
    loss = masked_loss(model, tokens, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    optimizer.step()
    value = loss.item()
    return (value if math.isnan(running) else 0.98 * running + 0.02 * value), value


def needle_stage(model, config: TrainConfig, tokenizer, data_seed: int, steps: int, lr: float,
                 min_length: int, length: int, batch: int) -> float:
    """One later stage of the retrieval organism (config.needle_stages): needles alone, a fresh AdamW at a
    constant lr, prompts log-uniform in [min_length, length] and a data generator seeded with `data_seed`, so
    a stage depends on the weights before it and the seed only. Returns the running training loss."""
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
        running, _ = optimizer_step(model, optimizer, trainable, tokens, targets, running)
        if step % 50 == 0:
            bar.set_postfix(loss=f"{running:.3f}")
    return running


TRAIN_LOSS_FILE = "train_loss.csv"
STATE_FILE = "train_state.pt"  # a run with checkpoints: where it resumes from after an interruption
RESUME_EVERY = 1000  # steps between saved states (and at every checkpoint)


def save_state(out: Path, identity: dict, step: int, model, optimizer, generator: torch.Generator,
               running: float, losses: list[float]) -> None:
    """The state a run resumes from before step `step` (written atomically: a temporary file, then
    renamed): weights, optimizer, data generator, running loss and every step's loss so far."""
    out.mkdir(parents=True, exist_ok=True)
    temporary = out / (STATE_FILE + ".tmp")
    torch.save({"identity": identity, "step": step, "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "generator": generator.get_state(), "running": running,
                "losses": list(losses)}, temporary)
    temporary.replace(out / STATE_FILE)


def resume_state(out: Path, identity: dict, model, optimizer,
                 generator: torch.Generator) -> tuple[int, float, list[float]]:
    """(first step, running loss, step losses) of a run: where :func:`save_state` left it in `out` when the
    same organism, seed, recipe and checkpoints were interrupted there (model, optimizer and generator
    restored in place, so the run ends as an uninterrupted one would), else (0, NaN, []). A state of another
    run is one ProbeError line, never silently overwritten or used.

    Examples
    --------
    >>> import tempfile
    >>> from probe.training.train import resume_state, save_state
    >>> model = torch.nn.Linear(2, 2)
    >>> optimizer = torch.optim.AdamW(model.parameters())
    >>> out, identity = Path(tempfile.mkdtemp()), {"name": "demo", "seed": 0}
    >>> save_state(out, identity, 7, model, optimizer, torch.Generator().manual_seed(0), 1.5, [2.0, 1.0])
    >>> resume_state(out, identity, model, optimizer, torch.Generator())
    (7, 1.5, [2.0, 1.0])
    >>> resume_state(out, {"name": "demo", "seed": 1}, model, optimizer,
    ...              torch.Generator())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    probe.errors.ProbeError: ... is the state of another run ...
    """
    path = out / STATE_FILE
    if not path.is_file():
        return 0, math.nan, []
    state = torch.load(path, weights_only=False)
    if state.get("identity") != identity:
        raise ProbeError(f"{path} is the state of another run (organism, seed, recipe or checkpoints "
                         "differ): train into another --out folder, or delete it to start afresh")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    generator.set_state(state["generator"])
    print(f"resuming at step {state['step']} from {path}", file=sys.stderr)
    return state["step"], state["running"], list(state["losses"])


def write_loss_log(path: Path, losses: list[float]) -> None:
    """`path`: step,loss — the training loss (nats) of every optimizer step of the first stage (step k: the
    batch that step k's update was computed from, with the weights of checkpoint step-k)."""
    lines = ["step,loss", *(f"{step},{loss:.6g}" for step, loss in enumerate(losses))]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)


def data_figures(config: TrainConfig, tokenizer) -> dict:
    """The card's ``data_repetition`` for a recipe on real text (:mod:`probe.training.repetition`, windows of
    the training context); nothing for generated data."""
    if config.data != "natural_text":
        return {}
    ids = text.encode_passages(tokenizer, config.corpus_split)
    return {"data_repetition": repetition(ids, config.length).as_dict()}


def save_checkpoint(model, tokenizer, directory: Path, name: str, seed: int, step: int, loss: float,
                    config: TrainConfig) -> None:
    """One training checkpoint: what save_pretrained writes plus card.json {name, seed, step, train_loss, the
    training text (``config``: ``data``, ``corpus_split``, what ``probe history`` measures on)}; the recipe's
    ``checkpoint_dtype`` "float16" stores the weights in half precision (config.json keeps the model's
    float32, so the checkpoint loads as float32: each weight rounded to float16 once)."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    if config.checkpoint_dtype == "float16":
        store_half(directory / "model.safetensors")
    tokenizer.save_pretrained(directory)
    card = {"name": name, "seed": seed, "step": step,
            "train_loss": None if math.isnan(loss) else round(loss, 4),  # running mean of the steps before it
            "config": {"data": config.data, "corpus_split": config.corpus_split},
            "command": f"probe train {name} --seed {seed} --checkpoint-steps ..."}
    (directory / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    readable(directory)


def store_half(path: Path) -> None:
    """Rewrite a safetensors file with every floating-point tensor in float16 (its metadata kept)."""
    with safe_open(path, framework="pt") as handle:
        metadata = handle.metadata()
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    save_file({key: value.half() if value.is_floating_point() else value for key, value in tensors.items()},
              path, metadata=metadata)

