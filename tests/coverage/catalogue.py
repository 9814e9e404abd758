"""The coverage list: one entry per model type, with the tiny config it is built from.

An entry holds inputs to the run, never its result: the config fields of a tiny random model (2 layers, or 4
for hybrids so that both layer kinds appear; width 32; ``initializer_range = 0.2`` so attention is peaked),
the class a checkpoint of that type is saved as, and how to feed it. What the engine does with it is measured
by :func:`tests.coverage.harness.run`. An entry the engine does not serve yet names, in ``expected``, the
status it has today and the issue item that fixes it; ``tests/engine/test_coverage.py`` turns that into a
strict xfail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Inputs = Literal["text", "audio"]  # audio: Whisper's log-mel features plus decoder tokens
Tokenizer = Literal["words", "esm"]

VOCAB = 128  # the model vocabulary; the word tokenizer of probe.zoo.tiny uses its first ~110 ids
WIDTH = 32
INIT = 0.2  # initializer_range: random attention is near-uniform at 0.02, peaked at 0.2


@dataclass(frozen=True)
class Expected:
    """A known gap of today's engine: the status the entry has now, and the issue item (branch) that fixes
    it."""

    status: Literal["refused", "FAILS", "partial"]
    fixed_by: str


@dataclass(frozen=True)
class Architecture:
    """One model type of the coverage list (frozen: the inputs of a run, not its result).

    Attributes
    ----------
    name : str
        What users call it ("GPT-2", "Gemma 2").
    model_type : str
        ``config.model_type`` (a key of transformers' ``CONFIG_MAPPING``).
    model_class : str
        The transformers class a checkpoint of this type is saved as (``save_pretrained``).
    config : dict
        Config fields of the tiny model, on top of the config class's defaults.
    inputs : {"text", "audio"}
        Token ids and a padding mask, or Whisper's features plus decoder tokens.
    tokenizer : {"words", "esm"}
        The tokenizer saved beside the model (probe.models.load needs one): the tiny word-level one, or
        ESM-2's.
    padding : {"left", "right"}
        Where the shorter row of the batch of 2 is padded (left for causal LMs, as in batched generation).
    default_suite : bool
        Run in the default test suite; False: only under ``-m slow`` (the list is costly as a whole).
    expected : Expected or None
        A known gap of today's engine (a strict xfail), or None: the entry must be equal or an eager fallback.
    note : str
        What the table should say beside the measurement (the variant the entry exercises).
    """

    name: str
    model_type: str
    model_class: str
    config: dict = field(default_factory=dict)
    inputs: Inputs = "text"
    tokenizer: Tokenizer = "words"
    padding: Literal["left", "right"] = "left"
    default_suite: bool = True
    expected: Expected | None = None
    note: str = ""

    @property
    def id(self) -> str:
        return self.model_type


def decoder(**fields) -> dict:
    """The tiny decoder-only LM most families accept (Llama-style field names; GQA 4 query / 2 kv heads)."""
    base = dict(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64,
                initializer_range=INIT, pad_token_id=1, bos_token_id=2, eos_token_id=2,
                tie_word_embeddings=False)
    base.update(fields)
    return base


def encoder(**fields) -> dict:
    """The tiny BERT-style encoder (BERT field names)."""
    base = dict(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64, max_position_embeddings=64, initializer_range=INIT, pad_token_id=1)
    base.update(fields)
    return base


HYBRID = ["linear_attention", "full_attention", "linear_attention", "full_attention"]

ARCHITECTURES: tuple[Architecture, ...] = (
    # --- decoder-only LMs -----------------------------------------------------------------------------------
    Architecture("GPT-2", "gpt2", "GPT2LMHeadModel",
                 dict(vocab_size=VOCAB, n_positions=64, n_embd=WIDTH, n_layer=2, n_head=4,
                      initializer_range=INIT, bos_token_id=2, eos_token_id=2, pad_token_id=1)),
    Architecture("GPT-NeoX (Pythia)", "gpt_neox", "GPTNeoXForCausalLM",
                 decoder(num_key_value_heads=None, rotary_pct=0.5), note="partial rotary"),
    Architecture("GPT-J", "gptj", "GPTJForCausalLM",
                 dict(vocab_size=VOCAB, n_positions=64, n_embd=WIDTH, n_layer=2, n_head=4, rotary_dim=4,
                      initializer_range=INIT, bos_token_id=2, eos_token_id=2, pad_token_id=1)),
    Architecture("OPT", "opt", "OPTForCausalLM",
                 dict(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=4,
                      ffn_dim=64, max_position_embeddings=64, word_embed_proj_dim=WIDTH, init_std=INIT,
                      pad_token_id=1, bos_token_id=2, eos_token_id=2)),
    Architecture("Llama", "llama", "LlamaForCausalLM", decoder(), note="GQA"),
    Architecture("Llama 4 (text)", "llama4_text", "Llama4ForCausalLM",
                 decoder(head_dim=8, intermediate_size_mlp=64, num_local_experts=2, num_experts_per_tok=1,
                         attention_chunk_size=4, layer_types=["chunked_attention", "full_attention"],
                         no_rope_layers=[1, 0], moe_layers=[1]),
                 note="chunked attention (chunk 4) beside a full layer"),
    Architecture("Mistral", "mistral", "MistralForCausalLM", decoder(sliding_window=4),
                 note="sliding window 4"),
    Architecture("Mixtral", "mixtral", "MixtralForCausalLM",
                 decoder(num_local_experts=2, num_experts_per_tok=1), note="MoE"),
    Architecture("Qwen2", "qwen2", "Qwen2ForCausalLM", decoder()),
    Architecture("Qwen3", "qwen3", "Qwen3ForCausalLM", decoder(head_dim=8), note="q/k norm"),
    Architecture("Qwen3-MoE", "qwen3_moe", "Qwen3MoeForCausalLM",
                 decoder(head_dim=8, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16)),
    Architecture("Gemma", "gemma", "GemmaForCausalLM", decoder(head_dim=8)),
    Architecture("Gemma 2", "gemma2", "Gemma2ForCausalLM",
                 decoder(head_dim=8, sliding_window=4, attn_logit_softcapping=2.0,
                         final_logit_softcapping=30.0, query_pre_attn_scalar=8),
                 note="attention soft-capping 2.0 (low, so tanh bites), sliding window 4"),
    Architecture("Gemma 3 (text)", "gemma3_text", "Gemma3ForCausalLM",
                 decoder(head_dim=8, sliding_window=4, query_pre_attn_scalar=8,
                         layer_types=["sliding_attention", "full_attention"]),
                 note="sliding / full layers"),
    Architecture("Gemma 3n (text)", "gemma3n_text", "Gemma3nForCausalLM",
                 decoder(head_dim=8, sliding_window=4, intermediate_size=[64, 64], num_hidden_layers=2,
                         layer_types=["sliding_attention", "full_attention"], num_kv_shared_layers=0,
                         hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB, laurel_rank=4,
                         altup_num_inputs=2, activation_sparsity_pattern=[0.0, 0.0]),
                 note="AltUp, per-layer inputs"),
    Architecture("Cohere", "cohere", "CohereForCausalLM", decoder()),
    Architecture("Cohere 2", "cohere2", "Cohere2ForCausalLM",
                 decoder(sliding_window=4, layer_types=["sliding_attention", "full_attention"])),
    Architecture("Phi", "phi", "PhiForCausalLM",
                 decoder(num_key_value_heads=None, partial_rotary_factor=0.5)),
    Architecture("Phi-3", "phi3", "Phi3ForCausalLM", decoder()),
    Architecture("OLMo", "olmo", "OlmoForCausalLM", decoder()),
    Architecture("OLMo 2", "olmo2", "Olmo2ForCausalLM", decoder()),
    Architecture("OLMo 3", "olmo3", "Olmo3ForCausalLM",
                 decoder(sliding_window=4, layer_types=["sliding_attention", "full_attention"])),
    Architecture("OLMoE", "olmoe", "OlmoeForCausalLM", decoder(num_experts=2, num_experts_per_tok=1)),
    Architecture("StarCoder2", "starcoder2", "Starcoder2ForCausalLM", decoder(sliding_window=4)),
    Architecture("Granite", "granite", "GraniteForCausalLM", decoder(attention_multiplier=0.25)),
    Architecture("SmolLM3", "smollm3", "SmolLM3ForCausalLM", decoder(no_rope_layers=[1, 0])),
    Architecture("GLM-4", "glm4", "Glm4ForCausalLM", decoder(head_dim=8)),
    Architecture("GLM-4-MoE", "glm4_moe", "Glm4MoeForCausalLM",
                 decoder(head_dim=8, n_routed_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
                         first_k_dense_replace=1, n_group=1, topk_group=1)),
    Architecture("MiniMax-M2", "minimax_m2", "MiniMaxM2ForCausalLM",
                 decoder(head_dim=8, num_local_experts=2, num_experts_per_tok=1)),
    Architecture("gpt-oss", "gpt_oss", "GptOssForCausalLM",
                 decoder(head_dim=8, num_local_experts=2, num_experts_per_tok=1, sliding_window=4,
                         layer_types=["sliding_attention", "full_attention"]),
                 note="per-head attention sinks (s_aux), sliding / full layers"),
    Architecture("DeepSeek-V3 (MLA)", "deepseek_v3", "DeepseekV3ForCausalLM",
                 decoder(num_key_value_heads=4, n_routed_experts=2, n_shared_experts=1, num_experts_per_tok=1,
                         moe_intermediate_size=16, n_group=1, topk_group=1, first_k_dense_replace=1,
                         q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
                         v_head_dim=6),
                 note="MLA (q/k head 12, value head 6)"),
    Architecture("StableLM", "stablelm", "StableLmForCausalLM", decoder(),
                 note="its class does not set _supports_attention_backend"),
    Architecture("Bloom", "bloom", "BloomForCausalLM",
                 dict(vocab_size=VOCAB, hidden_size=WIDTH, n_layer=2, n_head=4, initializer_range=INIT,
                      pad_token_id=1, bos_token_id=2, eos_token_id=2),
                 note="ALiBi"),
    Architecture("Falcon", "falcon", "FalconForCausalLM",
                 dict(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=4,
                      initializer_range=INIT, pad_token_id=1, bos_token_id=2, eos_token_id=2)),
    # --- hybrids: softmax attention beside linear attention / SSM layers ------------------------------------
    Architecture("Qwen3-Next", "qwen3_next", "Qwen3NextForCausalLM",
                 decoder(num_hidden_layers=4, head_dim=8, layer_types=HYBRID, linear_num_key_heads=2,
                         linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                         num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
                         shared_expert_intermediate_size=16),
                 note="gated DeltaNet + gated attention"),
    Architecture("Qwen3.5 (text)", "qwen3_5_text", "Qwen3_5ForCausalLM",
                 decoder(num_hidden_layers=4, head_dim=8, layer_types=HYBRID, linear_num_key_heads=2,
                         linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8),
                 note="gated DeltaNet + gated attention"),
    Architecture("Jamba", "jamba", "JambaForCausalLM",
                 decoder(num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=1, num_experts=2,
                         num_experts_per_tok=1, expert_layer_period=2, expert_layer_offset=1, mamba_d_state=4,
                         mamba_dt_rank=4, use_mamba_kernels=False),
                 note="Mamba + attention"),
    Architecture("Zamba2", "zamba2", "Zamba2ForCausalLM",
                 dict(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=4, intermediate_size=64, max_position_embeddings=64,
                      initializer_range=INIT, pad_token_id=1, bos_token_id=2, eos_token_id=2,
                      layers_block_type=["mamba", "hybrid", "mamba", "hybrid"], hybrid_layer_ids=[1, 3],
                      mamba_d_state=4, mamba_headdim=8, n_mamba_heads=8, mamba_ngroups=1, chunk_size=4,
                      attention_head_dim=16, attention_hidden_size=2 * WIDTH, adapter_rank=4,
                      use_mamba_kernels=False, num_mem_blocks=1),
                 note="Mamba2 + one shared attention block"),
    Architecture("Falcon-H1", "falcon_h1", "FalconH1ForCausalLM",
                 decoder(head_dim=8, mamba_d_ssm=32, mamba_n_heads=4, mamba_d_head=8, mamba_d_state=4,
                         mamba_chunk_size=4, mamba_n_groups=1),
                 note="attention and Mamba2 in parallel in every layer"),
    Architecture("LFM2", "lfm2", "Lfm2ForCausalLM",
                 decoder(num_hidden_layers=4,
                         layer_types=["conv", "full_attention", "conv", "full_attention"],
                         block_auto_adjust_ff_dim=False),
                 note="short convolutions + attention"),
    Architecture("Granite 4 (hybrid)", "granitemoehybrid", "GraniteMoeHybridForCausalLM",
                 decoder(num_hidden_layers=4, layer_types=["mamba", "attention", "mamba", "attention"],
                         num_local_experts=2, num_experts_per_tok=1, shared_intermediate_size=16,
                         mamba_n_heads=4, mamba_d_head=16, mamba_d_state=4, mamba_chunk_size=4,
                         mamba_n_groups=1),
                 note="Mamba2 + attention, MoE"),
    Architecture("Bamba", "bamba", "BambaForCausalLM",
                 decoder(num_hidden_layers=4, attn_layer_indices=[1, 3], mamba_n_heads=4, mamba_d_head=16,
                         mamba_d_state=4, mamba_chunk_size=4, mamba_n_groups=1),
                 note="Mamba2 + attention"),
    Architecture("Nemotron-H", "nemotron_h", "NemotronHForCausalLM",
                 decoder(num_hidden_layers=4, head_dim=8,
                         layers_block_type=["mamba", "attention", "mlp", "attention"], ssm_state_size=4,
                         mamba_num_heads=4, mamba_head_dim=8, n_groups=1, chunk_size=4,
                         use_mamba_kernels=False),
                 note="Mamba2 + attention + MLP blocks"),
    Architecture("Kimi-Linear", "kimi_linear", "KimiLinearForCausalLM",
                 decoder(num_hidden_layers=4, num_key_value_heads=4, layer_types=HYBRID,
                         mlp_layer_types=["dense"] * 4, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=4,
                         qk_nope_head_dim=8, v_head_dim=8, head_dim=8, linear_head_dim=8, linear_num_heads=4,
                         num_experts=2, num_experts_per_token=1, moe_intermediate_size=16),
                 note="Kimi delta attention + MLA"),
    Architecture("OLMo hybrid", "olmo_hybrid", "OlmoHybridForCausalLM",
                 decoder(num_hidden_layers=4, layer_types=HYBRID, linear_num_key_heads=2,
                         linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8),
                 note="gated DeltaNet + attention"),
    # --- encoders ------------------------------------------------------------------------------------------
    Architecture("BERT", "bert", "BertForMaskedLM", encoder(), padding="right"),
    Architecture("RoBERTa", "roberta", "RobertaForMaskedLM", encoder(max_position_embeddings=72),
                 padding="right"),
    Architecture("DistilBERT", "distilbert", "DistilBertForMaskedLM",
                 dict(vocab_size=VOCAB, dim=WIDTH, n_layers=2, n_heads=4, hidden_dim=64,
                      max_position_embeddings=64, initializer_range=INIT, pad_token_id=1), padding="right"),
    Architecture("ELECTRA", "electra", "ElectraForMaskedLM", encoder(embedding_size=WIDTH), padding="right"),
    Architecture("ALBERT", "albert", "AlbertForMaskedLM", encoder(embedding_size=16), padding="right",
                 note="one layer shared across depth (applied twice)"),
    Architecture("DeBERTa-v2", "deberta-v2", "DebertaV2ForMaskedLM",
                 encoder(relative_attention=True, pos_att_type=["p2c", "c2p"], max_relative_positions=16),
                 padding="right", note="disentangled relative attention"),
    Architecture("ModernBERT", "modernbert", "ModernBertForMaskedLM",
                 encoder(local_attention=4, global_attn_every_n_layers=2, pad_token_id=1, bos_token_id=2,
                         eos_token_id=2, cls_token_id=2, sep_token_id=2),
                 padding="right", note="local (window 4) / global layers"),
    Architecture("ModernBERT decoder", "modernbert-decoder", "ModernBertDecoderForCausalLM",
                 decoder(num_key_value_heads=None, sliding_window=4,
                         layer_types=["sliding_attention", "full_attention"], cls_token_id=2, sep_token_id=2),
                 note="causal, sliding / full layers"),
    Architecture("ESM-2", "esm", "EsmForMaskedLM",
                 encoder(vocab_size=33, position_embedding_type="rotary", mask_token_id=32,
                         token_dropout=True, emb_layer_norm_before=False),
                 tokenizer="esm", padding="right", note="protein LM, rotary"),
    Architecture("ESM C", "esmc", "EsmcForMaskedLM", encoder(vocab_size=64, num_key_value_heads=4),
                 tokenizer="esm", padding="right", note="protein LM"),
    # --- encoder-decoders ----------------------------------------------------------------------------------
    Architecture("T5", "t5", "T5ForConditionalGeneration",
                 dict(vocab_size=VOCAB, d_model=WIDTH, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                      num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
                      initializer_factor=1.0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=1),
                 padding="right", note="encoder, decoder, cross"),
    Architecture("mT5", "mt5", "MT5ForConditionalGeneration",
                 dict(vocab_size=VOCAB, d_model=WIDTH, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                      num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
                      initializer_factor=0.5, pad_token_id=1, eos_token_id=2, decoder_start_token_id=1),
                 padding="right", note="encoder, decoder, cross; gated GELU"),
    Architecture("BART", "bart", "BartForConditionalGeneration",
                 dict(vocab_size=VOCAB, d_model=WIDTH, encoder_layers=2, decoder_layers=2,
                      encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                      decoder_ffn_dim=64, max_position_embeddings=64, init_std=INIT, pad_token_id=1,
                      bos_token_id=2, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None),
                 padding="right", note="encoder, decoder, cross"),
    Architecture("Whisper", "whisper", "WhisperForConditionalGeneration",
                 dict(vocab_size=VOCAB, d_model=WIDTH, encoder_layers=2, decoder_layers=2,
                      encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                      decoder_ffn_dim=64, num_mel_bins=8, max_source_positions=8, max_target_positions=32,
                      init_std=INIT, pad_token_id=1, bos_token_id=2, eos_token_id=2, decoder_start_token_id=2,
                      suppress_tokens=None, begin_suppress_tokens=None),
                 inputs="audio", padding="right", note="audio encoder, decoder, cross"),
)
