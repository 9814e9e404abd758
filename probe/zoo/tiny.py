"""Tiny models and tokenizers built locally, with seeded random weights.

No model hub is needed: these are what the tests, benchmarks and offline demos run on. Each builder writes a
directory that `probe.models.load(DIR)` (and `from_pretrained`) reads back, exactly like a downloaded
checkpoint.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
import transformers
from tokenizers import ByteLevelBPETokenizer, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import BertTokenizer, EsmTokenizer, PreTrainedTokenizerFast

from probe.quiet import transformers_quiet

TinyArch = Literal["gpt2", "esm", "bert", "llama", "mistral", "protbert", "prott5"]

# ESM-2's vocabulary, in its checkpoint order.
ESM_VOCAB = ["<cls>", "<pad>", "<eos>", "<unk>", *"LAGVSERTIDPKQNFYMHWCXBUZO", ".", "-", "<null_1>", "<mask>"]
# ProtBert's (Rostlab/prot_bert) vocabulary, in its checkpoint order: residues are words, separated by spaces.
PROTBERT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"LAGVESIKRDTPNQFYMHCWXUBZO"]
# ProtT5's residue pieces (SentencePiece, "▁" marks a word start) after its three special tokens.
PROTT5_RESIDUES = "ALGVSREDTIPKFQNYMHWCXBOUZ"

# A small English vocabulary so tiny text models tokenize ordinary sentences word by word.
DEMO_WORDS = (
    "the a an of to and in is was it he she they his her their him them that this with for on as at by from "
    "mary john alice bob doctor nurse teacher pilot cat dog book ball house garden city river went gave said "
    "saw took found liked wanted because when then after before , . ! ? one two three four five six seven "
    "eight nine"
).split()


def word_tokenizer(words: Sequence[str], bos_token: str | None = None):
    """A fast word-level tokenizer over `words` (split on whitespace and punctuation), with <unk> and <pad>.

    With `bos_token`, every encoded text starts with it (GPT-2-style models then get an attention-sink
    position).
    """
    specials = ["<unk>", "<pad>"] + ([bos_token] if bos_token else [])
    vocab = {token: index for index, token in enumerate(dict.fromkeys([*specials, *words]))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    if bos_token:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos_token} $A", special_tokens=[(bos_token, vocab[bos_token])]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", bos_token=bos_token,
    )


def esm_tokenizer(directory: str | Path):
    """An ESM tokenizer from a vocab file written into `directory` (ESM-2's 33 tokens)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.txt").write_text("\n".join(ESM_VOCAB) + "\n")
    return EsmTokenizer(str(directory / "vocab.txt"))


def protbert_tokenizer(directory: str | Path):
    """A ProtBert-style tokenizer (`[CLS] M K T ... [SEP]`, residues separated by spaces, case kept)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.txt").write_text("\n".join(PROTBERT_VOCAB) + "\n")
    return BertTokenizer(str(directory / "vocab.txt"), do_lower_case=False)


def prott5_tokenizer():
    """A ProtT5-style tokenizer: word-level pieces "▁M" "▁K" ... for residues separated by spaces, then
    `</s>`."""
    vocab = {token: index for index, token in enumerate(["<pad>", "</s>", "<unk>",
                                                         *(f"▁{letter}" for letter in PROTT5_RESIDUES)])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="</s>")


def tiny_config(arch: TinyArch, vocab_size: int, **overrides):
    """A small config of each supported architecture (2 layers, 4 heads, width 32 unless overridden)."""
    if arch == "gpt2":
        fields = dict(vocab_size=vocab_size, n_positions=128, n_embd=32, n_layer=2, n_head=4,
                      bos_token_id=None, eos_token_id=None)
        fields.update(overrides)
        return transformers.GPT2Config(**fields)
    if arch == "esm":
        fields = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=1026, position_embedding_type="rotary",
                      pad_token_id=1, mask_token_id=32, token_dropout=True, emb_layer_norm_before=False,
                      layer_norm_eps=1e-5, is_folding_model=False)
        fields.update(overrides)
        return transformers.EsmConfig(**fields)
    if arch == "bert":
        fields = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=128, pad_token_id=1)
        fields.update(overrides)
        return transformers.BertConfig(**fields)
    if arch == "protbert":
        fields = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=512, pad_token_id=0)
        fields.update(overrides)
        return transformers.BertConfig(**fields)
    if arch == "prott5":
        fields = dict(vocab_size=vocab_size, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                      num_heads=4, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                      pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, feed_forward_proj="relu",
                      is_encoder_decoder=True)
        fields.update(overrides)
        return transformers.T5Config(**fields)
    if arch in ("llama", "mistral"):
        fields = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
                      pad_token_id=1, bos_token_id=None, eos_token_id=None)
        if arch == "mistral":
            fields["sliding_window"] = 8
        fields.update(overrides)
        config_class = transformers.LlamaConfig if arch == "llama" else transformers.MistralConfig
        return config_class(**fields)
    raise ValueError(f"unknown tiny architecture {arch!r}")


def build_tiny(arch: TinyArch, seed: int = 0, sharpness: float = 1.0, **overrides):
    """(model, tokenizer) with seeded random weights, on the sdpa kernel, in eval mode. Not saved anywhere.

    `sharpness` s multiplies every query and key projection (BERT, ESM, T5, Llama-family; not GPT-2's fused
    c_attn), so attention logits grow by s² and the otherwise near-uniform attention of a random model has
    peaks: what measures with an attention threshold (Vig et al.'s θ = 0.3) need."""
    if arch in ("esm", "protbert"):
        with tempfile.TemporaryDirectory() as scratch:
            tokenizer = esm_tokenizer(scratch) if arch == "esm" else protbert_tokenizer(scratch)
    elif arch == "prott5":
        tokenizer = prott5_tokenizer()
    else:
        tokenizer = word_tokenizer(DEMO_WORDS,
                                   bos_token="<bos>" if arch in ("gpt2", "llama", "mistral") else None)
    config = tiny_config(arch, vocab_size=len(tokenizer), **overrides)
    model_class = {
        "gpt2": transformers.GPT2LMHeadModel,
        "esm": transformers.EsmForMaskedLM,
        "bert": transformers.BertForMaskedLM,
        "protbert": transformers.BertForMaskedLM,
        "prott5": transformers.T5EncoderModel,
        "llama": transformers.LlamaForCausalLM,
        "mistral": transformers.MistralForCausalLM,
    }[arch]
    torch.manual_seed(seed)
    config._attn_implementation = "sdpa"
    model = model_class(config).eval()
    if arch == "esm":  # a random (not zero) contact regression, so contact tests can fail
        with torch.no_grad():
            model.esm.contact_head.regression.weight.normal_(0.0, 0.5)
            model.esm.contact_head.regression.bias.normal_(0.0, 0.5)
    if sharpness != 1.0:
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith(("query.weight", "query.bias", "key.weight", "key.bias", "q_proj.weight",
                                  "k_proj.weight", ".q.weight", ".k.weight")):
                    parameter.mul_(sharpness)
    return model, tokenizer


def save_tiny(arch: TinyArch, directory: str | Path, seed: int = 0, sharpness: float = 1.0,
              **overrides) -> Path:
    """Build a tiny model of `arch` and save it (weights, config, tokenizer) to `directory`; returns the
    path."""
    directory = Path(directory)
    model, tokenizer = build_tiny(arch, seed, sharpness, **overrides)
    with transformers_quiet():  # no "Writing model shards" bars: a library call is quiet (probe.quiet)
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
    return directory


def english_bpe_tokenizer(texts: Sequence[str], vocab_size: int = 4000):
    """A GPT-2-style byte-level BPE tokenizer ("Ġ" marks a word start, <|endoftext|> is BOS and EOS), trained
    here on `texts` (e.g. the GAP development passages shipped with the package,
    ``probe.heads.corpus.passages``): a tokenizer that reads English for tests of text models, with no hub
    access (no GPT-2 tokenizer ships in any offline package). Deterministic for the same texts and
    vocab_size."""
    backend = ByteLevelBPETokenizer()
    backend.train_from_iterator(list(texts), vocab_size=vocab_size, min_frequency=2,
                                special_tokens=["<|endoftext|>"], show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=backend._tokenizer, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", unk_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")
