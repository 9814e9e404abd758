"""probe.card: the architecture card, checked against the real modules (parameters) and the real KV cache
(bytes)."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from probe.card import architecture_card, format_bytes, load_config
from probe.cli import main
from probe.errors import ProbeError
from probe.zoo.tiny import build_tiny


def _attention_modules(model, arch: str):
    """The Q, K, V and output projections of every layer, as the model holds them."""
    if arch == "gpt2":
        return [block.attn for block in model.transformer.h]
    if arch in ("llama", "mistral"):
        return [layer.self_attn for layer in model.model.layers]
    encoder = model.esm.encoder if arch == "esm" else model.bert.encoder
    return [module for layer in encoder.layer
            for module in (layer.attention.self, layer.attention.output.dense)]


def _cache_values(model, n_tokens: int) -> int:
    """Values in the model's own KV cache after one forward pass over `n_tokens` tokens."""
    with torch.inference_mode():
        out = model(input_ids=torch.randint(3, 50, (1, n_tokens)), use_cache=True)
    return sum(layer.keys.numel() + layer.values.numel() for layer in out.past_key_values.layers)


@pytest.mark.parametrize("arch, attention, kv_heads", [("gpt2", "MHA", 4), ("llama", "GQA", 2),
                                                        ("mistral", "GQA", 2), ("esm", "MHA", 4),
                                                        ("bert", "MHA", 4)])
def test_card_matches_the_built_model(arch, attention, kv_heads):
    model, _ = build_tiny(arch)
    card = architecture_card(model.config)
    assert (card.attention, card.query_heads, card.kv_heads, card.head_dim, card.layers) == (
        attention, 4, kv_heads, 8, 2)
    real = sum(p.numel() for module in _attention_modules(model, arch) for p in module.parameters())
    assert card.attention_parameters == real


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_kv_cache_bytes_equal_the_real_cache(arch):
    model, _ = build_tiny(arch)
    card = architecture_card(model.config)
    values = _cache_values(model, 20)
    assert card.kv_cache_bytes("fp16", 20) == values * 2 and card.kv_cache_bytes("fp8", 20) == values
    assert card.kv_values_per_token == values // 20


def test_sliding_window_caps_the_cache():
    model, _ = build_tiny("mistral")  # window 8, GQA 4 query / 2 kv heads of dim 8, 2 layers
    card = architecture_card(model.config)
    assert (card.sliding_window, card.sliding_layers) == (8, 2)
    assert card.kv_values_per_token == 2 * 2 * (8 + 8)
    assert card.kv_cache_bytes("bf16", 4096) == 2 * 8 * 32 * 2  # 8 tokens per layer, whatever the length
    # transformers keeps W - 1 tokens between steps (the next token makes W): ours is the peak, W.
    assert card.kv_cache_bytes("fp8", 20) == _cache_values(model, 20) + 2 * 32
    assert "8 tokens on 2 of 2 layers" in dict(card.rows())["sliding window"]


def test_gemma_style_alternating_window_counts_only_the_sliding_layers():
    config = transformers.Gemma2Config(num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                                       head_dim=16, hidden_size=64, sliding_window=100)
    card = architecture_card(config)
    assert card.sliding_layers == 2 and card.attention == "GQA"
    per_layer = 4 * (16 + 16)
    assert card.kv_cache_bytes("fp8", 1000) == 2 * 1000 * per_layer + 2 * 100 * per_layer


def test_mqa_and_positional_schemes():
    assert architecture_card(
        transformers.LlamaConfig(num_attention_heads=8, num_key_value_heads=1)).attention == "MQA"
    llama = architecture_card(
        transformers.LlamaConfig(rope_parameters={"rope_type": "default", "rope_theta": 5e5}))
    assert llama.positional == "rotary (RoPE, θ = 500000)"
    gpt2 = architecture_card(transformers.GPT2Config())
    assert gpt2.positional == "learned absolute (1024 positions)"
    assert gpt2.attention_parameters == 12 * (768 * 3 * 768 + 3 * 768 + 768 * 768 + 768)  # c_attn + c_proj
    assert gpt2.kv_cache_bytes("fp16", 4096) == 12 * 2 * 768 * 4096 * 2  # 144 MiB, the textbook figure
    assert architecture_card(transformers.BloomConfig()).positional.startswith("ALiBi")


MLA = dict(model_type="deepseek_v3", vocab_size=64, hidden_size=64, intermediate_size=64,
           moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
           kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12,
           n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=2, n_shared_experts=1,
           max_position_embeddings=128)


def test_mla_card_from_a_deepseek_style_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MLA))
    card = architecture_card(load_config(str(path)))
    assert card.attention == "MLA"
    assert (card.kv_lora_rank, card.q_lora_rank, card.qk_rope_head_dim,
            card.qk_nope_head_dim) == (16, 24, 8, 16)
    assert (card.head_dim, card.value_head_dim) == (24, 12)
    # latent + shared rope key, per layer: not 4 heads × (24 + 12)
    assert card.kv_values_per_token == 2 * (16 + 8)
    assert card.kv_cache_bytes("fp16", 131072) == 2 * 24 * 131072 * 2
    # the attention parameters equal the real DeepSeek-V3 attention module's
    config = transformers.DeepseekV3Config(**{k: v for k, v in MLA.items() if k != "model_type"})
    model = transformers.DeepseekV3ForCausalLM(config)
    real = sum(p.numel() for layer in model.model.layers for p in layer.self_attn.parameters())
    assert card.attention_parameters == real
    rows = dict(card.rows())
    assert rows["kv latent (kv_lora_rank)"] == "16" and "latent + rope key" in rows["KV cache values per "
                                                                                    "token"]


def test_mla_without_query_latent_counts_a_full_query_projection():
    config = transformers.DeepseekV3Config(
        **{k: v for k, v in MLA.items() if k != "model_type"} | {"q_lora_rank": None})
    model = transformers.DeepseekV3ForCausalLM(config)
    real = sum(p.numel() for layer in model.model.layers for p in layer.self_attn.parameters())
    assert architecture_card(config).attention_parameters == real


def test_format_bytes():
    assert (format_bytes(512), format_bytes(1536), format_bytes(2**30 * 3)) == ("512 B", "1.5 KiB", "3 GiB")


def test_cli_card_table_and_json(tiny_dir, capsys):
    directory = tiny_dir("llama")
    assert main(["card", "--model", str(directory)]) == 0
    table = capsys.readouterr().out
    assert "GQA (grouped-query)" in table and "4 query · 2 key/value (2 query heads per kv head)" in table
    assert main(["card", "--model", str(directory), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["attention"] == "GQA" and data["kv_cache_bytes"]["fp16"]["per token"] == 2 * 2 * 16 * 2


def test_cli_card_errors(tmp_path, capsys):
    assert main(["card", "--model", str(tmp_path)]) == 2
    assert "holds no config.json" in capsys.readouterr().err
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    assert main(["card", "--model", str(bad)]) == 2
    assert "cannot read" in capsys.readouterr().err
    bad.write_text(json.dumps({"hidden_size": 4}))
    assert main(["card", "--model", str(bad)]) == 2
    capsys.readouterr()
    for text in ("[1, 2]", json.dumps({"model_type": "llama", "num_attention_heads": 3, "hidden_size": 4,
                                       "num_hidden_layers": 1, "num_key_value_heads": 2})):
        bad.write_text(text)
        assert main(["card", "--model", str(bad)]) == 2
        assert capsys.readouterr().err.count("\n") == 1  # one line
    assert main(["card", "--model", "/no/such/config.json"]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad.write_text(json.dumps({"hidden_size": 4}))
    with pytest.raises(ProbeError, match="no model_type"):
        load_config(str(bad))


# ------------------------------------------------------------------------------------------------------------
# The memory plan (probe.memory) and the refusal before loading
# ------------------------------------------------------------------------------------------------------------

# A tiny Llama: L = 2 layers, D = 16, H = 4 query heads, G = 2 key/value heads (d = 4), F = 24, V = 50,
# untied.
TINY = {"model_type": "llama", "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 24, "vocab_size": 50, "max_position_embeddings": 64,
        "tie_word_embeddings": False}


def test_parameters_of_the_tiny_config_by_hand_and_by_the_model():
    from probe.memory import model_parameters

    # embeddings 50·16 = 800, output head 800; per layer: q 16·16 + k 16·8 + v 16·8 + o 16·16 = 768, MLP
    # 3·16·24 = 1152, two norms 32 -> 1952; final norm 16 is not counted
    assert model_parameters(TINY) == 800 + 800 + 2 * 1952 == 5504
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{k: v for k, v in TINY.items()
                                                                      if k != "model_type"}))
    assert sum(p.numel() for p in model.parameters()) == 5504 + 16


def test_memory_plan_of_the_tiny_config_by_hand():
    from probe.memory import memory_plan

    plan = memory_plan(TINY, seq_len=10, dtype="bfloat16", batch=3, block_bytes=1000, sink_bytes=7)
    assert plan.weights == 5504 * 2
    assert plan.kv_cache == 3 * 10 * 2 * (2 * (4 + 4)) * 2  # B · N · L · G · (d_k + d_v) · 2 bytes = 1920
    assert plan.activations == 3 * 10 * (4 * 16 + 2 * 24) * 2 == 6720
    assert plan.logits == 3 * 10 * 50 * 4 == 6000
    assert plan.alpha_block == 1000 + 3 * 4 * 10 * 4  # the block and the LSE [batch head query] in fp32
    assert plan.sinks == 7
    assert plan.eager_attention == 2 * 3 * 4 * 10 * 10 * 2 == 4800
    assert plan.capture == 11008 + 1920 + 6720 + 6000 + 1480 + 7
    assert plan.eager == 11008 + 1920 + 6720 + 6000 + 4800
    assert memory_plan(TINY, 10).dtype == "float32" and memory_plan(TINY, 10).weights == 5504 * 4
    with pytest.raises(ProbeError, match="at least 1 token"):
        memory_plan(TINY, 0)


def test_the_eager_alternative_grows_with_n_squared_and_the_capture_does_not():
    from probe.memory import memory_plan

    short, long = memory_plan(TINY, 1024), memory_plan(TINY, 4096)
    assert long.eager_attention == 16 * short.eager_attention
    assert long.capture - long.alpha_block < 4.1 * (short.capture - short.alpha_block)


def test_available_memory_override_and_the_machines_own(monkeypatch):
    from probe.memory import available_memory

    monkeypatch.setenv("PROBE_AVAILABLE_MEMORY", "2G")
    assert available_memory() == 2 * 2**30
    monkeypatch.setenv("PROBE_AVAILABLE_MEMORY", "1536")
    assert available_memory() == 1536
    monkeypatch.setenv("PROBE_AVAILABLE_MEMORY", "lots")
    with pytest.raises(ProbeError, match="PROBE_AVAILABLE_MEMORY"):
        available_memory()
    monkeypatch.delenv("PROBE_AVAILABLE_MEMORY")
    assert available_memory() > 2**20


def test_check_fits_refuses_in_one_line_naming_the_flags():
    from probe.memory import check_fits, memory_plan

    plan = memory_plan(TINY, 10)
    check_fits(plan, plan.capture, "probe label", "a shorter --seq-len")  # exactly enough: fine
    check_fits(plan, None, "probe label", "a shorter --seq-len")  # unknown: no refusal
    with pytest.raises(ProbeError) as error:
        check_fits(plan, plan.capture - 1, "probe label", "a shorter --seq-len")
    message = str(error.value)
    assert "\n" not in message and "--device-map auto --offload-folder DIR" in message
    assert "--dtype bfloat16" in message and "a shorter --seq-len" in message


def test_cli_card_prints_the_memory_plan(tiny_dir, capsys):
    assert main(["card", "--model", str(tiny_dir("llama")), "--seq-len", "2048", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert "memory plan" in out and "1 × 2,048 tokens in bfloat16" in out and "eager α" in out
    assert main(["card", "--model", str(tiny_dir("llama")), "--seq-len", "64", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["memory_plan"]
    assert plan["seq_len"] == 64 and plan["capture"] == sum(plan[k] for k in ("weights", "kv_cache",
                                                                              "activations",
                                                                                "logits",
                                                                                "alpha_block", "sinks"))
    assert main(["card", "--model", str(tiny_dir("llama")), "--seq-len", "0"]) == 2


@pytest.mark.parametrize("argv", [
    ["label", "--model", "zoo:induction", "--types", "previous_token"],
    ["profile", "--model", "zoo:induction", "--random", "2", "--seq-len", "64", "--out", "{tmp}/p.csv"],
])
def test_label_and_profile_refuse_before_loading_weights(argv, tmp_path, monkeypatch, capsys):
    import probe.models

    def no_loading(*args, **kwargs):
        raise AssertionError("weights were loaded")

    monkeypatch.setattr(probe.models, "load", no_loading)
    monkeypatch.setenv("PROBE_AVAILABLE_MEMORY", "100K")
    assert main([part.format(tmp=tmp_path) for part in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(
        err.splitlines()) == 1 and "is available" in err and "--device-map auto --offload-folder DIR" in err
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_run_that_fits_is_not_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBE_AVAILABLE_MEMORY", "4G")
    out = tmp_path / "p.csv"
    assert main(["profile", "--model", "zoo:induction", "--random", "2", "--seq-len", "32", "--bootstrap",
                 "10", "--out", str(out)]) == 0
    assert out.is_file()


def test_a_length_beyond_the_positions_is_noted(tiny_dir, capsys):
    """Issue 44: --seq-len 10**12 prints byte counts and says the model takes only its positions; a length it
    takes has no note."""
    from probe.memory import memory_plan

    model = str(tiny_dir("llama"))
    positions = architecture_card(load_config(model)).max_positions
    assert main(["card", "--model", model, "--seq-len", str(10**12)]) == 0
    out = capsys.readouterr().out
    assert f"the model takes at most {positions:,} positions" in out and "1,000,000,000,000 tokens" in out
    assert main(["card", "--model", model, "--seq-len", str(positions)]) == 0
    assert "takes at most" not in capsys.readouterr().out
    plan = memory_plan(load_config(model), 10**12)  # the library says it too (Python callers)
    assert plan.beyond_positions and plan.max_positions == positions
