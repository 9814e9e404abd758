"""Attention variants the engine implements beyond plain softmax attention: gpt-oss's attention sinks
(`s_aux`) and Gemma 2's soft-capping (`softcap`), against eager `output_attentions` on every path (single
pass, kernel + rebuild, sampled rows, gathered slots, output norms, row entropy), with the model's own logits
unchanged under capture; and the keyword allow-list that refuses what the engine does not implement."""

from __future__ import annotations

import pytest
import torch
import transformers

from probe.engine import DenseSink, SinkNeeds, attention, capture
from probe.engine.attention import capture_attention_forward
from probe.engine.keywords import KEYWORDS
from probe.engine.output_norms import OutputProjections
from probe.errors import ProbeError
from tests.conftest import eager_attention

TOL = 1e-5
N, VOCAB = 11, 64


def _gpt_oss():
    config = transformers.GptOssConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, head_dim=8,
        intermediate_size=32, vocab_size=VOCAB, num_local_experts=2, num_experts_per_tok=1, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"], initializer_range=0.2, pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.GptOssForCausalLM(config).eval()
    with torch.no_grad():  # sinks strong enough to take a visible share of every row (and differ per head)
        for layer in model.model.layers:
            layer.self_attn.sinks.copy_(torch.tensor([1.5, -0.5, 0.5, 2.5]))
    return model


def _gemma2():
    config = transformers.Gemma2Config(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, head_dim=8,
        intermediate_size=32, vocab_size=VOCAB, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"], attn_logit_softcapping=1.5,
        initializer_range=0.2, pad_token_id=0)
    torch.manual_seed(0)
    return transformers.Gemma2ForCausalLM(config).eval()


MODELS = {"gpt_oss": _gpt_oss, "gemma2": _gemma2}
_CACHE: dict = {}


def model_of(name):
    if name not in _CACHE:
        _CACHE[name] = MODELS[name]()
    return _CACHE[name]


def padded_inputs():
    """A padded batch of 2: the second example left-padded by 3 tokens."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (2, N), generator=generator)
    mask = torch.ones(2, N, dtype=torch.long)
    mask[1, :3] = 0
    ids[1, :3] = 0
    return {"input_ids": ids, "attention_mask": mask}


def valid_pairs(inputs) -> torch.Tensor:
    """[batch 1 query key]: both the query and the key are real tokens."""
    real = inputs["attention_mask"].bool()
    return (real[:, :, None] & real[:, None, :])[:, None]


def assert_close(ours, reference, pairs):
    assert ours.shape == reference.shape
    assert ((ours - reference).abs() * pairs).max() <= TOL


class Recorder:
    """Declares its needs from arguments and keeps everything the engine hands it."""

    def __init__(self, heads=None, rows=None, gather=None, entropy=False, projections=None):
        self.heads, self.rows, self.gather, self.entropy, self.projections = (heads, rows, gather, entropy,
                                                                              projections)
        self.blocks, self.gathered, self.norms = [], {}, {}

    def needs(self, layer, n_heads, n_query):
        heads = tuple(range(n_heads)) if self.heads is None else tuple(self.heads)
        return SinkNeeds(heads=heads, rows=self.rows, gather=self.gather, entropy=self.entropy,
                         output_projections=self.projections)

    def update(self, block):
        self.blocks.append((block, block.alpha.clone()))

    def update_gathered(self, layer, heads, alpha):
        self.gathered[layer] = alpha.clone()

    def update_output_norms(self, layer, norms):
        self.norms[layer] = norms

    def dense(self, layer, n_query):
        """[batch head query key] from the blocks of `layer` (rows not received stay NaN)."""
        blocks = [(b, a) for b, a in self.blocks if b.layer == layer]
        first = blocks[0][0]
        out = torch.full((blocks[0][1].shape[0], len(first.heads), n_query, first.n_key), float("nan"))
        for block, alpha in blocks:
            rows = block.rows if block.rows is not None else torch.arange(block.query_start,
                                                                           block.query_start + alpha.shape[2])
            out[:, :, rows] = alpha
        return out

    def per_row(self, layer, field, n_query):
        """[batch head query] of an AttentionBlock field (entropy, learned_sink_mass) of `layer`."""
        blocks = [(b, a) for b, a in self.blocks if b.layer == layer]
        out = torch.full((blocks[0][1].shape[0], len(blocks[0][0].heads), n_query), float("nan"))
        for block, alpha in blocks:
            rows = block.rows if block.rows is not None else torch.arange(block.query_start,
                                                                           block.query_start + alpha.shape[2])
            out[:, :, rows] = getattr(block, field)
        return out


def _entropy(alpha):
    return -torch.xlogy(alpha, alpha).sum(-1)  # [... query]


@pytest.mark.parametrize("name", ["gpt_oss", "gemma2"])
@pytest.mark.parametrize("path", ["single", "rebuild", "sampled", "norms"])
def test_alpha_equals_eager_on_every_path(name, path):
    """α, the row entropy and (gpt-oss) the sink's weight equal eager's on valid rows, on each path."""
    model = model_of(name)
    inputs = padded_inputs()
    reference = eager_attention(model, inputs)  # [batch layer head query key]
    rows = torch.tensor([N - 1, 4, 0, 7]) if path == "sampled" else None
    heads = [3, 1] if path == "rebuild" else None
    sink = Recorder(heads=heads, rows=rows, entropy=True,
                    projections=OutputProjections(model) if path == "norms" else None)
    with capture(model, sink), torch.no_grad():
        model(**inputs)
    chosen = heads if heads is not None else list(range(4))
    pairs = valid_pairs(inputs)
    real_rows = inputs["attention_mask"].bool()[:, None, :]  # [batch 1 query]
    if rows is not None:
        pairs, real_rows = pairs[:, :, rows.sort().values], real_rows[:, :, rows.sort().values]
    for layer in (0, 1):
        expected = reference[:, layer][:, chosen]  # [batch head query key]
        got = sink.dense(layer, N)
        entropy = sink.per_row(layer, "entropy", N)
        if rows is not None:
            order = rows.sort().values
            expected, got, entropy = expected[:, :, order], got[:, :, order], entropy[:, :, order]
        assert_close(got, expected, pairs)
        assert ((entropy - _entropy(expected * pairs)).abs() * real_rows).max() <= 1e-4
        if name == "gpt_oss":
            learned = sink.per_row(layer, "learned_sink_mass", N)
            if rows is not None:
                learned = learned[:, :, rows.sort().values]
            assert ((learned - (1 - (expected * pairs).sum(-1))).abs() * real_rows).max() <= TOL
        else:
            assert all(block.learned_sink_mass is None for block, _ in sink.blocks)


@pytest.mark.parametrize("layout", ["bands", "sparse"])
@pytest.mark.parametrize("name", ["gpt_oss", "gemma2"])
def test_gathered_alpha_and_output_norms_equal_eager(name, layout, slot_path):
    """Gathered slots equal eager α there (soft-capped scores, learned sinks); the output norms' Σ_j α_ij n_j
    uses the sink-scaled α. "bands": previous, first and self (rows sharing keys: one product against the
    block's distinct keys); "sparse": token matches' layout, a few keys in a few rows (each present (row, key)
    pair computed alone)."""
    model = model_of(name)
    inputs = padded_inputs()
    reference = eager_attention(model, inputs)
    if layout == "bands":
        slots = torch.stack([torch.arange(N) - 1, torch.zeros(N, dtype=torch.long), torch.arange(N)], -1)
        slots = slots[None].expand(2, -1, -1).contiguous()  # [batch query slot]: previous, first, self
    else:
        generator = torch.Generator().manual_seed(0)
        slots = torch.randint(0, N, (2, N, 3), generator=generator)  # [batch query slot]
        slots[torch.rand(2, N, 3, generator=generator) < 0.6] = -1
        slots[:, : N // 2] = -1
    sink = Recorder(heads=(), gather=(range(4), slots), projections=OutputProjections(model))
    with capture(model, sink), torch.no_grad():
        model(**inputs)
    real = inputs["attention_mask"].bool()
    for layer in (0, 1):
        expected = reference[:, layer].gather(-1, slots.clamp(min=0)[:, None].expand(-1, 4, -1, -1))
        expected = expected * (slots >= 0)[:, None]  # [batch head query slot]
        keys_real = real.gather(1, slots.clamp(min=0).flatten(1)).view(2, N, 3)  # [batch query slot]
        ok = (real[:, :, None] & keys_real)[:, None]  # [batch 1 query slot]
        assert ((sink.gathered[layer] - expected).abs() * ok).max() <= TOL
        norms = sink.norms[layer]
        mixed = (reference[:, layer] * norms.norms[:, :, None, :]).sum(-1)  # [batch head query]
        assert ((norms.mixed - mixed).abs() * real[:, None]).max() <= 1e-4


@pytest.mark.parametrize("name", ["gpt_oss", "gemma2"])
@pytest.mark.parametrize("sinks", ["none", "all heads", "some heads", "norms"])
def test_logits_under_capture_equal_the_default_implementation(name, sinks, monkeypatch):
    """Capture never changes what the model computes: single pass (all heads), kernel (+ rebuild) and the norm
    channel all give the model's own logits."""
    model = model_of(name)
    inputs = padded_inputs()
    with torch.no_grad():
        expected = model(**inputs).logits
    chosen = {"none": [], "all heads": DenseSink(), "some heads": DenseSink(heads=[2]),
              "norms": Recorder(heads=(), projections=OutputProjections(model))}[sinks]
    with capture(model, chosen), torch.no_grad():
        got = model(**inputs).logits
    real = inputs["attention_mask"].bool()[..., None]
    assert ((got - expected).abs() * real).max() <= TOL
    if sinks == "norms":  # the norm channel on the kernel path too (the single pass serves short inputs)
        monkeypatch.setattr(attention, "SLOT_PASS_MAX_KEYS", 0)
        with capture(model, chosen), torch.no_grad():
            got = model(**inputs).logits
        assert ((got - expected).abs() * real).max() <= TOL


def test_the_variants_matter_negative_controls():
    """Without its sinks gpt-oss's α would differ (rows sum to 1 instead of < 1); without the cap Gemma 2's
    would: the equality tests above can fail."""
    inputs = padded_inputs()
    pairs = valid_pairs(inputs)
    alpha = eager_attention(model_of("gpt_oss"), inputs)  # [batch layer head query key]
    assert (1 - (alpha * pairs[:, None]).sum(-1)).max() > 0.2
    model = model_of("gemma2")
    reference = eager_attention(model, inputs)
    model.config.attn_logit_softcapping = None
    for layer in model.model.layers:
        layer.self_attn.attn_logit_softcapping = None
    try:
        uncapped = eager_attention(model, inputs)
    finally:
        for layer in model.model.layers:
            layer.self_attn.attn_logit_softcapping = 1.5
        model.config.attn_logit_softcapping = 1.5
    assert ((uncapped - reference).abs() * pairs[:, None]).max() > 1e-2


def test_sliding_window_layers_follow_their_own_mask():
    """gpt-oss and Gemma 2 alternate sliding (4) and full layers: layer 0 puts no weight beyond the window."""
    for name in MODELS:
        model = model_of(name)
        sink = DenseSink()
        inputs = padded_inputs()
        with capture(model, sink), torch.no_grad():
            model(**inputs)
        alpha = sink.attention(0)[0]  # [layer head query key] of the unpadded example
        distance = torch.arange(N)[:, None] - torch.arange(N)[None, :]
        assert alpha[0][..., distance >= 4].abs().max() == 0
        assert alpha[1][..., distance >= 4].abs().max() > 0


class _Attention(torch.nn.Module):
    is_causal = True


def test_an_unknown_attention_keyword_is_refused_in_one_line():
    query = key = value = torch.randn(1, 2, 5, 8)
    with pytest.raises(ProbeError, match=r"'rope_scaling_magic'.*--engine eager") as error:
        capture_attention_forward(_Attention(), query, key, value, None, rope_scaling_magic=0.5)
    assert "\n" not in str(error.value)
    with pytest.raises(ProbeError, match=r"'cu_seq_lens_q'.*--engine eager"):
        capture_attention_forward(_Attention(), query, key, value, None, cu_seq_lens_q=torch.tensor([0, 5]))
    output, _ = capture_attention_forward(_Attention(), query, key, value, None, cu_seq_lens_q=None,
                                          position_ids=torch.arange(5)[None], use_cache=False)
    assert output.shape == (1, 5, 2, 8)
    with pytest.raises(ProbeError, match="sliding window of 3"):
        capture_attention_forward(_Attention(), query, key, value, None, sliding_window=3)


def test_every_keyword_transformers_models_pass_is_in_the_table():
    """The keywords this transformers passes to attention functions in the models the engine is tested on: all
    in the table (the coverage test finds the rest; anything new is refused, never ignored)."""
    for name in ("scaling", "dropout", "is_causal", "sliding_window", "position_bias", "s_aux", "softcap",
                 "position_ids", "use_cache", "output_attentions", "encoder_hidden_states", "deterministic"):
        assert name in KEYWORDS
    assert {kind for kind, _ in KEYWORDS.values()} == {"implemented", "harmless", "none_only"}


def test_outside_a_capture_sinks_and_softcap_are_still_computed():
    """A model left on the engine outside `capture` keeps its sinks and its cap (sdpa has neither)."""
    for name in MODELS:
        model = model_of(name)
        inputs = padded_inputs()
        with torch.no_grad():
            expected = model(**inputs).logits
        previous = model.config._attn_implementation
        from probe.engine import ENGINE_NAME, register_engine

        register_engine()
        model.set_attn_implementation(ENGINE_NAME)
        try:
            with torch.no_grad():
                got = model(**inputs).logits
        finally:
            model.set_attn_implementation(previous)
        real = inputs["attention_mask"].bool()[..., None]
        assert ((got - expected).abs() * real).max() <= TOL


def test_the_keyword_table_in_the_docs_is_the_one_in_the_code():
    """The page's table is written from KEYWORDS by the docs build (docs/hooks/engine_keywords.py): the
    rendered page lists every entry with its kind and text, and the page's source holds no second copy."""
    from tests.howto import DOCS
    from tests.howto import hook as docs_hook

    hook = docs_hook("engine_keywords")
    source = (DOCS / "engine.md").read_text(encoding="utf-8")
    page = hook.render(source)
    for name, (kind, text) in KEYWORDS.items():
        assert f"| `{name}` | {kind} | {text} |" in page, name
        assert f"| `{name}` |" not in source, name
    with pytest.raises(ValueError, match="marker"):
        hook.render(source.replace(hook.MARKER, ""))


def test_an_object_that_is_no_sink_is_refused():
    model = model_of("gpt_oss")
    with pytest.raises(ProbeError, match="is not a sink: it needs needs"):
        with capture(model, object()):
            pass


@pytest.mark.parametrize("name", ["gpt_oss", "gemma2"])
def test_profile_sink_learned_sink_mass_column(name):
    """The profile's learned_sink_mass is the mean over rows of 1 − Σ_j α_ij (eager), on sampled rows too; 0
    for a model without sinks (Gemma 2) — the positive and the negative control."""
    from probe.heads.profile_sink import ProfileSink

    model = model_of(name)
    ids = padded_inputs()["input_ids"][:1]  # one unpadded input, as the profile takes them
    alpha = eager_attention(model, {"input_ids": ids})[0]  # [layer head query key]
    for rows in (None, torch.tensor([0, 3, 7, N - 1])):
        sink = ProfileSink(1, 2, 4)
        sink.begin_input(0, rows)
        with capture(model, sink), torch.no_grad():
            model(input_ids=ids)
        chosen = slice(None) if rows is None else rows
        expected = (1 - alpha[:, :, chosen].sum(-1)).mean(-1).double()  # [layer head]
        got = sink.sums["learned_sink_mass"][0] / sink.rows[0]
        assert (got - expected).abs().max() <= TOL
        if name == "gpt_oss":
            assert float(got.min()) > 0.02
        else:
            assert float(got.abs().max()) == 0.0


@pytest.mark.parametrize("name", ["gpt_oss", "gemma2"])
def test_generate_with_a_kv_cache_is_unchanged_and_decode_rows_equal_eager(name):
    """Greedy generation (sliding-window caches included) gives the same tokens under capture; each decoding
    step's one query row equals eager α over the keys the cache holds (a sliding layer's cache keeps the last
    keys only, so its block has fewer keys: they are the last n_key positions)."""
    model = model_of(name)
    ids = padded_inputs()["input_ids"][:1]
    settings = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        expected = model.generate(ids, **settings)
    sinks = [DenseSink(layers=[layer]) for layer in (0, 1)]
    with capture(model, sinks), torch.no_grad():
        got = model.generate(ids, **settings)
    assert torch.equal(got, expected)
    reference = eager_attention(model, {"input_ids": got[:, :-1]})[0]  # [layer head query key]
    for layer, sink in enumerate(sinks):
        for step in range(1, sink.steps):
            alpha = sink.attention(step)[0, 0, :, 0]  # [head key]: this step's one query row
            position = ids.shape[1] + step - 1
            n_key = alpha.shape[-1]
            assert ((alpha - reference[layer, :, position, position + 1 - n_key:position + 1]).abs().max()
                    <= TOL)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gpt_oss", "gemma2"])
def test_cuda_sinks_and_softcap_equal_eager(name, request):
    """The CUDA kernels (memory-efficient with a mask) with sinks; the blockwise path with the cap, on the
    GPU. Every head: the engine's single pass; heads [3, 1]: the kernel and α from its LSE (gpt-oss: the
    blockwise fallback fails the test, cuda_kernels_only; Gemma 2's capped scores have no kernel)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if name == "gpt_oss":
        request.getfixturevalue("cuda_kernels_only")
    model = MODELS[name]().cuda()
    inputs = {key: value.cuda() for key, value in padded_inputs().items()}
    reference = eager_attention(model, inputs)
    for heads in (None, [3, 1]):
        sink = DenseSink(heads=heads)
        with capture(model, sink), torch.no_grad():
            model(**inputs)
        chosen = slice(None) if heads is None else heads
        pairs = valid_pairs(inputs).cpu()
        assert ((sink.attention(0) - reference[:, :, chosen].cpu()).abs() * pairs[:, None]).max() <= 1e-4
