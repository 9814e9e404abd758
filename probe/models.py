"""Loading models: a Hugging Face hub id, a local directory (what `save_pretrained` writes) or `zoo:NAME`.

`load()` returns a :class:`LoadedModel` in eval mode on the sdpa kernel, with its tokenizer and its kind:
"causal_lm" (GPT-2, Llama, ...), "masked_lm" (BERT, ...) or "protein_mlm" (ESM, with its contact head).
Every failure a user can fix is a one-line :class:`~probe.errors.ProbeError` naming the fix.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from probe.errors import ProbeError

ModelKind = Literal["causal_lm", "masked_lm", "protein_mlm"]
ZOO_PREFIX = "zoo:"

# Amino-acid letters the ESM vocabulary holds as residues (20 standard + B, U, Z, O, X ambiguity codes).
AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWYBUZOX"


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for capture."""

    model: nn.Module
    tokenizer: object  # a transformers tokenizer
    kind: ModelKind
    name: str  # what the user asked for: hub id, directory or zoo:NAME
    revision: str  # commit hash for hub models, a content hash of the weights for local ones

    @property
    def config(self):
        return self.model.config

    @property
    def n_layers(self) -> int:
        return self.model.config.get_text_config().num_hidden_layers

    @property
    def n_heads(self) -> int:
        return self.model.config.get_text_config().num_attention_heads

    @property
    def max_tokens(self) -> int:
        """Longest input in tokens (special tokens included) the model's positions allow."""
        config = self.model.config.get_text_config()
        for name in ("n_positions", "max_position_embeddings"):
            if getattr(config, name, None):
                limit = int(getattr(config, name))
                if config.model_type == "esm":
                    limit -= 2  # ESM-2 was trained on 1024 tokens (1022 residues + BOS/EOS) of its 1026 positions
                elif config.model_type in ("roberta", "xlm-roberta", "camembert"):
                    limit -= (config.pad_token_id or 0) + 1  # these number positions from pad_token_id + 1
                return limit
        return 2**31 - 1

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def check_length(self, n_tokens: int, what: str = "input") -> None:
        """One-line error when an input is longer than the model's positions."""
        if n_tokens > self.max_tokens:
            raise ProbeError(f"{what} is {n_tokens} tokens but {self.name} takes at most {self.max_tokens}; "
                             "shorten it" + (" or use --window" if self.kind == "protein_mlm" else ""))


def resolve(spec: str) -> str:
    """A zoo:NAME spec -> the shipped directory; anything else is returned unchanged."""
    if spec.startswith(ZOO_PREFIX):
        from probe import zoo

        return str(zoo.path(spec[len(ZOO_PREFIX):]))
    return spec


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def _looks_like_path(spec: str) -> bool:
    """Not shaped like a hub id ("gpt2", "facebook/esm2_t6_8M_UR50D"): treat it as a directory."""
    return not _HUB_ID.match(spec)


def _kind_of(config) -> ModelKind:
    if config.model_type == "esm":
        return "protein_mlm"
    architectures = " ".join(getattr(config, "architectures", None) or [])
    if getattr(config, "is_decoder", False) or "CausalLM" in architectures or "LMHead" in architectures:
        return "causal_lm"
    if config.model_type in ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi", "gpt_neox"):
        return "causal_lm"
    return "masked_lm"


def _model_class(kind: ModelKind):
    import transformers

    return {
        "causal_lm": transformers.AutoModelForCausalLM,
        "masked_lm": transformers.AutoModelForMaskedLM,
        "protein_mlm": transformers.EsmForMaskedLM,
    }[kind]


def _hub_error(spec: str, error: Exception) -> ProbeError:
    text = str(error).lower()
    if "not a valid model identifier" in text or "repository not found" in text or "404" in text:
        return ProbeError(f"unknown model {spec!r}: not a local directory and not a model on the Hugging Face hub")
    return ProbeError(
        f"cannot load {spec!r}: the Hugging Face hub is not reachable and the model is not in the local cache; "
        f"download it where the hub is reachable (`hf download {spec}`) and pass that directory with --model DIR, "
        "or set HF_HOME to a cache that holds it"
    )


def _weights_hash(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.safetensors")) + sorted(directory.glob("*.bin")):
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return "sha256:" + digest.hexdigest()[:16]


def load(
    spec: str,
    device: str = "cpu",
    dtype: str | torch.dtype | None = None,  # None: the checkpoint's own (float32 for our zoo)
) -> LoadedModel:
    """Load a model and its tokenizer for capture; one-line ProbeError for anything the user can fix."""
    import transformers

    source = resolve(spec)
    local = Path(source).expanduser()
    if local.exists():
        if not local.is_dir() or not (local / "config.json").exists():
            raise ProbeError(f"{source} is not a model directory (no config.json); pass what save_pretrained wrote")
        source = str(local)
    elif _looks_like_path(spec):
        raise ProbeError(f"model directory {spec} does not exist; check the path or pass a hub id such as gpt2")
    try:
        device_obj = torch.device(device)
    except RuntimeError:
        raise ProbeError(f"unknown device {device!r}: use cpu, cuda or cuda:N") from None
    if device_obj.type == "cuda" and not torch.cuda.is_available():
        raise ProbeError("--device cuda was asked for but no CUDA device is available; use --device cpu")
    torch_dtype = _parse_dtype(dtype)

    try:
        config = transformers.AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as error:
        if local.exists():
            raise ProbeError(f"cannot read the config in {source}: {str(error).splitlines()[0]}") from None
        raise _hub_error(spec, error) from None
    kind = _kind_of(config)
    model_class = _model_class(kind)
    try:
        model = model_class.from_pretrained(source, attn_implementation="sdpa", dtype=torch_dtype)
    except (OSError, ValueError) as error:
        if "sdpa" in str(error).lower() or "attention" in str(error).lower():
            raise ProbeError(f"{config.model_type} models do not route attention through transformers' "
                             "AttentionInterface, so their attention cannot be captured") from None
        if local.exists():
            raise ProbeError(f"cannot load the weights in {source}: {str(error).splitlines()[0]}") from None
        raise _hub_error(spec, error) from None
    if not getattr(model, "_supports_attention_backend", False):
        raise ProbeError(f"{type(model).__name__} does not route attention through transformers' AttentionInterface, "
                         "so its attention cannot be captured; use a model class that does (GPT-2, BERT, ESM, Llama, ...)")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, TypeError) as error:
        raise ProbeError(f"no usable tokenizer for {spec}: save one next to the model "
                         f"(tokenizer.save_pretrained(DIR)) — {str(error).splitlines()[0]}") from None
    model.to(device_obj).eval()
    revision = getattr(config, "_commit_hash", None) or (_weights_hash(local) if local.exists() else "unknown")
    return LoadedModel(model, tokenizer, kind, spec, revision)


def _parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | str:
    if dtype is None:
        return "auto"
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
             "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype not in names:
        raise ProbeError(f"unknown dtype {dtype!r}: use one of float32, float16, bfloat16")
    return names[dtype]


def tokenize_text(loaded: LoadedModel, text: str) -> dict[str, torch.Tensor]:
    """Tokenize one text (checked against the model's length limit), on the model's device."""
    if not text:
        raise ProbeError("the text is empty: pass --text with at least one word")
    encoded = loaded.tokenizer(text, return_tensors="pt")
    loaded.check_length(encoded["input_ids"].shape[1], "the text")
    return {name: tensor.to(loaded.device) for name, tensor in encoded.items() if name != "token_type_ids"}


def clean_protein(sequence: str) -> str:
    """Upper-case a protein sequence and reject letters ESM would silently map to <unk>, naming their positions."""
    cleaned = "".join(sequence.split()).upper()
    if not cleaned:
        raise ProbeError("the protein sequence is empty")
    bad = [(index + 1, letter) for index, letter in enumerate(cleaned) if letter not in AMINO_ACIDS]
    if bad:
        shown = ", ".join(f"{letter!r} at {position}" for position, letter in bad[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        raise ProbeError(f"not amino-acid letters: {shown}{more} (1-based positions); remove them or use X for unknown")
    return cleaned


def tokenize_protein(loaded: LoadedModel, sequence: str) -> dict[str, torch.Tensor]:
    """Tokenize one protein sequence (validated, length-checked), on the model's device."""
    cleaned = clean_protein(sequence)
    encoded = loaded.tokenizer(cleaned, return_tensors="pt")
    loaded.check_length(encoded["input_ids"].shape[1], f"the sequence ({len(cleaned)} residues)")
    return {name: tensor.to(loaded.device) for name, tensor in encoded.items() if name != "token_type_ids"}


def model_card(loaded: LoadedModel) -> dict:
    """A JSON-able summary of the model (for logs and output metadata)."""
    config = loaded.model.config.get_text_config()
    return {"name": loaded.name, "revision": loaded.revision, "kind": loaded.kind, "model_type": config.model_type,
            "layers": loaded.n_layers, "heads": loaded.n_heads, "max_tokens": loaded.max_tokens}

