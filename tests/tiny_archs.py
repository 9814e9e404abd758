"""Tiny random models of architectures outside the zoo (hybrids, models outside AttentionInterface,
encoder–decoders), saved like checkpoints with a word tokenizer. Attention is peaked (initializer_range 0.2)
so α is far from uniform."""

from __future__ import annotations

import torch

from probe.zoo.tiny import DEMO_WORDS, word_tokenizer

# model type -> (Auto class, config keywords); vocab_size and the special token ids are filled in by `build`
DECODER = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
               max_position_embeddings=64)
ARCHS: dict[str, tuple[str, dict]] = {
    "qwen3_next": ("AutoModelForCausalLM", dict(
        DECODER, num_hidden_layers=4, head_dim=8, linear_num_value_heads=4, linear_num_key_heads=2,
        linear_key_head_dim=8, linear_value_head_dim=8, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=16, shared_expert_intermediate_size=16,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"])),
    "jamba": ("AutoModelForCausalLM", dict(
        DECODER, num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
        expert_layer_offset=1, num_experts=2, mamba_d_state=4, mamba_expand=2, mamba_dt_rank=4)),
    "zamba2": ("AutoModelForCausalLM", dict(
        DECODER, num_hidden_layers=4, mamba_d_state=4, mamba_headdim=8, mamba_ngroups=1, n_mamba_heads=8,
        layers_block_type=["mamba", "hybrid", "mamba", "hybrid"], num_mem_blocks=1)),
    "nemotron_h": ("AutoModelForCausalLM", dict(
        DECODER, num_hidden_layers=4, hybrid_override_pattern="M*M*", head_dim=8, mamba_num_heads=8,
        mamba_head_dim=8, ssm_state_size=4, n_groups=1)),
    "falcon_h1": ("AutoModelForCausalLM", dict(
        DECODER, num_hidden_layers=2, head_dim=8, mamba_d_ssm=32, mamba_n_heads=4, mamba_d_head=8,
        mamba_d_state=4, mamba_n_groups=1)),
    "lfm2": ("AutoModelForCausalLM", dict(
        DECODER, num_hidden_layers=4, layer_types=["conv", "full_attention", "conv", "full_attention"])),
    "olmo_hybrid": ("AutoModelForCausalLM", dict(DECODER, num_hidden_layers=4)),
    "kimi_linear": ("AutoModelForCausalLM", dict(
        DECODER, num_hidden_layers=4, num_key_value_heads=4, linear_num_heads=4, linear_head_dim=8,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"])),
    "granitemoehybrid": ("AutoModelForCausalLM", dict(
        DECODER, num_hidden_layers=4, mamba_n_heads=8, mamba_d_head=8, mamba_d_state=4, mamba_n_groups=1,
        layer_types=["mamba", "attention", "mamba", "attention"])),
    "qwen3_5_text": ("AutoModelForCausalLM", dict(
        DECODER, num_hidden_layers=4, head_dim=8, linear_num_value_heads=4, linear_num_key_heads=2,
        linear_key_head_dim=8, linear_value_head_dim=8,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"])),
    "stablelm": ("AutoModelForCausalLM", dict(DECODER, num_hidden_layers=2)),
    "bloom": ("AutoModelForCausalLM", dict(hidden_size=32, n_layer=2, n_head=4)),
    "deberta-v2": ("AutoModelForMaskedLM", dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        relative_attention=True, pos_att_type=["p2c", "c2p"], max_relative_positions=16, position_buckets=8)),
    "albert": ("AutoModelForMaskedLM", dict(
        embedding_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64)),
    "t5": ("AutoModelForSeq2SeqLM", dict(
        d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=3, num_heads=4,
        relative_attention_num_buckets=8, decoder_start_token_id=0)),
    "bart": ("AutoModelForSeq2SeqLM", dict(
        d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, decoder_start_token_id=2,
        forced_eos_token_id=None)),
}
HYBRIDS = ["qwen3_next", "jamba", "zamba2", "nemotron_h", "lfm2", "olmo_hybrid", "kimi_linear",
           "granitemoehybrid", "qwen3_5_text"]


def build(model_type: str, seed: int = 0):
    """(model, tokenizer): a tiny random model of `model_type` in eval mode on sdpa (eager where it has
    none)."""
    import transformers

    tokenizer = word_tokenizer(DEMO_WORDS, bos_token="<bos>")
    auto, keywords = ARCHS[model_type]
    config_class = type(transformers.AutoConfig.for_model(model_type))
    specials = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                    eos_token_id=None)
    if model_type in ("t5", "bart"):
        specials["eos_token_id"] = tokenizer.bos_token_id
    config = config_class(vocab_size=len(tokenizer), initializer_range=0.2, **specials, **keywords)
    config.init_std = 0.2  # BART's name for it
    torch.manual_seed(seed)
    model_class = getattr(transformers, auto)
    try:
        model = model_class.from_config(config, attn_implementation="sdpa")
    except ValueError:  # no sdpa (Bloom, DeBERTa-v2)
        model = model_class.from_config(config, attn_implementation="eager")
    sharpen = {"t5": (("q.weight", "k.weight"), 8.0), "bart": (("q_proj.weight", "k_proj.weight"), 3.0)}
    if model_type in sharpen:  # T5 initialises by factor, BART's attention stays flat: sharpen q and k
        suffixes, factor = sharpen[model_type]
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith(suffixes):
                    parameter.mul_(factor)
    return model.eval(), tokenizer


def save(model_type: str, directory, seed: int = 0):
    """Save the tiny model and its tokenizer to `directory` (what `probe.models.load(DIR)` reads)."""
    model, tokenizer = build(model_type, seed)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def padded_inputs(tokenizer, texts=("the cat saw the dog and the dog saw the cat", "mary went to the city")):
    """A right-padded batch of 2 (the second row shorter): input_ids and attention_mask."""
    encoded = tokenizer(list(texts), return_tensors="pt", padding=True)
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


def masked_diff(ours: torch.Tensor, reference: torch.Tensor, query_mask: torch.Tensor,
                key_mask: torch.Tensor | None = None) -> float:
    """max |ours − reference| over valid (query, key) pairs of `[batch layer head query key]` tensors."""
    key_mask = query_mask if key_mask is None else key_mask
    pairs = query_mask.bool()[:, None, None, :, None] & key_mask.bool()[:, None, None, None, :]
    return float(((ours - reference).abs() * pairs).max())


def eager_reference(model, inputs, key: str = "attentions") -> torch.Tensor:
    """α from the model's own eager attention (`output_attentions`): `[batch layer head query key]`."""
    previous = model.config._attn_implementation
    if previous != "eager":
        model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(**inputs, output_attentions=True)
    finally:
        if previous != "eager":
            model.set_attn_implementation(previous)
    return torch.stack([a for a in getattr(out, key) if a is not None], dim=1)
