"""The Python-source organisms' text and recipe (issue 54), and the training loop's resumption: fast (no real
training; the resumption runs 30 steps of the tiny induction recipe)."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file

from probe.errors import ProbeError
from probe.training import text
from probe.training.organisms import ORGANISMS

T_LAW = 10 ** 5.7  # Aoyama, Wilcox & Schneider (2025): formation after T * sqrt(B * C) tokens


def test_code_splits_are_disjoint_and_held_out_every_eighth_module():
    modules = text.stdlib_modules()
    assert len(modules) >= 2 * text.CODE_HELD_OUT_EVERY
    assert [m.name for m in modules] == sorted(m.name for m in modules)
    train, held = text.code_passages(text.CODE_SPLIT), text.code_passages(text.CODE_HELD_OUT_SPLIT)
    held_modules = modules[text.CODE_HELD_OUT_EVERY - 1::text.CODE_HELD_OUT_EVERY]
    assert len(train) == len(modules) - len(held_modules)
    # every held-out module is cut into 40-line passages, in order, none of them blank
    first = held_modules[0].read_text(encoding="utf-8").splitlines(keepends=True)
    assert held[0] == "".join(first[:text.CODE_PASSAGE_LINES])
    assert all(p.count("\n") <= text.CODE_PASSAGE_LINES and p.strip() for p in held)
    # negative control: no held-out module is trained on
    trained = set(train)
    assert not any(m.read_text(encoding="utf-8") in trained for m in held_modules)
    assert modules[0].read_text(encoding="utf-8") in trained  # and the first module is (positive)


def test_passages_dispatch_and_held_out_split():
    from probe.heads.corpus import gap_records

    assert text.passages(text.CODE_SPLIT) is text.code_passages(text.CODE_SPLIT)
    assert text.passages(text.TRAIN_SPLIT)[0] == gap_records(text.TRAIN_SPLIT)[0]["Text"]
    assert text.held_out_split(text.CODE_SPLIT) == text.CODE_HELD_OUT_SPLIT
    assert text.held_out_split(text.TRAIN_SPLIT) == text.HELD_OUT_SPLIT


@pytest.mark.parametrize("name", ["stdlib-code", "stdlib-code-1layer"])
def test_recipe_trains_past_twice_the_predicted_formation_point(name):
    config = ORGANISMS[name]
    predicted_steps = T_LAW * math.sqrt(config.batch * config.length) / (config.batch * config.length)
    assert round(predicted_steps) == 15_662  # B = 4, C = 256: 16.04 M tokens
    assert config.steps >= 2 * predicted_steps
    steps = config.checkpoint_steps
    assert steps[0] == 0 and steps[-1] == config.steps and list(steps) == sorted(set(steps))
    assert len(steps) >= 8
    # dense where the exploration runs formed (0.2-0.5x the predicted point), the prediction itself included
    assert sum(0.15 * predicted_steps <= s <= 0.55 * predicted_steps for s in steps) >= 5
    assert any(abs(s - predicted_steps) / predicted_steps < 0.05 for s in steps)
    assert config.corpus_split == text.CODE_SPLIT and config.data == "natural_text"


def test_the_learning_rate_warms_up_then_decays_to_its_floor_and_the_stdlib_recipes_keep_it_constant():
    """lr_floor 0.1 (the default) is the cosine to lr/10, bit for bit the formula before the field existed;
    1.0 keeps the peak after the warm-up (the stdlib-code recipes); 0.5 ends at half."""
    from dataclasses import replace

    from probe.training.train import learning_rate

    config = replace(ORGANISMS["natural-text"], steps=1000, warmup=100, lr=0.01)
    assert config.lr_floor == 0.1
    assert learning_rate(0, config) == 0.01 / 100 and learning_rate(99, config) == 0.01

    def before(step: int) -> float:  # the schedule as written before lr_floor
        progress = (step - 100) / 900
        return 0.01 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    assert all(learning_rate(step, config) == before(step) for step in range(100, 1000))
    assert learning_rate(999, config) == pytest.approx(0.001, rel=1e-4)
    constant = replace(config, lr_floor=1.0)
    assert {learning_rate(step, constant) for step in range(100, 1000)} == {0.01}
    assert learning_rate(999, replace(config, lr_floor=0.5)) == pytest.approx(0.005, rel=1e-4)
    assert ORGANISMS["stdlib-code"].lr_floor == ORGANISMS["stdlib-code-1layer"].lr_floor == 1.0
    with pytest.raises(ProbeError, match="lr_floor"):
        replace(config, lr_floor=1.5)


def test_the_control_differs_in_its_layers_only():
    two, one = ORGANISMS["stdlib-code"], ORGANISMS["stdlib-code-1layer"]
    differ = {k for k in two.__dataclass_fields__ if getattr(two, k) != getattr(one, k)}
    assert differ == {"task", "n_layer", "requirements"} and (two.n_layer, one.n_layer) == (2, 1)


def test_half_precision_checkpoints_load_as_float32(tmp_path):
    """checkpoint_dtype="float16" halves a checkpoint's bytes; it loads as float32, each weight the float32
    one rounded to float16 (the final model is stored in float32, untouched)."""
    from safetensors import safe_open

    from probe import models
    from probe.training import train as loop

    loop.train("induction", 0, tmp_path / "half", overrides={**RESUME, "checkpoint_dtype": "float16"},
               label=False, checkpoint_steps=(0, 30))
    loop.train("induction", 0, tmp_path / "full", overrides=RESUME, label=False, checkpoint_steps=(0, 30))
    half, full = tmp_path / "half" / "step-30", tmp_path / "full" / "step-30"
    with safe_open(str(half / "model.safetensors"), framework="pt") as handle:
        assert {handle.get_slice(key).get_dtype() for key in handle.keys()} == {"F16"}
    assert (half / "model.safetensors").stat().st_size < 0.6 * (full / "model.safetensors").stat().st_size
    loaded = models.load(str(half)).model
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    reference = _weights(full)
    for key, value in _weights(half).items():
        assert torch.equal(value.float(), reference[key].half().float())
    assert _weights(tmp_path / "half")["model.embed_tokens.weight"].dtype == torch.float32  # the final model
    with pytest.raises(ProbeError, match="checkpoint_dtype"):
        ORGANISMS["induction"].__class__(**{**ORGANISMS["induction"].__dict__, "checkpoint_dtype": "int8"})


RESUME = {"steps": 30, "batch": 4, "warmup": 5}
STEPS = (0, 10, 20, 30)


def _weights(directory):
    return load_file(str(directory / "model.safetensors"))


def test_an_interrupted_run_resumes_to_the_same_model(tmp_path, monkeypatch):
    from probe.training import train as loop

    whole = loop.train("induction", 0, tmp_path / "whole", overrides=RESUME, label=False,
                       checkpoint_steps=STEPS)
    real, calls = loop.make_batch, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 26:  # during step 25: the last saved state is step 20's
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "make_batch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        loop.train("induction", 0, tmp_path / "cut", overrides=RESUME, label=False, checkpoint_steps=STEPS)
    assert torch.load(tmp_path / "cut" / loop.STATE_FILE, weights_only=False)["step"] == 20
    monkeypatch.setattr(loop, "make_batch", real)
    resumed = loop.train("induction", 0, tmp_path / "cut", overrides=RESUME, label=False,
                         checkpoint_steps=STEPS)
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "cut")
    assert all(torch.equal(a[key], b[key]) for key in a)
    assert (tmp_path / "whole" / loop.TRAIN_LOSS_FILE).read_text() == \
        (tmp_path / "cut" / loop.TRAIN_LOSS_FILE).read_text()
    assert resumed["final_train_loss"] == whole["final_train_loss"]
    assert not (tmp_path / "cut" / loop.STATE_FILE).exists()  # complete: nothing left to resume


def test_a_state_of_another_run_is_refused(tmp_path, monkeypatch):
    from probe.training import train as loop

    real, calls = loop.make_batch, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 15:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "make_batch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        loop.train("induction", 0, tmp_path, overrides=RESUME, label=False, checkpoint_steps=STEPS)
    monkeypatch.setattr(loop, "make_batch", real)
    with pytest.raises(ProbeError, match="state of another run"):
        loop.train("induction", 1, tmp_path, overrides=RESUME, label=False, checkpoint_steps=STEPS)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_tie_embeddings_is_a_recipe_field(arch):
    """Every shipped recipe ties the unembedding to the embedding (the default, unchanged); ``tie_embeddings=
    False`` gives the unembedding its own matrix (the round-2 exploration in docs/zoo.md)."""
    from dataclasses import replace

    from probe.training.organisms import ORGANISMS, build_model, build_tokenizer

    config = replace(ORGANISMS["induction"], arch=arch)
    tokenizer = build_tokenizer(config)
    tied = build_model(config, tokenizer, seed=0)
    untied = build_model(replace(config, tie_embeddings=False), tokenizer, seed=0)
    embedding = tied.get_input_embeddings().weight
    assert tied.get_output_embeddings().weight.data_ptr() == embedding.data_ptr()
    assert untied.get_output_embeddings().weight.data_ptr() != untied.get_input_embeddings().weight.data_ptr()
    assert all(spec.tie_embeddings for spec in ORGANISMS.values())


def test_repetition_figures_on_planted_texts():
    """probe.training.repetition's three shares, hand-counted; repeats across a window's edge do not count."""
    from probe.training.repetition import repetition

    # a block of 4 distinct tokens written twice: predictions i = 1..7; bigrams (1,2), (2,3), (3,4) repeat at
    # i = 5, 6, 7 (at i = 4 the bigram (4,1) is new)
    block = [1, 2, 3, 4, 1, 2, 3, 4]
    figures = repetition([block], context=8)
    assert figures.tokens == 7
    assert figures.bigram_frequency == 3 / 7
    # predictions whose previous token occurred before: i = 5, 6, 7 (previous 1, 2, 3): all follow as before
    assert figures.reliability == 1.0
    assert figures.repeated_spans == 2 / 7  # trigrams (1,2,3) and (2,3,4) again at i = 6, 7
    # negative control: the same text cut into windows of 4 repeats nothing inside a window
    cut = repetition([block], context=4)
    assert (cut.tokens, cut.bigram_frequency, cut.repeated_spans) == (6, 0.0, 0.0)
    assert math.isnan(cut.reliability)  # no previous token ever seen before: unknown, not 0
    # an unreliable text: token 1 is followed by 2, then by 3
    unreliable = repetition([[1, 2, 1, 3]], context=4)
    assert unreliable.reliability == 0.0 and unreliable.bigram_frequency == 0.0
    with pytest.raises(ValueError, match="at least 2"):
        repetition([block], context=1)
