"""The untrained twin (probe.untrained): the model's own architecture, tokenizer and initialiser with seeded
random weights; deterministic per seed, different from the model, cached while the model lives; the
--control flag's parser."""

from __future__ import annotations

import pytest
import torch

from probe import models
from probe.errors import ProbeError
from probe.untrained import (
    DEFAULT_TWINS,
    SEED_BASE,
    Control,
    parse_control,
    twin_seeds,
    untrained_twin,
    untrained_twins,
)


@pytest.fixture(scope="module")
def esm(tiny_dir):
    return models.load(str(tiny_dir("esm", seed=5)))


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def test_twin_is_the_same_architecture_and_tokenizer_with_other_weights(esm):
    twin = untrained_twin(esm, SEED_BASE)
    assert type(twin.model) is type(esm.model) and twin.model is not esm.model
    assert twin.tokenizer is esm.tokenizer  # shared, not copied
    assert twin.model.config.to_dict() == esm.model.config.to_dict()
    mine, theirs = _state(esm.model), _state(twin.model)
    assert mine.keys() == theirs.keys()
    assert all(mine[name].shape == theirs[name].shape and mine[name].dtype == theirs[name].dtype
               for name in mine)
    matrices = [name for name in mine if mine[name].ndim == 2]  # every weight the initialiser draws at random
    assert len(matrices) > 10 and not any(torch.equal(mine[name], theirs[name]) for name in matrices)
    fields = ("kind", "residue_format", "has_contact_head", "engine", "n_layers", "n_heads")
    assert [getattr(twin, field) for field in fields] == [getattr(esm, field) for field in fields]
    assert twin.name == f"untrained twin of {esm.name} (seed {SEED_BASE})"
    assert twin.revision.startswith(f"untrained:{SEED_BASE}:") and not twin.model.training
    assert twin.device == esm.device
    inputs = models.tokenize_protein(esm, "MKTAYIAKQRQISFVK")
    with torch.no_grad():
        assert twin.model(**inputs).logits.shape == esm.model(**inputs).logits.shape


def test_twin_is_deterministic_per_seed_and_leaves_the_callers_random_state(esm):
    before = torch.random.get_rng_state()
    first, again = untrained_twin(esm, 7), untrained_twin(esm, 7)
    assert torch.equal(before, torch.random.get_rng_state())
    other = untrained_twin(esm, 8)
    a, b, c = _state(first.model), _state(again.model), _state(other.model)
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert any(not torch.equal(a[name], c[name]) for name in a if a[name].is_floating_point())


def test_twin_weights_come_from_the_class_initialiser(tiny_dir):
    """BERT's _init_weights: Linear and Embedding weights N(0, initializer_range), LayerNorm 1 and 0."""
    loaded = models.load(str(tiny_dir("protbert", hidden_size=64, intermediate_size=128)))
    with torch.no_grad():  # the model under test far from the initialiser: its twin is not a copy of it
        for parameter in loaded.model.parameters():
            parameter.fill_(0.5)
    twin = untrained_twin(loaded, SEED_BASE).model
    attention = twin.bert.encoder.layer[0].attention.self
    std = twin.config.initializer_range
    assert float(attention.query.weight.detach().std()) == pytest.approx(std, rel=0.15)
    assert float(attention.query.bias.detach().abs().max()) == 0.0
    norm = twin.bert.encoder.layer[0].output.LayerNorm
    assert bool((norm.weight == 1).all()) and bool((norm.bias == 0).all())


def test_twins_keep_the_model_dtype_and_are_cached_per_model(tiny_dir):
    loaded = models.load(str(tiny_dir("esm", seed=5)), dtype="bfloat16")
    twins = untrained_twins(loaded, 2)
    assert [twin.name.split("seed ")[-1] for twin in twins] == [f"{SEED_BASE})", f"{SEED_BASE + 1})"]
    assert all(next(twin.model.parameters()).dtype == torch.bfloat16 for twin in twins)
    assert untrained_twins(loaded, 2)[1] is twins[1]  # built once while the model lives
    assert untrained_twins(loaded, 3)[:2] == twins and len(untrained_twins(loaded, 0)) == 0
    assert twin_seeds(3) == (SEED_BASE, SEED_BASE + 1, SEED_BASE + 2)


@pytest.mark.parametrize("text, twins", [("untrained", DEFAULT_TWINS), ("untrained:5", 5), ("UNTRAINED:1", 1),
                                         ("none", 0), (" none ", 0)])
def test_parse_control(text, twins):
    assert parse_control(text) == Control(twins)
    assert Control(twins).text == ("none" if twins == 0 else f"untrained:{twins}")


@pytest.mark.parametrize("text", ["untrained:0", "untrained:65", "untrained:x", "untrained:", "random", "",
                                  "none:3"])
def test_parse_control_refuses_in_one_line(text):
    with pytest.raises(ProbeError) as error:
        parse_control(text)
    assert "--control" in str(error.value) and "\n" not in str(error.value)
