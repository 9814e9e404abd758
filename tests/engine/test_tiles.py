"""The fused CPU tile kernel (probe.engine.tiles) equals the softmax written out and the torch path of the
single pass: α, outputs, log-sum-exp and row entropy, with causal and padding masks, grouped-query heads,
fully masked rows and partial tiles; the engine with the kernel equals eager attention and the model's own
logits."""

from __future__ import annotations

import math
import os

import pytest
import torch

from probe import models
from probe.engine import DenseSink, capture, capture_attention, tiles
from tests.conftest import eager_attention
from tests.engine.test_capture import SENTENCE, TOL, EntropyRecorder, max_diff, text_inputs


def test_the_kernel_builds_where_it_can():
    """Where a compiler and an AVX2/AVX-512 CPU with MKL are present the kernel must build (CI has them: a
    build that silently broke would leave every long capture on the slower path)."""
    reason = tiles.unavailable_reason()
    if os.environ.get("CI"):
        assert reason is None, reason
    if reason is not None:
        pytest.skip(reason)
    assert tiles.available()


needs_kernel = pytest.mark.skipif(not tiles.available(), reason="the tile kernel is not available here")


def reference(query, key, value, mask, scale, causal):
    """Softmax written out in float64: α [batch·kv group query key], output, lse (0 for a fully masked
    row)."""
    scores = torch.einsum("bgqd,bkd->bgqk", query.double(), key.double()) * scale
    if mask is not None:
        scores = scores + mask
    if causal:
        n_query, n_key = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(n_query, n_key, dtype=torch.bool).triu(1), -math.inf)
    lse = torch.logsumexp(scores, -1)
    alpha = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
    return alpha, alpha @ value.double()[:, None], lse.masked_fill(torch.isneginf(lse), 0.0)


def run_blocks(query, key, value, mask, scale, causal, block_rows, q_tile, k_tile, keep_alpha=True,
               weights=None):
    """The kernel over blocks of `block_rows` query rows, as the single pass calls it: (α padded to all keys,
    or None when not kept, output, lse, each row's largest α, and Σ_j α_ij w_jf when `weights` [batch|1 key
    feature] are given)."""
    kv_batch, group, n_query, _ = query.shape
    n_key, dim_v = key.shape[1], value.shape[-1]
    alphas, outputs, lses, maxima, sums = [], [], [], [], []
    weights_t = None if weights is None else weights.transpose(1, 2).contiguous()  # [batch|1 feature key]
    for start in range(0, n_query, block_rows):
        stop = min(start + block_rows, n_query)
        key_stop = stop if causal else n_key
        # every entry written
        alpha = torch.full((kv_batch, group, stop - start, key_stop), float("nan")) if keep_alpha else None
        output = torch.empty(kv_batch, group, stop - start, dim_v)
        lse = torch.empty(kv_batch, group, stop - start)
        max_alpha = torch.full((kv_batch, group, stop - start), float("nan"))
        reduced = torch.full((kv_batch, group, stop - start, 0 if weights is None else weights.shape[-1]),
                             float("nan"))
        nothing = torch.empty(0)
        torch.ops.probe_tiles.tile_block(
            query, key.transpose(1, 2).contiguous(), value, nothing if mask is None else mask,
            nothing if alpha is None else alpha, output, lse, max_alpha,
            nothing if weights_t is None else weights_t, reduced, scale, start, stop, key_stop, causal,
            q_tile, k_tile)
        sums.append(reduced)
        if keep_alpha:
            alphas.append(torch.nn.functional.pad(alpha, (0, n_key - key_stop)))
        outputs.append(output)
        lses.append(lse)
        maxima.append(max_alpha)
    return (torch.cat(alphas, 2) if keep_alpha else None), torch.cat(outputs, 2), torch.cat(lses, 2), \
        torch.cat(maxima, 2), torch.cat(sums, 2)


@needs_kernel
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("tile", [(16, 32), (tiles.Q_TILE, tiles.K_TILE)])
def test_block_equals_the_softmax_written_out(causal, masked, tile):
    """Batch 2, 2 kv heads × 3 query heads each, 150 queries in blocks of 40 (partial query and key tiles),
    value width ≠ query width; the mask has a head axis, finite biases and fully masked rows."""
    torch.manual_seed(0)
    batch, kv, group, n, dim, dim_v = 2, 2, 3, 150, 8, 12
    query = torch.randn(batch * kv, group, n, dim) * 2
    key, value = torch.randn(batch * kv, n, dim), torch.randn(batch * kv, n, dim_v)
    mask = None
    if masked:
        mask = torch.randn(batch, kv * group, n, n) * 0.5  # [batch head query key]
        mask[0, :, :, :7] = -math.inf  # padding keys
        mask[1, 4, 100:, :] = -math.inf  # fully masked rows of one head
        mask[1, :, 140:, :] = -math.inf  # fully masked rows of every head
    scale = dim ** -0.5
    alpha, output, lse, max_alpha, _ = run_blocks(query, key, value, mask, scale, causal, 40, *tile)
    mask_by_kv = None if mask is None else mask.reshape(batch * kv, group, n, n)
    want_alpha, want_output, want_lse = reference(query, key, value, mask_by_kv, scale, causal)
    assert not alpha.isnan().any()
    assert (alpha.double() - want_alpha).abs().max() <= 1e-6
    assert (output.double() - want_output).abs().max() <= 1e-5
    assert (lse.double() - want_lse).abs().max() <= 1e-5
    if masked:  # fully masked rows: α = 0, output 0, lse 0, as the CPU kernel gives them
        assert alpha[2:, 1, 140:].abs().max() == 0 and output[2:, :, 140:].abs().max() == 0
        assert lse[3, 1, 100:].abs().max() == 0 and want_alpha[3, 1, 99].sum() > 0.99
    if causal:  # nothing after the query
        assert alpha.triu(1).abs().max() == 0
    assert want_alpha.max() > 0.1  # not a comparison of near-uniform rows only
    assert (max_alpha.double() - want_alpha.amax(-1)).abs().max() <= 1e-6  # 0 on a fully masked row
    # without an α block the same output, lse and maxima, and the row reductions Σ_j α_ij w_jf with weights
    # per batch row and shared by the batch: α never leaves the kernel
    weights = torch.randn(batch, n, 3)  # [batch key feature]
    for given in (weights, weights[:1]):
        _, kept_output, kept_lse, kept_max, sums = run_blocks(query, key, value, mask, scale, causal, 40,
                                                              *tile, keep_alpha=False, weights=given)
        assert torch.equal(kept_output, output) and torch.equal(kept_lse, lse)
        assert torch.equal(kept_max, max_alpha)
        by_kv = given.double().expand(batch, -1, -1).repeat_interleave(kv, 0)[:, None]  # [b·kv 1 key feature]
        assert (sums.double() - want_alpha @ by_kv).abs().max() <= 1e-5


@pytest.fixture
def kernel_everywhere(monkeypatch):
    """The engine takes the kernel at every length, and counts its calls."""
    if not tiles.available():
        pytest.skip("the tile kernel is not available here")
    calls = []
    kernel = tiles.tile_block

    def counted(*args, **kwargs):
        calls.append(args)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(tiles, "MIN_KEYS", 1)
    monkeypatch.setattr(tiles, "MIN_REDUCE_KEYS", 1)
    monkeypatch.setattr(tiles, "tile_block", counted)
    return calls


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama"])
def test_engine_with_the_kernel_equals_eager_and_the_models_logits(tiny_dir, arch, kernel_everywhere):
    """GPT-2 (causal), BERT (a padded batch: the padding mask), Llama (grouped-query heads, padded)."""
    loaded = models.load(str(tiny_dir(arch)))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE, "the cat saw the dog"])
    ours = capture_attention(loaded.model, inputs)
    assert kernel_everywhere  # the kernel really ran
    assert max_diff(ours, eager_attention(loaded.model, inputs), inputs["attention_mask"]) <= TOL
    with torch.no_grad():
        plain = loaded.model(**inputs).logits
        with capture(loaded.model, DenseSink()):
            engine = loaded.model(**inputs).logits
    keep = inputs["attention_mask"].bool()
    assert (engine - plain)[keep].abs().max() <= 1e-4


@pytest.mark.parametrize("arch", ["gpt2", "bert"])
def test_engine_row_entropy_with_the_kernel_equals_eager(tiny_dir, arch, kernel_everywhere):
    """The row entropy from the kernel's α·[V | K] product (no logarithm) equals −Σ α log α of eager."""
    loaded = models.load(str(tiny_dir(arch)))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE, "the cat saw the dog"])
    recorder = EntropyRecorder()
    with capture(loaded.model, recorder), torch.no_grad():
        loaded.model(**inputs)
    assert kernel_everywhere
    reference_alpha = eager_attention(loaded.model, inputs).double()
    expected = -torch.xlogy(reference_alpha, reference_alpha).sum(-1)  # [batch layer head query]
    valid = inputs["attention_mask"].bool()
    for layer, heads, rows, entropy in recorder.got:
        keep = valid[:, rows][:, None]
        assert ((entropy.double() - expected[:, layer][:, list(heads)][:, :, rows]).abs() * keep).max() <= TOL
    assert expected.max() > 0.5


def test_short_inputs_keep_the_torch_path(tiny_dir, monkeypatch):
    """Below MIN_KEYS (and MIN_REDUCE_KEYS) the kernel is never called (there the two cost the same)."""
    calls = []
    monkeypatch.setattr(tiles, "tile_block", lambda *args: calls.append(args))
    loaded = models.load(str(tiny_dir("gpt2")))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE])
    assert inputs["input_ids"].shape[1] < min(tiles.MIN_KEYS, tiles.MIN_REDUCE_KEYS)
    capture_attention(loaded.model, inputs)
    assert not calls


def test_reduce_only_layers_take_the_kernel_from_their_own_length(tiny_dir, monkeypatch):
    """Between MIN_REDUCE_KEYS and MIN_KEYS the kernel runs for a sink that wants only row reductions (no α
    block) and not for a dense sink; below MIN_REDUCE_KEYS for neither."""
    from probe.engine import DenseSink, KeyMassSink

    if not tiles.available():
        pytest.skip("the tile kernel is not available here")
    loaded = models.load(str(tiny_dir("gpt2")))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE])
    n = inputs["input_ids"].shape[1]
    calls = []
    kernel = tiles.tile_block

    def counted(*args, **kwargs):
        calls.append(args)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(tiles, "tile_block", counted)
    monkeypatch.setattr(tiles, "MIN_KEYS", n + 1)
    for min_reduce, sink, expected in ((n, KeyMassSink({"all": torch.ones(1, n)}), True),
                                       (n, DenseSink(), False),
                                       (n + 1, KeyMassSink({"all": torch.ones(1, n)}), False)):
        monkeypatch.setattr(tiles, "MIN_REDUCE_KEYS", min_reduce)
        calls.clear()
        with capture(loaded.model, sink), torch.no_grad():
            loaded.model(**inputs)
        assert bool(calls) == expected, (min_reduce, type(sink).__name__)
        assert all(call[4] is None for call in calls)  # reductions only: no α block given


def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("PROBE_TILE_KERNEL", "0")
    assert tiles.unavailable_reason() == "PROBE_TILE_KERNEL=0"


def test_a_cached_build_needs_no_compiler(monkeypatch):
    """Once built, the kernel loads from its cache on a machine without a compiler; with neither, the reason
    names the fix."""
    if not tiles.available():
        pytest.skip("the tile kernel is not available here")
    monkeypatch.setenv("CXX", "no-such-compiler")
    assert tiles._library().exists()
    assert tiles.unavailable_reason() is None
    monkeypatch.setenv("PROBE_CACHE", "/nonexistent/probe-cache")
    assert "apt-get install g++" in tiles.unavailable_reason()


def test_an_unwritable_cache_is_one_line(monkeypatch, tmp_path, capsys):
    """Issue 44: a cache that cannot be written gives one line (why, and the fix), not "building ..." and then
    "not available"."""
    if tiles.unavailable_reason() is not None:
        pytest.skip(tiles.unavailable_reason())
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # the cache's folders cannot be made under a file (even as root)
    monkeypatch.setenv("PROBE_CACHE", str(blocker))
    monkeypatch.setattr(tiles, "unavailable_reason", lambda: None)  # a compiler is here; the build is not
    tiles.available.cache_clear()
    try:
        assert tiles.available() is False
    finally:
        tiles.available.cache_clear()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "not available" in err[0] and "PROBE_CACHE" in err[0] and "building" not in err[0]
