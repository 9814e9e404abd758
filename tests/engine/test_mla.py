"""MLA (DeepSeek-V2/V3 multi-head latent attention): the query/key head size differs from the value head size
and the rotary part of the key is shared by all heads. The engine captures it exactly (equal to eager
`output_attentions` within 1e-5), through the single-pass path, the kernel path (a subset of heads) and the
gathered path, in `probe capture` and `probe label`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe import models
from probe.cli import main
from probe.engine import DenseSink, SinkNeeds, capture, capture_attention
from tests.conftest import eager_attention

TOL = 1e-5
SENTENCE = ("the cat saw the dog and the dog saw the cat because it was one two three four five six seven "
            "eight nine")


def save_tiny_deepseek(directory, qk_nope: int = 8, qk_rope: int = 4, v_dim: int = 6, seed: int = 0):
    """A tiny DeepSeek-V3 (MLA with q/kv LoRA ranks, MoE in layer 1) with seeded random weights, saved like a
    checkpoint. Queries/keys get sharpened so attention is not near-uniform."""
    import transformers

    from probe.zoo.tiny import DEMO_WORDS, word_tokenizer

    tokenizer = word_tokenizer(DEMO_WORDS, bos_token="<bos>")
    config = transformers.DeepseekV3Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
        n_shared_experts=1, num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
        q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=qk_nope, qk_rope_head_dim=qk_rope, v_head_dim=v_dim,
        max_position_embeddings=128, pad_token_id=1, bos_token_id=None, eos_token_id=None,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = transformers.DeepseekV3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(("q_b_proj.weight", "kv_b_proj.weight")):
                parameter.mul_(3.0)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def deepseek_dir(tmp_path_factory):
    return save_tiny_deepseek(tmp_path_factory.mktemp("deepseek"))


@pytest.fixture(scope="module")
def deepseek_wide_value_dir(tmp_path_factory):
    """MLA with the value head larger than the query/key head (the kernel then needs q and k padded)."""
    return save_tiny_deepseek(tmp_path_factory.mktemp("deepseek-wide"), qk_nope=4, qk_rope=4, v_dim=12)


def inputs_of(loaded, texts):
    encoded = loaded.tokenizer(texts, return_tensors="pt", padding=True)
    return {name: value for name, value in encoded.items() if name != "token_type_ids"}


def masked_diff(ours, reference, attention_mask) -> float:
    valid = attention_mask.bool()
    pairs = valid[:, None, None, :, None] & valid[:, None, None, None, :]  # [batch 1 1 query key]
    return ((ours - reference).abs() * pairs).max().item()


def test_the_tiny_config_really_is_mla(deepseek_dir):
    attention = models.load(str(deepseek_dir)).model.model.layers[0].self_attn
    assert attention.qk_head_dim != attention.v_head_dim  # 12 vs 6: the fused kernel refuses these shapes
    assert attention.qk_rope_head_dim > 0 and attention.kv_lora_rank > 0


@pytest.mark.parametrize("which", ["narrow_value", "wide_value"])
def test_all_heads_equal_eager(deepseek_dir, deepseek_wide_value_dir, which):
    directory = deepseek_dir if which == "narrow_value" else deepseek_wide_value_dir
    loaded = models.load(str(directory))
    inputs = inputs_of(loaded, [SENTENCE])
    ours = capture_attention(loaded.model, inputs)
    reference = eager_attention(loaded.model, inputs)
    assert ours.shape == reference.shape == (1, 2, 4, inputs["input_ids"].shape[1],
                                             inputs["input_ids"].shape[1])
    assert (ours - reference).abs().max().item() <= TOL
    assert reference.max() > 0.3  # sharpened: not a comparison of near-uniform rows


@pytest.mark.parametrize("which", ["narrow_value", "wide_value"])
def test_some_heads_through_the_padded_kernel_equal_eager(deepseek_dir, deepseek_wide_value_dir, which):
    """A subset of heads: the fused kernel runs (value or q/k zero-padded to one head size) and α is
    rebuilt."""
    directory = deepseek_dir if which == "narrow_value" else deepseek_wide_value_dir
    loaded = models.load(str(directory))
    inputs = inputs_of(loaded, [SENTENCE, "the cat saw the dog"])  # padded batch
    ours = capture_attention(loaded.model, inputs, layers=[1], heads=[3, 0])
    reference = eager_attention(loaded.model, inputs)[:, 1:2][:, :, [3, 0]]
    assert masked_diff(ours, reference, inputs["attention_mask"]) <= TOL


@pytest.mark.parametrize("heads", [None, [2]])
def test_logits_equal_plain_sdpa(deepseek_dir, heads):
    loaded = models.load(str(deepseek_dir))
    inputs = inputs_of(loaded, [SENTENCE, "the cat saw the dog"])
    with torch.no_grad():
        plain = loaded.model(**inputs).logits
        with capture(loaded.model, DenseSink(heads=heads)):
            engine = loaded.model(**inputs).logits
    keep = inputs["attention_mask"].bool()
    assert (plain - engine)[keep].abs().max().item() <= TOL


def test_generate_with_kv_cache_rows_equal_eager(deepseek_dir):
    """The cache holds MLA's compressed latents; every decode step's row still equals eager over the full
    text."""
    loaded = models.load(str(deepseek_dir))
    inputs = inputs_of(loaded, ["the cat saw the dog and"])
    n_prompt = inputs["input_ids"].shape[1]
    sink = DenseSink()
    with capture(loaded.model, sink), torch.no_grad():
        generated = loaded.model.generate(**inputs, max_new_tokens=3, do_sample=False, pad_token_id=1)
    reference = eager_attention(loaded.model,
                                {"input_ids": generated, "attention_mask": torch.ones_like(generated)})
    assert (sink.attention(0) - reference[..., :n_prompt, :n_prompt]).abs().max() <= TOL
    for step in range(1, sink.steps):
        position = n_prompt + step - 1
        row = sink.attention(step)[..., 0, :]  # [batch layer head key]
        assert (row - reference[..., position, : position + 1]).abs().max() <= TOL


def test_gathered_alpha_equals_eager_at_the_slots(deepseek_dir, slot_path):
    loaded = models.load(str(deepseek_dir))
    inputs = inputs_of(loaded, [SENTENCE])
    n = inputs["input_ids"].shape[1]
    # [batch query slot]
    slots = torch.stack([torch.arange(n) - 1, torch.zeros(n, dtype=torch.long)], dim=-1)[None]

    class Gather:
        def __init__(self):
            self.got = {}

        def needs(self, layer, n_heads, n_query):
            return SinkNeeds(gather=(range(n_heads), slots))

        def update_gathered(self, layer, heads, alpha):
            self.got[layer] = alpha

    sink = Gather()
    with capture(loaded.model, sink), torch.no_grad():
        loaded.model(**inputs)
    reference = eager_attention(loaded.model, inputs)[0]  # [layer head query key]
    for layer in (0, 1):
        expected = reference[layer].gather(-1, slots.clamp(min=0).expand(4, -1, -1))  # [head query slot]
        expected = expected * (slots >= 0)
        assert (sink.got[layer][0] - expected).abs().max() <= TOL


def test_kernel_refusing_the_shapes_falls_back_with_the_lse():
    """_fused_attention never raises on head sizes the kernel refuses; output and LSE equal the blockwise
    softmax."""
    from probe.engine.attention import _blockwise_attention, _fused_attention

    torch.manual_seed(0)
    query, key = torch.randn(2, 4, 19, 12), torch.randn(2, 2, 19, 12)  # GQA: 2 kv heads
    for dim_v in (6, 20):
        value = torch.randn(2, 2, 19, dim_v)
        mask = torch.zeros(2, 1, 19, 19)
        mask[1, :, :, 15:] = float("-inf")
        for is_causal, m in ((True, None), (False, mask)):
            out, lse = _fused_attention(query, key, value, m, is_causal, 0.3, 0.0)
            out_ref, lse_ref = _blockwise_attention(query, key, value, m, is_causal, 0.3, block_rows=4)
            assert out.shape == (2, 4, 19, dim_v)
            assert (out - out_ref).abs().max() <= TOL and (lse - lse_ref).abs().max() <= TOL


def test_probe_capture_cli_writes_eager_attention(deepseek_dir, tmp_path):
    out = tmp_path / "mla.npz"
    assert main(["capture", "--model", str(deepseek_dir), "--text", SENTENCE, "--out", str(out)]) == 0
    loaded = models.load(str(deepseek_dir))
    reference = eager_attention(loaded.model, inputs_of(loaded, [SENTENCE]))[0]
    with np.load(out) as data:
        assert np.abs(data["attention"] - reference.numpy()).max() <= TOL


def test_label_model_produces_a_table(deepseek_dir):
    from probe.heads.label import LabelConfig, label_model

    loaded = models.load(str(deepseek_dir))
    table = label_model(loaded, LabelConfig(types=("previous_token", "induction"), examples=4, seq_len=24,
                                            ablate="none"))
    assert set(zip(table["layer"], table["head"], strict=True)) == {(layer, head) for layer in range(2)
                                                                    for head in range(4)}
    assert table["score"].notna().all()
