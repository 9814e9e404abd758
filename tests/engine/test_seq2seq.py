"""Encoder–decoder models (T5 with its relative position bias, BART, Whisper): encoder self-attention, decoder
self-attention and cross-attention as three named stacks (enc / dec / cross), each equal to eager, in the
engine, `probe capture` and `probe profile`; single-stack models keep plain L3H2 names."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe import models
from probe.cli import main
from probe.engine import DenseSink, capture
from probe.errors import ProbeError
from probe.layers import attention_plan
from probe.naming import head_name, parse_stack_head_name
from tests.tiny_archs import build, masked_diff, padded_inputs, save

TOL = 1e-5
# float32 throughout. On an AMD EPYC (MKL) BART's decoder self-attention differs from eager by up to 1.1e-5 in
# its third layer and the logits by 4.3e-5 (|logit| < 4), where eager is itself 1.5e-5 / 3.2e-5 from the
# float64 forward and the engine 1.2e-5 / 1.9e-5: the hidden states drift apart through the layers. Every
# other comparison here stays within TOL (T5: 0; BART encoder 3.2e-6, cross 8.0e-6). Per model type:
# (decoder self-attention, logits).
WIDER = {"t5": (TOL, TOL), "bart": (3e-5, 1e-4)}


def _seq2seq_inputs(tokenizer):
    encoder = padded_inputs(tokenizer)
    decoder = padded_inputs(tokenizer, ("mary went to the city", "the cat saw the dog and the dog"))
    return dict(encoder, decoder_input_ids=decoder["input_ids"],
                decoder_attention_mask=decoder["attention_mask"])


def _eager(model, inputs):
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(**inputs, output_attentions=True)
            logits = out.logits
    finally:
        model.set_attn_implementation(previous)
    stacks = [torch.stack(getattr(out, name), 1) for name in ("encoder_attentions", "decoder_attentions",
                                                              "cross_attentions")]
    return stacks, logits


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_three_stacks_equal_eager(model_type):
    model, tokenizer = build(model_type)
    plan = attention_plan(model)
    assert [(s.name, s.first, s.count) for s in plan.stacks] == [("enc", 0, 2), ("dec", 2, 3),
                                                                 ("cross", 5, 3)]
    inputs = _seq2seq_inputs(tokenizer)
    (enc, dec, cross), eager_logits = _eager(model, inputs)
    sinks = [DenseSink(layers=range(stack.first, stack.first + stack.count)) for stack in plan.stacks]
    with torch.no_grad():
        sdpa_logits = model(**inputs).logits
        with capture(model, sinks):
            logits = model(**inputs).logits
        with capture(model, ()):
            untouched = model(**inputs).logits
    queries, keys = inputs["decoder_attention_mask"], inputs["attention_mask"]
    decoder_tol, logit_tol = WIDER[model_type]
    assert masked_diff(sinks[0].attention(0), enc, keys) <= TOL
    assert masked_diff(sinks[1].attention(0), dec, queries) <= decoder_tol
    # decoder rows over encoder keys: the queries come from the decoder's hidden states, which drift as the
    # decoder stack's do (BART: 1.5e-5 on this machine), so the decoder's tolerance holds for them too
    assert masked_diff(sinks[2].attention(0), cross, queries, keys) <= decoder_tol
    assert enc[0, 0, 0, 2].max() > 2 / enc.shape[-1]  # peaked
    valid = queries[..., None].bool()
    # Capturing every head computes the output from the α it hands out (the eager formula): equal to eager.
    # T5's own sdpa and eager paths differ by ~4e-5 on these logits (unscaled scores), so the reference is
    # eager there; a capture without sinks runs the model's own fused kernel and equals its sdpa logits
    # exactly.
    assert float(((logits - eager_logits).abs() * valid).max()) <= logit_tol
    assert float(((untouched - sdpa_logits).abs() * valid).max()) == 0.0


def test_whisper_three_stacks_equal_eager():
    import transformers

    config = transformers.WhisperConfig(
        vocab_size=64, num_mel_bins=8, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=16, max_target_positions=32, init_std=0.2, pad_token_id=0,
        decoder_start_token_id=1, eos_token_id=2, bos_token_id=1)
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(config).eval()
    inputs = {"input_features": torch.randn(2, 8, 32), "decoder_input_ids": torch.randint(3, 64, (2, 7))}
    plan = attention_plan(model)
    assert [stack.name for stack in plan.stacks] == ["enc", "dec", "cross"]
    (enc, dec, cross), _ = _eager(model, inputs)
    sinks = [DenseSink(layers=range(stack.first, stack.first + stack.count)) for stack in plan.stacks]
    with capture(model, sinks), torch.no_grad():
        model(**inputs)
    for sink, reference in zip(sinks, (enc, dec, cross), strict=True):
        assert float((sink.attention(0) - reference).abs().max()) <= TOL


def test_naming():
    plan = attention_plan(build("t5")[0])
    assert [plan.head_name(layer, 1) for layer in (0, 1, 2, 4, 5, 7)] == [
        "enc.L0H1", "enc.L1H1", "dec.L0H1", "dec.L2H1", "cross.L0H1", "cross.L2H1"]
    assert head_name(3, 2) == "L3H2" and head_name(3, 2, "enc") == "enc.L3H2"
    assert parse_stack_head_name("cross.L1H0") == ("cross", 1, 0)
    assert parse_stack_head_name("L3H2") == (None, 3, 2)
    with pytest.raises(ProbeError, match="enc.L3H7"):
        parse_stack_head_name("side.L1H0")
    assert attention_plan(build("stablelm")[0]).head_name(1, 2) == "L1H2"  # single stack: plain names


def test_a_t5_encoder_alone_is_one_stack():
    import transformers

    model = transformers.T5EncoderModel(transformers.T5Config(vocab_size=40, d_model=16, d_kv=4, d_ff=32,
                                                              num_layers=2, num_heads=4))
    plan = attention_plan(model)
    assert [stack.name for stack in plan.stacks] == [""] and plan.n_layers == 2


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    return save("t5", tmp_path_factory.mktemp("t5"))


def test_probe_capture_writes_three_stacks(t5_dir, tmp_path):
    out = tmp_path / "t5.npz"
    assert main(["capture", "--model", t5_dir, "--text", "the cat saw the dog", "--out", str(out)]) == 0
    written = np.load(out)
    loaded = models.load(t5_dir)
    assert loaded.kind == models.ModelKind.SEQ2SEQ_LM
    inputs = models.tokenize_text(loaded, "the cat saw the dog")
    (enc, dec, cross), _ = _eager(loaded.model, inputs)
    for name, reference in (("enc", enc), ("dec", dec), ("cross", cross)):
        assert np.allclose(written[f"attention_{name}"], reference[0].numpy(), atol=TOL)
    assert list(written["layers_dec"]) == [0, 1, 2] and list(written["layers_enc"]) == [0, 1]
    assert "attention" not in written  # no unnamed stack for an encoder-decoder


def test_probe_profile_names_the_stacks(t5_dir, tmp_path):
    import pandas as pd

    out = tmp_path / "t5.csv"
    assert main(["profile", "--model", t5_dir, "--random", "2", "--seq-len", "12", "--out", str(out)]) == 0
    table = pd.read_csv(out)
    assert list(table.drop_duplicates("stack")["stack"]) == ["enc", "dec", "cross"]
    assert len(table) == (2 + 3 + 3) * 4
    assert {"enc.L1H3", "dec.L2H0", "cross.L0H2"} <= set(table["head_name"])
    assert table.loc[table.head_name == "cross.L2H1", "layer"].item() == 2


def test_engine_eager_on_t5_equals_the_fused_engine_for_every_stack():
    """T5's attention returns (output, position_bias, weights): the fallback reads the weights, not the
    bias."""
    model, tokenizer = build("t5")
    plan = attention_plan(model)
    inputs = _seq2seq_inputs(tokenizer)
    results = []
    for engine in ("fused", "eager"):
        sinks = [DenseSink(layers=range(stack.first, stack.first + stack.count)) for stack in plan.stacks]
        with capture(model, sinks, engine=engine), torch.no_grad():
            model(**inputs)
        results.append([sink.attention(0) for sink in sinks])
    queries, keys = inputs["decoder_attention_mask"], inputs["attention_mask"]
    for (fused, eager), (q, k) in zip(zip(*results, strict=True),
                                      ((keys, keys), (queries, queries), (queries, keys)), strict=True):
        assert masked_diff(fused, eager, q, k) <= TOL


def test_capture_attention_of_stacks_with_different_lengths_is_one_line():
    from probe.engine import capture_attention

    model, tokenizer = build("bart")
    with pytest.raises(ProbeError, match="one stack at a time"):
        capture_attention(model, _seq2seq_inputs(tokenizer) | {
            "decoder_input_ids": torch.tensor([[2, 5, 6]] * 2),
                                                              "decoder_attention_mask": None})
