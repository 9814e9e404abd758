"""The capture engine equals eager `output_attentions` (max |Δα| ≤ 1e-5, float32) and leaves outputs
unchanged."""

from __future__ import annotations

import pytest
import torch

from probe import models
from probe.engine import (
    ENGINE_NAME,
    AttentionBlock,
    DenseSink,
    SinkNeeds,
    attention,
    capture,
    capture_attention,
)
from probe.errors import ProbeError
from tests.conftest import eager_attention

TOL = 1e-5
SENTENCE = ("the cat saw the dog and the dog saw the cat because it was one two three four five six seven "
            "eight nine")


def valid_pairs(attention_mask: torch.Tensor) -> torch.Tensor:
    """[batch 1 1 query key] True where both positions are real tokens (padding rows/columns are not
    compared)."""
    mask = attention_mask.bool()
    return mask[:, None, None, :, None] & mask[:, None, None, None, :]


def max_diff(ours, reference, attention_mask) -> float:
    return ((ours - reference).abs() * valid_pairs(attention_mask)).max().item()


def text_inputs(tokenizer, texts):
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    return {name: value for name, value in encoded.items() if name != "token_type_ids"}


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama"])
def test_alpha_equals_eager(tiny_dir, arch):
    loaded = models.load(str(tiny_dir(arch)))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE])
    ours = capture_attention(loaded.model, inputs)
    reference = eager_attention(loaded.model, inputs)
    assert ours.shape == reference.shape == (1, 2, 4, inputs["input_ids"].shape[1],
                                             inputs["input_ids"].shape[1])
    assert max_diff(ours, reference, inputs["attention_mask"]) <= TOL
    assert reference.abs().max() > 0  # the comparison is not between zeros


def test_gqa_model_really_groups_heads(tiny_dir):
    loaded = models.load(str(tiny_dir("llama")))
    assert loaded.model.config.num_key_value_heads < loaded.model.config.num_attention_heads


def test_bert_padded_batch_equals_eager(tiny_dir):
    loaded = models.load(str(tiny_dir("bert")))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE, "the cat saw the dog"])
    assert not inputs["attention_mask"].all()  # really padded
    ours = capture_attention(loaded.model, inputs)
    assert max_diff(ours, eager_attention(loaded.model, inputs), inputs["attention_mask"]) <= TOL
    # padding keys get no attention from real queries
    short = inputs["attention_mask"][1].bool()
    assert ours[1][..., short, :][..., ~short].abs().max() == 0


def test_esm_padded_batch_of_unequal_lengths_equals_eager(tiny_dir):
    loaded = models.load(str(tiny_dir("esm")))
    inputs = loaded.tokenizer(["MKTAYIAKQRQISFVKSHFSRQ", "MKTAYIAK", "GSHMSLFDFFKNKG"], return_tensors="pt",
                              padding=True)
    assert len(set(inputs["attention_mask"].sum(1).tolist())) == 3
    ours = capture_attention(loaded.model, dict(inputs))
    assert max_diff(ours, eager_attention(loaded.model, dict(inputs)), inputs["attention_mask"]) <= TOL


def test_sliding_window_shorter_than_input_equals_eager(tiny_dir):
    loaded = models.load(str(tiny_dir("mistral")))
    window = loaded.model.config.sliding_window
    inputs = text_inputs(loaded.tokenizer, [SENTENCE])
    n = inputs["input_ids"].shape[1]
    assert window < n
    ours = capture_attention(loaded.model, inputs)
    assert max_diff(ours, eager_attention(loaded.model, inputs), inputs["attention_mask"]) <= TOL
    # the window is really applied: the last query gives nothing to keys further back than the window
    assert ours[0, :, :, n - 1, : n - window].abs().max() == 0


@pytest.mark.parametrize("arch", ["gpt2", "esm", "llama", "mistral"])
def test_logits_equal_plain_sdpa(tiny_dir, arch):
    loaded = models.load(str(tiny_dir(arch)))
    if arch == "esm":
        inputs = dict(loaded.tokenizer(["MKTAYIAKQRQISFVK", "MKTAY"], return_tensors="pt", padding=True))
    else:
        inputs = text_inputs(loaded.tokenizer, [SENTENCE])
    with torch.no_grad():
        plain = loaded.model(**inputs).logits
        with capture(loaded.model, DenseSink()):
            engine = loaded.model(**inputs).logits
    keep = inputs["attention_mask"].bool()
    assert (plain - engine)[keep].abs().max().item() <= TOL


def test_generate_with_kv_cache_rows_equal_eager(tiny_dir):
    loaded = models.load(str(tiny_dir("llama")))
    model = loaded.model
    inputs = text_inputs(loaded.tokenizer, ["the cat saw the dog and"])
    n_prompt, n_new = inputs["input_ids"].shape[1], 4
    sink = DenseSink()
    with capture(model, sink), torch.no_grad():
        generated = model.generate(**inputs, max_new_tokens=n_new, do_sample=False, pad_token_id=1)
    assert sink.steps == n_new  # one forward for the prompt, then one per new token but the last
    full = {"input_ids": generated, "attention_mask": torch.ones_like(generated)}
    reference = eager_attention(model, full)  # [batch layer head query key] over the whole generated text
    prompt_rows = sink.attention(0)
    assert prompt_rows.shape[-2:] == (n_prompt, n_prompt)
    assert (prompt_rows - reference[..., :n_prompt, :n_prompt]).abs().max() <= TOL
    for step in range(1, sink.steps):
        row = sink.attention(step)  # [batch layer head 1 key]: one new query against the cache
        position = n_prompt + step - 1
        assert row.shape[-2:] == (1, position + 1)
        assert (row[..., 0, :] - reference[..., position, : position + 1]).abs().max() <= TOL


def test_selected_layers_and_heads_only(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE])
    ours = capture_attention(loaded.model, inputs, layers=[1], heads=[3, 0])
    reference = eager_attention(loaded.model, inputs)
    assert ours.shape[1:3] == (1, 2)
    assert (ours[:, 0] - reference[:, 1][:, [3, 0]]).abs().max() <= TOL


def test_blocks_are_bounded_and_cover_every_row(tiny_dir):
    """With a tiny block budget every query row still arrives exactly once, in blocks of the budgeted size."""
    loaded = models.load(str(tiny_dir("gpt2")))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE])
    n = inputs["input_ids"].shape[1]

    class Recorder:
        def __init__(self):
            self.blocks: list[AttentionBlock] = []

        def needs(self, layer, n_heads, n_query):
            return SinkNeeds(heads=tuple(range(n_heads)))

        def update(self, block):
            self.blocks.append(block)

    recorder = Recorder()
    row_bytes = 4 * 4 * n  # batch 1 × 4 heads × n keys × float32
    with capture(loaded.model, recorder, block_bytes=3 * row_bytes), torch.no_grad():
        loaded.model(**inputs)
    for layer in (0, 1):
        rows = [(b.query_start, b.alpha.shape[2]) for b in recorder.blocks if b.layer == layer]
        assert all(size <= 3 for _, size in rows)
        assert sorted(start + i for start, size in rows for i in range(size)) == list(range(n))
        assert all(b.alpha.shape == (1, 4, b.alpha.shape[2], n) for b in recorder.blocks)
    full = torch.zeros(2, 4, n, n)
    for b in recorder.blocks:
        full[b.layer, :, b.query_start:b.query_start + b.alpha.shape[2]] = b.alpha[0]
    assert (full - eager_attention(loaded.model, inputs)[0]).abs().max() <= TOL


def test_previous_implementation_restored_even_when_forward_raises(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")))
    model = loaded.model
    assert model.config._attn_implementation == "sdpa"

    class Exploding:
        def needs(self, layer, n_heads, n_query):
            return SinkNeeds(heads=(0,))

        def update(self, block):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        with capture(model, Exploding()), torch.no_grad():
            assert model.config._attn_implementation == ENGINE_NAME
            model(**text_inputs(loaded.tokenizer, [SENTENCE]))
    assert model.config._attn_implementation == "sdpa"


def test_model_left_on_engine_outside_capture_behaves_like_sdpa(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE])
    with torch.no_grad():
        plain = loaded.model(**inputs).logits
        with capture(loaded.model, DenseSink()):
            pass
        loaded.model.set_attn_implementation(ENGINE_NAME)
        try:
            again = loaded.model(**inputs).logits
        finally:
            loaded.model.set_attn_implementation("sdpa")
    assert torch.equal(plain, again)


def test_head_out_of_range_is_a_clear_error(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")))
    with pytest.raises(ProbeError, match="out of range"):
        capture_attention(loaded.model, text_inputs(loaded.tokenizer, [SENTENCE]), heads=[7])


def test_float16_dense_sink_keeps_half_precision(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE])
    sink = DenseSink(layers=[0], dtype=torch.float16)
    with capture(loaded.model, sink), torch.no_grad():
        loaded.model(**inputs)
    alpha = sink.attention(0)
    assert alpha.dtype == torch.float16
    assert (alpha.float() - eager_attention(loaded.model, inputs)[:, :1]).abs().max() <= 1e-3


def test_blockwise_fallback_matches_kernel():
    """The torch fallback used where no LSE-returning kernel exists gives the kernel's output and LSE."""
    from probe.engine.attention import _blockwise_attention, _fused_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 37, 8) for _ in range(3))
    mask = torch.zeros(2, 1, 37, 37)
    mask[1, :, :, 30:] = float("-inf")
    for is_causal, m in ((True, None), (False, mask)):
        out_kernel, lse_kernel = _fused_attention(q, k, v, m, is_causal, 0.3, 0.0)
        out_block, lse_block = _blockwise_attention(q, k, v, m, is_causal, 0.3, block_rows=5)
        assert (out_kernel - out_block).abs().max() <= TOL
        assert (lse_kernel - lse_block).abs().max() <= TOL


def test_in_place_softmax_and_its_lse_equal_torch():
    """The single pass's fused in-place softmax gives torch.softmax's α and torch.logsumexp's LSE, on rows
    with very different scales, partly masked rows and fully masked rows (α = 0 and lse = 0 there, as the CPU
    kernel gives it); without a consumer for it, no LSE is computed."""
    from probe.engine.attention import _softmax_in_place

    torch.manual_seed(0)
    scores = torch.randn(2, 3, 5, 700) * torch.tensor([0.1, 3.0, 30.0])[None, :, None, None]
    scores[0, :, 1, 200:] = float("-inf")  # partly masked row
    scores[1, 2, 3, :] = float("-inf")  # fully masked row
    expected = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    expected_lse = torch.logsumexp(scores, dim=-1)
    expected_lse[1, 2, 3] = 0.0
    alpha, lse = _softmax_in_place(scores.clone(), want_lse=True, masked=True)
    assert (alpha - expected).abs().max() <= 1e-7
    assert (lse - expected_lse).abs().max() <= 1e-5
    assert alpha[1, 2, 3].abs().max() == 0 and lse[1, 2, 3] == 0
    unmasked = torch.randn(1, 2, 4, 50)
    alpha, lse = _softmax_in_place(unmasked.clone(), want_lse=False, masked=False)
    assert lse is None and (alpha - torch.softmax(unmasked, -1)).abs().max() <= 1e-7


@pytest.mark.gpu
def test_cuda_engine_equals_eager(tiny_dir, cuda_kernels_only):
    """On a CUDA device, float32: every head (the engine's own single pass) and one head (the fused kernel,
    memory-efficient in float32, and α rebuilt from its LSE) equal eager attention, on one sequence (no mask)
    and on a padded batch (a mask of an odd key count: the kernel's bias alignment). The fixture fails the
    test where the kernel refused and the blockwise fallback ran."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    for arch in ("gpt2", "llama", "esm"):
        loaded = models.load(str(tiny_dir(arch)), device="cuda")
        if arch == "esm":
            batches = [loaded.tokenizer(["MKTAYIAKQRQISFVK", "MKTAY"], return_tensors="pt", padding=True)]
        else:
            batches = [text_inputs(loaded.tokenizer, texts) for texts in ([SENTENCE],
                                                                          [SENTENCE, "the cat saw the dog"])]
        for inputs in batches:
            inputs = {name: value.cuda() for name, value in dict(inputs).items() if name != "token_type_ids"}
            reference = eager_attention(loaded.model, inputs)  # [batch layer head query key]
            for heads in (None, [1]):
                ours = capture_attention(loaded.model, inputs, heads=heads)
                expected = reference if heads is None else reference[:, :, heads]
                assert max_diff(ours.cuda(), expected, inputs["attention_mask"]) <= 1e-4, (arch, heads)


@pytest.mark.parametrize("layout", ["shared", "scattered", "sparse", "bands", "offsets", "wide"])
@pytest.mark.parametrize("arch", ["gpt2", "bert", "mistral"])
def test_gathered_alpha_equals_eager_at_the_slots(tiny_dir, arch, layout, slot_path):
    """A GatherSink gets α at its key slots (causal, padding and sliding-window masks applied), 0 where slot =
    −1. "shared": rows share their keys (the engine multiplies against the block's distinct keys);
    "scattered": one different key per row, "sparse": token matches' layout — up to 3 keys in a few rows, the
    other slots −1 (the engine computes each present (row, key) pair alone); "bands": keys at fixed offsets
    i − 1 and i + 2 (the engine multiplies shifted q and k; under a causal mask i + 2 is 0); "offsets": six
    diagonals j = i − 1 … i − 6, as fixed_offset's candidates (rows share their keys: the shared matmul serves
    the diagonals too); "wide": more slots per row than GATHER_MAX_SLOTS (off the single pass the engine reads
    them from dense blocks it rebuilds)."""
    loaded = models.load(str(tiny_dir(arch)))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE, "the cat saw the dog"])
    n_batch, n = inputs["input_ids"].shape
    generator = torch.Generator().manual_seed(0)
    if layout == "shared":
        # [batch query slot], some above the diagonal
        slots = torch.randint(-1, n, (n_batch, n, 3), generator=generator)
    elif layout == "scattered":
        slots = torch.stack([torch.randperm(n, generator=generator) for _ in range(n_batch)])[..., None]
        slots[:, ::3] = -1  # [batch query 1]: every key once, some rows without a slot
    elif layout == "bands":
        position = torch.arange(n)
        slots = torch.stack([position - 1, torch.where(position + 2 < n, position + 2, -1)], -1)
        slots = slots[None].repeat(n_batch, 1, 1)  # [batch query slot]: j = i − 1, j = i + 2
    elif layout == "wide":
        slots = torch.randint(-1, n, (n_batch, n, attention.GATHER_MAX_SLOTS + 4), generator=generator)
    elif layout == "offsets":
        position = torch.arange(n)[:, None] - torch.arange(1, 7)[None, :]  # [query slot]: j = i − d
        slots = torch.where(position >= 0, position, -1)[None].repeat(n_batch, 1, 1)  # [batch query slot]
    else:
        slots = torch.randint(0, n, (n_batch, n, 3), generator=generator)  # [batch query slot]
        slots[torch.rand(n_batch, n, 3, generator=generator) < 0.5] = -1  # ragged rows: padded slots
        slots[:, : n // 2] = -1  # the first half of each row has no key at all

    class Gather:
        def __init__(self):
            self.alpha = {}

        def needs(self, layer, n_heads, n_query):
            return SinkNeeds(gather=((1, 3), slots))

        def update_gathered(self, layer, heads, alpha):
            self.alpha[layer] = alpha.clone()

    sink = Gather()
    with capture(loaded.model, sink), torch.no_grad():
        loaded.model(**inputs)
    reference = eager_attention(loaded.model, inputs)[:, :, [1, 3]]  # [batch layer head query key]
    width = slots.shape[-1]
    expected = reference.gather(-1, slots.clamp(min=0)[:, None, None].expand(-1, 2, 2, -1, -1))
    expected = expected * (slots >= 0)[:, None, None]  # [batch layer head query slot]
    rows = inputs["attention_mask"].bool()[:, None, None, :, None]
    for layer in (0, 1):
        assert sink.alpha[layer].shape == (n_batch, 2, n, width)
        assert ((sink.alpha[layer] - expected[:, layer]).abs() * rows[:, 0]).max() <= TOL
    assert expected.abs().max() > 0


@pytest.mark.parametrize("arch", ["gpt2", "bert"])
def test_single_pass_serves_a_gather_sink_beside_a_dense_one(tiny_dir, arch):
    """A dense sink of every head puts the layer on the single pass (no kernel); a gather sink in the same
    capture then needs the LSE, which the single pass computes only because it is asked for: both sinks equal
    eager (BERT: a padded batch, so some rows of the shorter sequence are masked keys throughout)."""
    loaded = models.load(str(tiny_dir(arch)))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE, "the cat saw the dog"])
    n_batch, n = inputs["input_ids"].shape
    slots = torch.stack([torch.arange(n) - 1, torch.zeros(n, dtype=torch.long)],
                        dim=-1)[None].expand(n_batch, -1, -1)

    class Gather:
        def __init__(self):
            self.alpha = {}

        def needs(self, layer, n_heads, n_query):
            return SinkNeeds(gather=(range(n_heads), slots))

        def update_gathered(self, layer, heads, alpha):
            self.alpha[layer] = alpha.clone()

    dense, gather = DenseSink(), Gather()
    with capture(loaded.model, [dense, gather]), torch.no_grad():
        loaded.model(**inputs)
    reference = eager_attention(loaded.model, inputs)  # [batch layer head query key]
    n_heads = reference.shape[2]
    rows = inputs["attention_mask"].bool()[:, None, :, None]  # [batch 1 query 1]
    for layer in (0, 1):
        assert max_diff(dense.attention(0)[:, layer], reference[:, layer], inputs["attention_mask"]) <= TOL
        expected = reference[:, layer].gather(-1, slots.clamp(min=0)[:, None].expand(-1, n_heads, -1, -1))
        expected = expected * (slots >= 0)[:, None]  # [batch head query slot]
        assert ((gather.alpha[layer] - expected).abs() * rows).max() <= TOL


def test_overlapping_captures_in_threads_each_see_their_own_forward(tiny_dir):
    """Two threads capture the same model at once: each gets exactly its own input's α, and the model is back
    on sdpa once both are done (the first one out must not switch the model back under the other)."""
    import threading

    loaded = models.load(str(tiny_dir("gpt2")))
    texts = [SENTENCE, "the dog saw the cat and then the cat saw the dog"]
    inputs = [text_inputs(loaded.tokenizer, [text]) for text in texts]
    expected = [eager_attention(loaded.model, batch) for batch in inputs]
    results, errors = {}, []
    barrier = threading.Barrier(2)

    def work(index):
        try:
            for _ in range(5):
                sink = DenseSink()
                with capture(loaded.model, sink), torch.no_grad():
                    barrier.wait(timeout=30)
                    loaded.model(**inputs[index])
                results.setdefault(index, []).append(sink.attention(0))
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    for index in range(2):
        assert len(results[index]) == 5
        for alpha in results[index]:
            assert (alpha - expected[index]).abs().max() <= TOL
    assert loaded.model.config._attn_implementation == "sdpa"


def _overlap(first, second, inputs):
    """Thread A captures `first`; thread B then captures `second` and runs it after A has left. Returns B's
    sink and the implementation B saw once A was gone."""
    import threading

    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    sink, seen, errors = DenseSink(), [], []

    def first_capture():
        with capture(first, DenseSink()):
            first_in.set()
            second_in.wait(timeout=30)
        first_out.set()

    def second_capture():
        try:
            first_in.wait(timeout=30)
            with capture(second, sink), torch.no_grad():
                second_in.set()
                first_out.wait(timeout=30)  # the first capture has left: we must still be on the engine
                seen.append(second.config._attn_implementation)
                second(**inputs)
        except Exception as error:  # noqa: BLE001 - reported by the caller's assertion
            errors.append(error)

    threads = [threading.Thread(target=first_capture), threading.Thread(target=second_capture)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return sink, seen


def test_model_and_its_base_model_share_one_capture_identity(tiny_dir):
    """Overlapping (not nested) captures in two threads, on the model and on model.base_model (they share the
    config): the first one out must not switch the model back under the other, and the last one out restores
    sdpa."""
    loaded = models.load(str(tiny_dir("gpt2")))
    model, body = loaded.model, loaded.model.base_model
    assert body is not model and body.config is model.config
    inputs = text_inputs(loaded.tokenizer, [SENTENCE])
    expected = eager_attention(model, inputs)
    for first, second in ((model, body), (body, model)):
        sink, seen = _overlap(first, second, inputs)
        assert seen == [ENGINE_NAME]
        assert model.config._attn_implementation == "sdpa"
        assert (sink.attention(0) - expected).abs().max() <= TOL


@pytest.mark.parametrize("arch", ["gpt2", "esm"])
def test_label_model_and_capture_attention_in_threads_equal_single_threaded(tiny_dir, arch):
    """Stress: label_model (captures model.base_model) and capture_attention (captures the model) overlap in
    threads; every result equals the single-threaded one and the model ends on its own implementation."""
    import threading

    import pandas as pd

    from probe.heads.label import LabelConfig, label_model

    loaded = models.load(str(tiny_dir(arch)))
    before = loaded.model.config._attn_implementation
    config = LabelConfig(examples=4, seq_len=12, batch_size=2, n_bootstrap=20, ablate="none")
    if loaded.kind == "protein_mlm":
        inputs = models.tokenize_protein(loaded, "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ")
    else:
        inputs = models.tokenize_text(loaded, SENTENCE)
    expected_table = label_model(loaded, config)
    expected_alpha = capture_attention(loaded.model, inputs)
    tables, alphas, errors = [], [], []
    start = threading.Barrier(4)

    def labeller():
        try:
            start.wait(timeout=60)
            for _ in range(2):
                tables.append(label_model(loaded, config))
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    def capturer():
        try:
            start.wait(timeout=60)
            for _ in range(12):
                alphas.append(capture_attention(loaded.model, inputs))
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=target) for target in (labeller, labeller, capturer, capturer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert len(tables) == 4 and len(alphas) == 24
    for table in tables:
        pd.testing.assert_frame_equal(table, expected_table)
    for alpha in alphas:
        assert torch.equal(alpha, expected_alpha)
    assert loaded.model.config._attn_implementation == before


class RowSampler:
    """A sink that asks for α on a few query rows only (`SinkNeeds.rows`) and keeps what arrives."""

    def __init__(self, rows, heads=None, crop=False):
        self.rows, self.heads, self.crop = torch.tensor(rows), heads, crop
        self.blocks: list[AttentionBlock] = []

    def needs(self, layer, n_heads, n_query):
        heads = tuple(self.heads) if self.heads is not None else tuple(range(n_heads))
        return SinkNeeds(heads=heads, rows=self.rows, causal_crop=self.crop)

    def update(self, block):
        self.blocks.append(block)


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama", "mistral"])
@pytest.mark.parametrize("heads", [None, [3, 1]])
def test_sampled_rows_equal_eager(tiny_dir, arch, heads):
    """A row-sampling sink gets exactly its rows (in blocks that carry them), equal to eager on those rows,
    while a dense sink in the same capture still gets every row."""
    loaded = models.load(str(tiny_dir(arch)))
    inputs = text_inputs(loaded.tokenizer, [SENTENCE, "the cat saw the dog"])
    n = inputs["input_ids"].shape[1]
    wanted = [n - 1, 0, 7, 3, 7]  # unsorted, repeated: the engine sorts and de-duplicates
    sampler, dense = RowSampler(wanted, heads, crop=arch == "gpt2"), DenseSink()
    row_bytes = 2 * 4 * n * 4
    with capture(loaded.model, [sampler, dense], block_bytes=2 * row_bytes), torch.no_grad():
        loaded.model(**inputs)
    reference = eager_attention(loaded.model, inputs)  # [batch layer head query key]
    assert max_diff(dense.attention(0), reference, inputs["attention_mask"]) <= TOL
    chosen = heads if heads is not None else list(range(4))
    for layer in (0, 1):
        blocks = [b for b in sampler.blocks if b.layer == layer]
        # the block budget holds for sampled rows
        assert all(len(b.rows) <= 2 * 4 // len(chosen) for b in blocks)
        got = torch.cat([b.rows for b in blocks]).tolist()
        assert got == sorted(set(wanted))
        for b in blocks:
            # [batch head block key]
            expected = reference[:, layer][:, chosen][:, :, b.rows, : b.alpha.shape[-1]]
            valid = inputs["attention_mask"].bool()
            pairs = valid[:, None, b.rows, None] & valid[:, None, None, : b.alpha.shape[-1]]
            assert ((b.alpha - expected).abs() * pairs).max() <= TOL
            assert b.query_start == int(b.rows[0]) and b.heads == tuple(chosen)
            if arch != "gpt2":
                assert b.alpha.shape[-1] == n  # not cropped for a sink that does not accept it


class EntropyRecorder:
    """Keeps the engine's per-row entropy of every block (optionally on sampled rows)."""

    def __init__(self, rows=None, heads=None):
        self.rows, self.heads, self.got = rows, heads, []

    def needs(self, layer, n_heads, n_query):
        heads = tuple(range(n_heads)) if self.heads is None else self.heads
        return SinkNeeds(heads=heads, rows=self.rows, entropy=True)

    def update(self, block):
        rows = (block.rows if block.rows is not None
                else torch.arange(block.query_start, block.query_start + block.alpha.shape[2]))
        self.got.append((block.layer, block.heads, rows, block.entropy))


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama", "prott5"])
@pytest.mark.parametrize("path", ["single", "sampled", "rebuild"])
def test_engine_row_entropy_equals_eager(tiny_dir, arch, path):
    """block.entropy (lse − scale·q·Σαk − Σα·bias, no logarithm) equals −Σ α log α of eager attention on the
    single pass, sampled rows and the kernel + rebuild path (some heads); prott5 has T5's finite position bias
    in the mask, BERT a padding mask."""
    loaded = models.load(str(tiny_dir(arch)))
    if arch == "prott5":
        inputs = dict(loaded.tokenizer(["M K T A Y I A K Q R", "M K T"], return_tensors="pt", padding=True))
    else:
        inputs = text_inputs(loaded.tokenizer, [SENTENCE, "the cat saw the dog"])
    recorder = EntropyRecorder(torch.tensor([0, 2, 5]) if path == "sampled" else None,
                               (3, 1) if path == "rebuild" else None)
    with capture(loaded.model, recorder), torch.no_grad():
        loaded.model(**inputs)
    reference = eager_attention(loaded.model, inputs).double()  # [batch layer head query key]
    expected = -torch.xlogy(reference, reference).sum(-1)  # [batch layer head query]
    valid = inputs["attention_mask"].bool()
    assert recorder.got
    for layer, heads, rows, entropy in recorder.got:
        assert entropy is not None
        keep = valid[:, rows][:, None]  # [batch 1 block]
        assert ((entropy.double() - expected[:, layer][:, list(heads)][:, :, rows]).abs() * keep).max() <= TOL
    assert expected.max() > 0.5
