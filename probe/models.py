"""Loading models: a Hugging Face hub id, a local directory (what `save_pretrained` writes) or `zoo:NAME`.

`load()` returns a :class:`LoadedModel` in eval mode on the sdpa kernel, with its tokenizer and its kind
(:class:`ModelKind`): "causal_lm" (GPT-2, Llama, ...), "masked_lm" (BERT, ...) or "protein_mlm" — every protein
language model, whatever its class:

* ESM style: one token per amino-acid letter, the sequence written as is (``MKTAYIAK``); ESM checkpoints also carry
  the contact regression of Rao et al. 2020 (``has_contact_head``);
* spaced style (ProtBert, IgBert, AntiBERTy-like BERTs, ProtT5 encoders): one token per residue, residues separated
  by spaces (``M K T A Y I A K``); no contact regression.

A model is a protein model when its tokenizer's vocabulary is amino acids: at least the 20 standard letters as
tokens, at most a handful of other non-special tokens, and the 20 letters tokenize to 20 residue tokens either
written together ("letters") or separated by spaces ("spaced"). :func:`tokenize_protein` applies the convention, so
users always pass plain sequences. Every failure a user can fix is a one-line :class:`~probe.errors.ProbeError`
naming the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from probe.errors import NoTokenizerError, ProbeError, first_line
from probe.hashing import weights_hash


class ModelKind(str, Enum):  # noqa: UP042 - StrEnum needs Python 3.11; the project supports 3.10
    """What a model is, decided once in :func:`load`; compare with the members (a str subclass, so files and
    messages keep the plain values)."""

    CAUSAL_LM = "causal_lm"
    MASKED_LM = "masked_lm"
    PROTEIN_MLM = "protein_mlm"

    def __str__(self) -> str:  # f"{kind}" -> "protein_mlm"
        return self.value

    @property
    def description(self) -> str:
        """"causal language model", "masked language model" or "protein model" (for messages)."""
        return {"causal_lm": "causal language model", "masked_lm": "masked language model",
                "protein_mlm": "protein model"}[self.value]


ResidueFormat = Literal["letters", "spaced"]
ZOO_PREFIX = "zoo:"

# Amino-acid letters the ESM vocabulary holds as residues (20 standard + B, U, Z, O, X ambiguity codes).
AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWYBUZOX"
STANDARD_AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
# A protein vocabulary may hold a few non-residue tokens beyond its special ones (ESM: "." and "-"); more is text.
MAX_OTHER_TOKENS = 8


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for capture (frozen): what :func:`load` returns.

    Attributes
    ----------
    model : torch.nn.Module
        The transformers model, in eval mode, on its attention implementation (sdpa).
    tokenizer : transformers.PreTrainedTokenizerBase
        Its tokenizer.
    kind : ModelKind
        Causal LM, masked LM or protein LM (decides which head types and analyses apply).
    name : str
        What the user asked for: hub id, directory or ``zoo:NAME``.
    revision : str
        The hub commit hash, or ``sha256:…`` of a local model's weight files.
    residue_format : {"letters", "spaced"} or None
        Protein models: residues as one string (ESM) or space-separated (ProtBert); None for text models.
    has_contact_head : bool
        The checkpoint carries a contact regression (ESM).
    n_layers, n_heads : int
        Transformer layers and query heads per layer (properties).
    """

    model: nn.Module
    tokenizer: object  # a transformers tokenizer
    kind: ModelKind
    name: str  # what the user asked for: hub id, directory or zoo:NAME
    revision: str  # commit hash for hub models, a content hash of the weights for local ones
    residue_format: ResidueFormat | None = None  # protein models: "letters" (ESM) or "spaced" (ProtBert); else None
    has_contact_head: bool = False  # the checkpoint carries a contact regression (ESM)

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
                             "shorten it" + (" or use --window" if self.kind == ModelKind.PROTEIN_MLM else ""))

    @property
    def residue_offset(self) -> int:
        """Token index of the first residue in an encoded sequence (1 after ``[CLS]`` / ``<cls>``, 0 without a BOS)."""
        return _residue_offset(self.tokenizer, self.residue_format)


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


def _strip_marker(token: str) -> str:
    """A vocabulary entry without its word markers (SentencePiece "▁", WordPiece "##", byte-level "Ġ")."""
    return token.removeprefix("##").lstrip("▁Ġ")


def residue_format(tokenizer) -> ResidueFormat | None:
    """"letters" (ESM: MKT → M K T), "spaced" (ProtBert: "M K T" → M K T) or None (not a protein vocabulary)."""
    try:
        vocab = tokenizer.get_vocab()
    except (AttributeError, NotImplementedError):
        return None
    if len(vocab) > 512:  # protein vocabularies are tiny (ESM 33, ProtBert 30, ProtT5 128 with sentinels)
        return None
    specials = set(getattr(tokenizer, "all_special_tokens", []))
    letters = {_strip_marker(token) for token in vocab}
    if not set(STANDARD_AMINO_ACIDS) <= letters:
        return None
    others = [token for token in vocab if token not in specials and _strip_marker(token) not in AMINO_ACIDS
              and not (token[:1] in "<[" and token[-1:] in ">]")]
    if len(others) > MAX_OTHER_TOKENS:
        return None
    for style, text in (("letters", STANDARD_AMINO_ACIDS), ("spaced", " ".join(STANDARD_AMINO_ACIDS))):
        try:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        except Exception:  # a tokenizer that cannot encode the probe is no protein tokenizer we can drive
            continue
        if [_strip_marker(token) for token in tokenizer.convert_ids_to_tokens(ids)] == list(STANDARD_AMINO_ACIDS):
            return style
    return None


def _residue_offset(tokenizer, style: ResidueFormat | None) -> int:
    """How many special tokens the tokenizer puts before the residues of one sequence."""
    encoded = tokenizer("A", return_special_tokens_mask=True)
    mask = encoded["special_tokens_mask"]
    return mask.index(0) if 0 in mask else 0


# Protein models by their config, whatever their tokenizer looks like: ESM-1/2 and ESM C (letters, BOS and EOS).
PROTEIN_MODEL_TYPES = ("esm", "esmc")


def _kind_of(config, style: ResidueFormat | None) -> ModelKind:
    if config.model_type in PROTEIN_MODEL_TYPES or style is not None:
        return ModelKind.PROTEIN_MLM
    architectures = " ".join(getattr(config, "architectures", None) or [])
    if getattr(config, "is_decoder", False) or "CausalLM" in architectures or "LMHead" in architectures:
        return ModelKind.CAUSAL_LM
    if config.model_type in ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi", "gpt_neox"):
        return ModelKind.CAUSAL_LM
    return ModelKind.MASKED_LM


# Encoder-decoder protein models (ProtT5) are analysed through their encoder alone.
_ENCODER_ONLY = ("t5", "mt5", "umt5")


def _model_class(kind: ModelKind, config):
    import transformers

    if config.model_type == "esm":
        return transformers.EsmForMaskedLM  # keeps the checkpoint's contact regression
    if kind == ModelKind.PROTEIN_MLM and config.model_type in _ENCODER_ONLY:
        return transformers.T5EncoderModel if config.model_type == "t5" else transformers.AutoModel
    return {
        ModelKind.CAUSAL_LM: transformers.AutoModelForCausalLM,
        ModelKind.MASKED_LM: transformers.AutoModelForMaskedLM,
        ModelKind.PROTEIN_MLM: transformers.AutoModelForMaskedLM,
    }[kind]


def has_contact_head(model: nn.Module) -> bool:
    """Whether the model carries ESM's contact regression (``esm.contact_head``)."""
    return getattr(getattr(model, "esm", model), "contact_head", None) is not None


def _hub_error(spec: str, error: Exception) -> ProbeError:
    text = str(error).lower()
    if "not a valid model identifier" in text or "repository not found" in text or "404" in text:
        return ProbeError(f"unknown model {spec!r}: not a local directory and not a model on the Hugging Face hub")
    return ProbeError(
        f"cannot load {spec!r}: the Hugging Face hub is not reachable and the model is not in the local cache; "
        f"download it where the hub is reachable (`hf download {spec}`) and pass that directory with --model DIR, "
        "or set HF_HOME to a cache that holds it"
    )


def locate(spec: str) -> str:
    """Where `spec` points, checked without loading anything: a zoo:NAME or a local directory (with config.json)
    -> its path; a hub id -> itself. One-line ProbeError for a missing directory or zoo name (commands call this
    for every --model before computing anything)."""
    source = resolve(spec)
    local = Path(source).expanduser()
    try:
        local.exists()
    except OSError as error:  # a name too long for the file system, say
        raise ProbeError(f"model {spec[:60]}{'...' if len(spec) > 60 else ''}: not a usable path "
                         f"({error.strerror or error})") from None
    if local.exists():
        if not local.is_dir() or not (local / "config.json").exists():
            raise ProbeError(f"{source} is not a model directory (no config.json); pass what save_pretrained wrote")
        return str(local)
    if _looks_like_path(spec):
        raise ProbeError(f"model directory {spec} does not exist; check the path or pass a hub id such as gpt2")
    return spec


def load(
    spec: str,
    device: str = "cpu",
    dtype: str | torch.dtype | None = None,  # None: the checkpoint's own (float32 for our zoo)
) -> LoadedModel:
    """Load a model and its tokenizer for capture.

    The model class follows the checkpoint: ``AutoModelForCausalLM`` for causal LMs, ``AutoModelForMaskedLM`` for
    masked and protein LMs, ``EsmForMaskedLM`` for ESM (it keeps the contact regression), the encoder alone for
    ProtT5. It is loaded with ``attn_implementation="sdpa"`` (the capture engine switches it only inside
    :func:`probe.engine.capture.capture`), moved to `device` and put in eval mode.

    Parameters
    ----------
    spec : str
        A hub id (``"gpt2"``; from the local cache when offline), a local directory written by
        ``save_pretrained`` (with its tokenizer), or ``"zoo:NAME"`` for a bundled model organism.
    device : str, default "cpu"
        ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``; checked against what this machine has.
    dtype : str or torch.dtype, optional
        ``"float32"``, ``"float16"``, ``"bfloat16"`` (or ``fp32``, ``fp16``, ``bf16``, or a torch dtype); None:
        the checkpoint's own.

    Returns
    -------
    LoadedModel
        The model, its tokenizer, its kind (causal LM, masked LM, protein LM) and its revision (the hub commit,
        or ``sha256:…`` of a local model's weight files).

    Raises
    ------
    ProbeError
        One line naming the fix: a missing directory or zoo name, a hub id that cannot be reached, an unreadable
        config, no usable tokenizer, corrupt or truncated weights, a device this machine does not have, an unknown
        dtype, a model whose attention does not go through ``AttentionInterface``.
    """
    import transformers

    source = locate(spec)
    local = Path(source)
    device_obj = _parse_device(device)
    torch_dtype = _parse_dtype(dtype)

    try:
        config = transformers.AutoConfig.from_pretrained(source)
    except Exception as error:  # noqa: BLE001 - OSError, ValueError, and transformers' strict field validators
        if local.exists():
            reason = " ".join(line.strip() for line in str(error).splitlines() if line.strip())[:300]
            raise ProbeError(f"cannot read the config in {source}: {reason or type(error).__name__}") from None
        if not isinstance(error, (OSError, ValueError)):
            raise
        raise _hub_error(spec, error) from None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, TypeError) as error:
        raise NoTokenizerError(f"no usable tokenizer for {spec}: save one next to the model "
                         f"(tokenizer.save_pretrained(DIR)) — {first_line(error)}") from None
    style = residue_format(tokenizer)
    if config.model_type in PROTEIN_MODEL_TYPES and style is None:
        style = "letters"
    kind = _kind_of(config, style)
    model_class = _model_class(kind, config)
    try:
        model = model_class.from_pretrained(source, attn_implementation="sdpa", dtype=torch_dtype)
    except Exception as error:  # safetensors, pickle and torch raise many types on a corrupt or truncated file
        if "sdpa" in str(error).lower() or "attention" in str(error).lower():
            raise ProbeError(f"{config.model_type} models do not route attention through transformers' "
                             "AttentionInterface, so their attention cannot be captured") from None
        if local.exists():
            raise ProbeError(f"cannot load the weights in {source}: {first_line(error)} (a truncated or corrupt "
                             "weights file? download or save the model again)") from None
        if isinstance(error, (OSError, ValueError)):
            raise _hub_error(spec, error) from None
        raise ProbeError(f"cannot load the weights of {spec}: {first_line(error)} (a corrupt download? "
                         f"delete it from the cache and download it again)") from None
    if config.model_type in _ENCODER_ONLY:
        # T5 routes attention through AttentionInterface (the relative position bias arrives as `position_bias`,
        # which the capture engine adds to the scores) but does not advertise it; tests check capture == eager.
        model._supports_attention_backend = True
    if not getattr(model, "_supports_attention_backend", False):
        raise ProbeError(f"{type(model).__name__} does not route attention through transformers' AttentionInterface, "
                         "so its attention cannot be captured; use a model class that does (GPT-2, BERT, ESM, Llama, ...)")
    model.to(device_obj).eval()
    revision = getattr(config, "_commit_hash", None) or (weights_hash(local) if local.exists() else "unknown")
    return LoadedModel(model, tokenizer, kind, spec, revision, residue_format=style,
                       has_contact_head=kind == ModelKind.PROTEIN_MLM and has_contact_head(model))


def _parse_device(device: str) -> torch.device:
    """A device this machine has: cpu, cuda[:N] (when CUDA is available) or mps (when available)."""
    try:
        device_obj = torch.device(device)
    except (RuntimeError, TypeError):
        raise ProbeError(f"unknown device {device!r}: use cpu, cuda or cuda:N") from None
    if device_obj.type == "cpu":
        return device_obj
    if device_obj.type == "cuda":
        if not torch.cuda.is_available():
            raise ProbeError("--device cuda was asked for but no CUDA device is available; use --device cpu")
        if device_obj.index is not None and device_obj.index >= torch.cuda.device_count():
            raise ProbeError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                             f"cuda:0..cuda:{torch.cuda.device_count() - 1}")
        return device_obj
    if device_obj.type == "mps":
        if not torch.backends.mps.is_available():
            raise ProbeError("--device mps was asked for but this machine has no Apple GPU; use --device cpu")
        return device_obj
    raise ProbeError(f"--device {device} cannot run a model here: use cpu or cuda (meta holds no weights)"
                     if device_obj.type == "meta" else f"--device {device} is not supported: use cpu or cuda")


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
    """Tokenize one text for `loaded`'s model, on the model's device.

    Parameters
    ----------
    loaded : LoadedModel
        What :func:`load` returned.
    text : str
        Non-empty text; the tokenizer adds its special tokens (``[CLS] … [SEP]``, ``<bos>``).

    Returns
    -------
    dict of str to torch.Tensor
        ``input_ids`` and ``attention_mask``, shape (1, token), long (no ``token_type_ids``): the model's keyword
        inputs.

    Raises
    ------
    ProbeError
        The text is empty or longer than the model's positions.
    """
    if not text:
        raise ProbeError("the text is empty: pass --text with at least one word")
    encoded = loaded.tokenizer(text, return_tensors="pt")
    loaded.check_length(encoded["input_ids"].shape[1], "the text")
    return {name: tensor.to(loaded.device) for name, tensor in encoded.items() if name != "token_type_ids"}


def clean_protein(sequence: str, alphabet: str = AMINO_ACIDS) -> str:
    """Upper-case a protein sequence (whitespace removed) and reject letters outside `alphabet` (those the model
    would silently map to an unknown token), naming their positions."""
    cleaned = "".join(sequence.split()).upper()
    if not cleaned:
        raise ProbeError("the protein sequence is empty")
    bad = [(index + 1, letter) for index, letter in enumerate(cleaned) if letter not in alphabet]
    if bad:
        shown = ", ".join(f"{letter!r} at {position}" for position, letter in bad[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        unknown = " or use X for unknown" if "X" in alphabet else ""
        raise ProbeError(f"not amino-acid letters of this model: {shown}{more} (1-based positions); remove them"
                         f"{unknown}")
    return cleaned


def protein_alphabet(loaded: LoadedModel) -> str:
    """The amino-acid letters the model's vocabulary holds as residue tokens (in AMINO_ACIDS order)."""
    vocab = {_strip_marker(token) for token in loaded.tokenizer.get_vocab()}
    return "".join(letter for letter in AMINO_ACIDS if letter in vocab)


def protein_text(loaded: LoadedModel, cleaned: str) -> str:
    """A cleaned sequence written the model's way: as is (letters) or residues separated by spaces (spaced)."""
    return " ".join(cleaned) if loaded.residue_format == "spaced" else cleaned


def require_protein(loaded: LoadedModel, what: str = "this") -> None:
    """One-line error unless the model is a protein language model."""
    if loaded.kind != ModelKind.PROTEIN_MLM:
        raise ProbeError(f"{loaded.name} is a {loaded.kind} model: {what} needs a protein language model (ESM, "
                         "ProtBert-style BERT, ProtT5 encoder)")


def encode_proteins(loaded: LoadedModel, sequences: list[str] | tuple[str, ...]
                    ) -> tuple[list[str], dict[str, torch.Tensor]]:
    """(cleaned sequences, right-padded inputs on the model's device) for protein sequences, in the model's format.

    Every sequence must tokenize to exactly one token per residue, after `loaded.residue_offset` special tokens."""
    require_protein(loaded)
    alphabet = protein_alphabet(loaded)
    cleaned = [clean_protein(sequence, alphabet) for sequence in sequences]
    encoded = loaded.tokenizer([protein_text(loaded, sequence) for sequence in cleaned], return_tensors="pt",
                               padding=True, return_special_tokens_mask=True)
    residues = (1 - encoded["special_tokens_mask"]) * encoded["attention_mask"]  # [batch token]
    for index, sequence in enumerate(cleaned):
        if int(residues[index].sum()) != len(sequence):
            raise ProbeError(f"the tokenizer of {loaded.name} did not give one token per residue for sequence "
                             f"{index + 1}; this tokenizer convention is not supported")
    longest = int(encoded["attention_mask"].sum(-1).max())
    longest_residues = max(len(sequence) for sequence in cleaned)
    loaded.check_length(longest, f"the sequence ({longest_residues} residues)")
    return cleaned, {name: encoded[name].to(loaded.device) for name in ("input_ids", "attention_mask")}


def tokenize_protein(loaded: LoadedModel, sequence: str) -> dict[str, torch.Tensor]:
    """Tokenize one protein sequence (validated, length-checked) in the model's convention, on its device."""
    return encode_proteins(loaded, [sequence])[1]


def model_card(loaded: LoadedModel) -> dict:
    """A JSON-able summary of the model (for logs and output metadata)."""
    config = loaded.model.config.get_text_config()
    return {"name": loaded.name, "revision": loaded.revision, "kind": ModelKind(loaded.kind).value,
            "residue_format": loaded.residue_format, "model_type": config.model_type,
            "layers": loaded.n_layers, "heads": loaded.n_heads, "max_tokens": loaded.max_tokens}

