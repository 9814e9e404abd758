"""Loading models: a Hugging Face hub id, a local directory (what `save_pretrained` writes) or `zoo:NAME`.

`load()` returns a :class:`LoadedModel` in eval mode on the sdpa kernel, with its tokenizer and its kind
(:class:`ModelKind`): "causal_lm" (GPT-2, Llama, ...), "masked_lm" (BERT, ...) or "protein_mlm" — every
protein language model, whatever its class:

* ESM style: one token per amino-acid letter, the sequence written as is (``MKTAYIAK``); ESM checkpoints also
  carry the contact regression of Rao et al. 2020 (``has_contact_head``);
* spaced style (ProtBert, IgBert, AntiBERTy-like BERTs, ProtT5 encoders): one token per residue, residues
  separated by spaces (``M K T A Y I A K``); no contact regression.

A model is a protein model when its tokenizer's vocabulary is amino acids: at least the 20 standard letters as
tokens, at most a handful of other non-special tokens, and the 20 letters tokenize to 20 residue tokens either
written together ("letters") or separated by spaces ("spaced"). :func:`tokenize_protein` applies the
convention, so users always pass plain sequences. Every failure a user can fix is a one-line
:class:`~probe.errors.ProbeError` naming the fix.

Longer than 450 lines because it is the one module between a user's spec and a running model, and every caller
reaches it as ``probe.models.*``: locating the spec, the kind, placement (device, dtype, device map, offload)
and the input helpers that follow the kind's conventions (text, residues, encoder–decoder inputs) share the
:class:`LoadedModel` they take and return; splitting the input helpers off would need a module that both
imports and is imported by this one.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Literal

import torch
import transformers
from torch import nn
from transformers.models.auto.modeling_auto import MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES

from probe.errors import NoTokenizerError, ProbeError, first_line
from probe.hashing import weights_hash
from probe.layers import EAGER_NOTE, ENGINE_CHOICES, AttentionPlan, attention_plan, choose_engine, set_engine
from probe.naming import display_name, head_name
from probe.quiet import load_summary, transformers_quiet
from probe.specs import ZOO_PREFIX, locate, resolve  # noqa: F401 - probe.models.locate / resolve / ZOO_PREFIX

_LOG = logging.getLogger("probe")  # one-line notes (eager fallback, layers without α) to stderr


class ModelKind(str, Enum):  # noqa: UP042 - StrEnum needs Python 3.11; the project supports 3.10
    """What a model is, decided once in :func:`load`; compare with the members (a str subclass, so files and
    messages keep the plain values)."""

    CAUSAL_LM = "causal_lm"
    MASKED_LM = "masked_lm"
    PROTEIN_MLM = "protein_mlm"
    # text encoder–decoders (T5, BART): three stacks; head labelling does not apply yet
    SEQ2SEQ_LM = "seq2seq_lm"

    def __str__(self) -> str:  # f"{kind}" -> "protein_mlm"
        return self.value

    @property
    def description(self) -> str:
        """"causal language model", "masked language model" or "protein model" (for messages)."""
        return {"causal_lm": "causal language model", "masked_lm": "masked language model",
                "protein_mlm": "protein model", "seq2seq_lm": "sequence-to-sequence model"}[self.value]


ResidueFormat = Literal["letters", "spaced"]

# Amino-acid letters the ESM vocabulary holds as residues (20 standard + B, U, Z, O, X ambiguity codes).
AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWYBUZOX"
STANDARD_AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
# A protein vocabulary may hold a few non-residue tokens beyond its special ones (ESM: "." and "-"); more is
# text.
MAX_OTHER_TOKENS = 8


def config_max_tokens(config) -> int:
    """Longest input in tokens (special tokens included) the positions of a model with this config allow
    (:attr:`LoadedModel.max_tokens`; a config alone, so commands check lengths before loading weights)."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in ("n_positions", "max_position_embeddings"):
        if getattr(config, name, None):
            limit = int(getattr(config, name))
            if config.model_type == "esm":
                # ESM-2 was trained on 1024 tokens (1022 residues + BOS/EOS) of its 1026 positions
                limit -= 2
            elif config.model_type in ("roberta", "xlm-roberta", "camembert"):
                limit -= (config.pad_token_id or 0) + 1  # these number positions from pad_token_id + 1
            return limit
    return 2**31 - 1


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
    plan : AttentionPlan or None
        Which modules compute α and the layer number of each (:func:`probe.layers.attention_plan`); None only
        for a LoadedModel built by hand (then every config layer is an attention layer).
    engine : {"fused", "eager"}
        The engine capture uses: fused (through ``AttentionInterface``) or the eager fallback.
    n_layers, n_heads : int
        Layer numbers (``0 .. n_layers - 1``; an encoder–decoder's three stacks end to end) and query heads
        per layer (properties).
    attention_layers : tuple of int
        The layer numbers that have α (property): all of them, or a hybrid's softmax-attention layers.

    Examples
    --------
    >>> loaded = load("zoo:induction")
    >>> loaded.name, loaded.kind.value, loaded.attention_layers, loaded.revision.startswith("sha256:")
    ('zoo:induction', 'causal_lm', (0, 1), True)
    >>> type(loaded.model).__name__, loaded.plan.engine
    ('LlamaForCausalLM', 'fused')
    """

    model: nn.Module
    tokenizer: object  # a transformers tokenizer
    kind: ModelKind
    name: str  # what the user asked for: hub id, directory or zoo:NAME
    revision: str  # commit hash for hub models, a content hash of the weights for local ones
    # protein models: "letters" (ESM) or "spaced" (ProtBert); else None
    residue_format: ResidueFormat | None = None
    has_contact_head: bool = False  # the checkpoint carries a contact regression (ESM)
    plan: AttentionPlan | None = None  # which modules compute α, and their layer numbers
    engine: str = "fused"  # "fused" (AttentionInterface) or "eager" (the fallback of probe.engine.eager)

    @property
    def config(self):
        return self.model.config

    @property
    def n_layers(self) -> int:
        if self.plan is not None:
            return self.plan.n_layers
        return self.model.config.get_text_config().num_hidden_layers

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """Layer numbers with α: every layer, or only a hybrid's softmax-attention layers (ascending)."""
        return self.plan.attention_layers if self.plan is not None else tuple(range(self.n_layers))

    @property
    def heads(self) -> list[tuple[int, int]]:
        """Every real (layer, head): the attention layers' heads only (what tables, profiles and cards
        list)."""
        return [(layer, head) for layer in self.attention_layers for head in range(self.n_heads)]

    def head_name(self, layer: int, head: int) -> str:
        """"L3H2", or "enc.L3H2" / "dec.L1H0" / "cross.L1H0" for an encoder–decoder (one formatter:
        naming)."""
        return self.plan.head_name(layer, head) if self.plan is not None else head_name(layer, head)

    @property
    def notes(self) -> tuple[str, ...]:
        """One-line notes for the user: the eager fallback's cost, the layers without α."""
        found = []
        if self.engine == "eager":
            found.append(EAGER_NOTE.format(model=self.name))
        if self.plan is not None and self.plan.no_alpha_note():
            found.append(f"{self.name}: {self.plan.no_alpha_note()}")
        return tuple(found)

    @property
    def n_heads(self) -> int:
        return self.model.config.get_text_config().num_attention_heads

    @property
    def max_tokens(self) -> int:
        """Longest input in tokens (special tokens included) the model's positions allow."""
        return config_max_tokens(self.model.config)

    @property
    def device(self) -> torch.device:
        """Where inputs go: the model's device, or with a device map its first accelerator (else the CPU)."""
        device_map = getattr(self.model, "hf_device_map", None)
        if device_map:
            placed = [torch.device(f"cuda:{where}" if isinstance(where, int) else where)
                      for where in device_map.values() if where != "disk"]
            return next((device for device in placed if device.type != "cpu"), torch.device("cpu"))
        return next(self.model.parameters()).device

    def check_length(self, n_tokens: int, what: str = "input") -> None:
        """One-line error when an input is longer than the model's positions."""
        if n_tokens > self.max_tokens:
            raise ProbeError(f"{what} is {n_tokens} tokens but {self.name} takes at most {self.max_tokens}; "
                             "shorten it" + (" or use --window"
                                             if self.kind == ModelKind.PROTEIN_MLM else ""))

    @property
    def residue_offset(self) -> int:
        """Token index of the first residue in an encoded sequence (1 after ``[CLS]`` / ``<cls>``, 0 without a
        BOS)."""
        return _residue_offset(self.tokenizer, self.residue_format)


def _strip_marker(token: str) -> str:
    """A vocabulary entry without its word markers (SentencePiece "▁", WordPiece "##", byte-level "Ġ")."""
    return token.removeprefix("##").lstrip("▁Ġ")


def residue_format(tokenizer) -> ResidueFormat | None:
    """"letters" (ESM: MKT → M K T), "spaced" (ProtBert: "M K T" → M K T) or None (not a protein
    vocabulary)."""
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
        if [_strip_marker(token)
            for token in tokenizer.convert_ids_to_tokens(ids)] == list(STANDARD_AMINO_ACIDS):
            return style
    return None


def _residue_offset(tokenizer, style: ResidueFormat | None) -> int:
    """How many special tokens the tokenizer puts before the residues of one sequence."""
    encoded = tokenizer("A", return_special_tokens_mask=True)
    mask = encoded["special_tokens_mask"]
    return mask.index(0) if 0 in mask else 0


# Protein models by their config, whatever their tokenizer looks like: ESM-1/2 and ESM C (letters, BOS and
# EOS).
PROTEIN_MODEL_TYPES = ("esm", "esmc")


def _kind_of(config, style: ResidueFormat | None) -> ModelKind:
    if config.model_type in PROTEIN_MODEL_TYPES or style is not None:
        return ModelKind.PROTEIN_MLM
    if getattr(config, "is_encoder_decoder", False):
        return ModelKind.SEQ2SEQ_LM
    architectures = " ".join(getattr(config, "architectures", None) or [])
    if getattr(config, "is_decoder", False) or "CausalLM" in architectures or "LMHead" in architectures:
        return ModelKind.CAUSAL_LM
    if config.model_type in ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2",
                             "phi", "gpt_neox"):
        return ModelKind.CAUSAL_LM
    return ModelKind.MASKED_LM


def config_kinds(config, tokenizer=None) -> tuple[ModelKind, ...]:
    """The kinds a model can be from its config (and tokenizer), no weights read: with the tokenizer the one
    kind :func:`load` gives; without it one, except a masked LM whose tokenizer may still make it a protein LM
    (ProtBert-style BERT). Commands refuse what applies to none of them before loading weights."""
    if tokenizer is not None:
        style = residue_format(tokenizer)
        if config.model_type in PROTEIN_MODEL_TYPES and style is None:
            style = "letters"
        return (_kind_of(config, style),)
    kind = _kind_of(config, None)
    return (kind, ModelKind.PROTEIN_MLM) if kind == ModelKind.MASKED_LM else (kind,)


def spec_kinds(spec: str) -> tuple[ModelKind, ...]:
    """:func:`config_kinds` of a model spec from its config and tokenizer files (quietly; no weights read);
    () when its config cannot be read here (loading then says why)."""
    source = locate(spec)
    try:
        with transformers_quiet():
            config = transformers.AutoConfig.from_pretrained(source)
    except Exception:  # noqa: BLE001 - any reason: loading explains it in one line
        return ()
    try:
        with transformers_quiet():
            tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    except Exception:  # noqa: BLE001 - no tokenizer here: the kinds the config allows
        tokenizer = None
    return config_kinds(config, tokenizer)


# Encoder-decoder protein models (ProtT5) are analysed through their encoder alone.
_ENCODER_ONLY = ("t5", "mt5", "umt5")


def _model_class(kind: ModelKind, config):
    if config.model_type == "esm":
        return transformers.EsmForMaskedLM  # keeps the checkpoint's contact regression
    if kind == ModelKind.PROTEIN_MLM and config.model_type in _ENCODER_ONLY:
        return transformers.T5EncoderModel if config.model_type == "t5" else transformers.AutoModel
    if kind == ModelKind.SEQ2SEQ_LM and is_speech(config):
        return transformers.AutoModelForSpeechSeq2Seq  # Whisper: an audio encoder, a text decoder
    return {
        ModelKind.CAUSAL_LM: transformers.AutoModelForCausalLM,
        ModelKind.MASKED_LM: transformers.AutoModelForMaskedLM,
        ModelKind.PROTEIN_MLM: transformers.AutoModelForMaskedLM,
        ModelKind.SEQ2SEQ_LM: transformers.AutoModelForSeq2SeqLM,
    }[kind]


def is_speech(config) -> bool:
    """Whether the config is of a speech encoder–decoder (Whisper): its encoder reads audio features, not
    text."""
    return config.model_type in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES


def has_contact_head(model: nn.Module) -> bool:
    """Whether the model carries ESM's contact regression (``esm.contact_head``)."""
    return getattr(getattr(model, "esm", model), "contact_head", None) is not None


def _hub_error(spec: str, error: Exception) -> ProbeError:
    text = str(error).lower()
    if "not a valid model identifier" in text or "repository not found" in text or "404" in text:
        return ProbeError(f"unknown model {spec!r}: not a local directory and not a model on the Hugging "
                          "Face hub")
    return ProbeError(
        f"cannot load {spec!r}: the Hugging Face hub is not reachable and the model is not in the local "
        f"cache; download it where the hub is reachable (`hf download {spec}`) and pass that directory with "
        "--model DIR, or set HF_HOME to a cache that holds it"
    )


def load(
    spec: str,
    device: str = "cpu",
    dtype: str | torch.dtype | None = None,  # None: the checkpoint's own (float32 for our zoo)
    # "auto", "fused" (refuse models outside AttentionInterface) or "eager" (the fallback)
    engine: str = "auto",
    # transformers' device_map: "auto", "balanced", "cpu", "cuda", or a dict
    device_map: str | dict | None = None,
    # where accelerate writes the weights a device_map puts on "disk"
    offload_folder: str | Path | None = None,
    # per device, as transformers takes it ({0: "10GiB", "cpu": "30GiB"})
    max_memory: str | dict | None = None,
    verbose: bool = False,  # True: transformers' warnings, progress bars and load report as it prints them
) -> LoadedModel:
    """Load a model and its tokenizer for capture.

    The model class follows the checkpoint: ``AutoModelForCausalLM`` for causal LMs, ``AutoModelForMaskedLM``
    for masked and protein LMs, ``EsmForMaskedLM`` for ESM (it keeps the contact regression), the encoder
    alone for ProtT5, ``AutoModelForSeq2SeqLM`` for text encoder–decoders (T5, BART: three stacks,
    ``enc``/``dec``/``cross``). It is loaded with ``attn_implementation="sdpa"`` (the capture engine switches
    it only inside :func:`probe.engine.capture.capture`; a class without sdpa is loaded on eager), moved to
    `device` (or placed by `device_map`) and put in eval mode. Which modules compute α is decided by what they
    do (:func:`probe.layers.attention_plan`); the notes (:attr:`LoadedModel.notes`: the eager fallback's cost,
    a hybrid's layers without α) are logged as one line each to the ``probe`` logger (stderr).

    Quiet like the CLI: transformers' progress bars, warnings and load report are not printed; what it
    reported is logged as one line (weights newly initialised or unused, e.g. a sentence-embedding checkpoint
    loaded with its masked-LM head, :func:`probe.quiet.load_summary`), and ``verbose=True`` shows
    transformers' own output instead.

    Parameters
    ----------
    spec : str
        A hub id (``"gpt2"``; from the local cache when offline), a local directory written by
        ``save_pretrained`` (with its tokenizer), or ``"zoo:NAME"`` for a bundled model organism.
    device : str, default "cpu"
        ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``; checked against what this machine has. Ignored with
        `device_map`.
    dtype : str or torch.dtype, optional
        ``"float32"``, ``"float16"``, ``"bfloat16"`` (or ``fp32``, ``fp16``, ``bf16``, or a torch dtype);
        None: the checkpoint's own.
    engine : {"auto", "fused", "eager"}, default "auto"
        The capture engine every later ``capture(model, ...)`` uses: "auto" picks fused where the model routes
        through ``AttentionInterface`` and the eager fallback where it does not; "fused" refuses a model
        outside the interface; "eager" forces the fallback (O(N²) per layer).
    device_map : str or dict, optional
        transformers' own big-model placement (accelerate): ``"auto"``, ``"balanced"``, ``"sequential"``,
        ``"cpu"``, ``"cuda"``, or a dict module name → device / ``"disk"``. None: the whole model on `device`.
    offload_folder : str or Path, optional
        Folder for the weights the device map puts on ``"disk"`` (needed when some are).
    max_memory : str or dict, optional
        Memory per device for ``"auto"``/``"balanced"`` maps: a dict (``{0: "10GiB", "cpu": "30GiB"}``) or the
        CLI's text form ``"0=10GiB,cpu=30GiB"``.
    verbose : bool, default False
        Let transformers print its warnings, progress bars and load report; by default they are summarised in
        one line on the ``probe`` logger (nothing when the checkpoint matches the class).

    Returns
    -------
    LoadedModel
        The model, its tokenizer, its kind (causal LM, masked LM, protein LM, seq2seq LM), its revision (the
        hub commit, or ``sha256:…`` of a local model's weight files), its attention plan and engine.

    Raises
    ------
    ProbeError
        One line naming the fix: a missing directory or zoo name, a hub id that cannot be reached, an
        unreadable config, no usable tokenizer, corrupt or truncated weights, a device this machine does not
        have, an unknown dtype or engine, a bad device map, a model with no attention module the engine can
        read, ``engine="fused"`` on a model outside ``AttentionInterface``.

    Examples
    --------
    >>> loaded = load("zoo:induction")  # a bundled model organism; a hub id or a directory loads the same way
    >>> loaded.kind, loaded.n_layers, loaded.n_heads, loaded.engine
    (<ModelKind.CAUSAL_LM: 'causal_lm'>, 2, 4, 'fused')
    >>> load("zoo:nosuch")
    Traceback (most recent call last):
    probe.errors.ProbeError: unknown model organism zoo:nosuch; known: zoo:brackets, zoo:coreference,
    zoo:esm-random, zoo:implicit-causality, zoo:induction, zoo:positional, zoo:retrieval, zoo:sentences,
    zoo:stdlib-code, zoo:stdlib-code-1layer; planted: zoo:name-mover
    """
    # what a failed load wrote into --offload-folder is removed: the folder if it was made for it, else the
    # entries it added
    folder = Path(offload_folder).expanduser() if offload_folder is not None else None
    before = set(folder.iterdir()) if folder is not None and folder.is_dir() else None
    made = folder  # the outermost folder this load will make (parents included)
    while made is not None and not made.parent.exists() and made.parent != made:
        made = made.parent
    try:
        with transformers_quiet(verbose) as records:
            loaded, info = _load(spec, device, dtype, engine, device_map, offload_folder, max_memory)
    except BaseException:
        if folder is not None and before is None and made is not None:
            shutil.rmtree(made, ignore_errors=True)
        elif folder is not None and folder.is_dir():
            for entry in set(folder.iterdir()) - before:
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        raise
    summary = load_summary(display_name(spec), type(loaded.model).__name__, info, records)
    if summary and not verbose:
        _LOG.warning(summary)
    for note in loaded.notes:
        _LOG.warning(note)
    return loaded


def _pretrained(model_class, source: str, **keywords):
    """(model, what transformers reported about its weights: missing, unexpected, mismatched keys)."""
    model, info = model_class.from_pretrained(source, output_loading_info=True, **keywords)
    return model, info


def _load(spec, device, dtype, engine, device_map, offload_folder, max_memory) -> tuple[LoadedModel, dict]:
    """:func:`load` without the quieting: (the loaded model, transformers' loading info)."""
    source = locate(spec)
    local = Path(source)
    if engine not in ENGINE_CHOICES:
        raise ProbeError(f"unknown engine {engine!r}: use one of {', '.join(ENGINE_CHOICES)}")
    placement = _placement(device_map, offload_folder, max_memory)
    device_obj = _parse_device(device) if not placement else None
    torch_dtype = _parse_dtype(dtype)

    try:
        config = transformers.AutoConfig.from_pretrained(source)
    except Exception as error:  # noqa: BLE001 - OSError, ValueError, and transformers' strict field validators
        if local.exists():
            reason = " ".join(line.strip() for line in str(error).splitlines() if line.strip())[:300]
            raise ProbeError(
                f"cannot read the config in {source}: {reason or type(error).__name__}") from None
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
        try:
            model, info = _pretrained(model_class, source, attn_implementation="sdpa", dtype=torch_dtype,
                                      **placement)
        except Exception as error:  # noqa: BLE001 - transformers raises ValueError or its own types for "no sdpa"
            if "scaled_dot_product_attention" not in str(error) and "sdpa" not in str(error).lower():
                raise
            # a class without sdpa (Bloom, DeBERTa-v2): its own eager attention, read by the eager fallback
            model, info = _pretrained(model_class, source, attn_implementation="eager", dtype=torch_dtype,
                                      **placement)
    except ProbeError:
        raise
    except Exception as error:
        # safetensors, pickle and torch raise many types on a corrupt or truncated file
        if placement and ("device" in str(error).lower() or "offload" in str(error).lower()
                          or "memory" in str(error).lower()):
            raise ProbeError(
                f"cannot place {spec} with --device-map {device_map}: {first_line(error)}") from None
        if local.exists():
            raise ProbeError(f"cannot load the weights in {source}: {first_line(error)} (a truncated or "
                             "corrupt weights file? download or save the model again)") from None
        if isinstance(error, (OSError, ValueError)):
            raise _hub_error(spec, error) from None
        raise ProbeError(f"cannot load the weights of {spec}: {first_line(error)} (a corrupt download? "
                         f"delete it from the cache and download it again)") from None
    _check_placed(model, spec)
    plan = attention_plan(model)
    if plan.engine == "eager" and getattr(model.config, "_attn_implementation", "eager") != "eager":
        # Outside the interface the fallback asks each module for its weights (output_attentions=True), and
        # the masks a model builds follow its attention implementation: built on sdpa, Falcon's eager branch
        # then reads an sdpa mask and changes the logits by 2.9 (docs/architectures.md). Such a model runs on
        # eager.
        model, info = _pretrained(model_class, source, attn_implementation="eager", dtype=torch_dtype,
                                  **placement)
        plan = attention_plan(model)
    chosen = choose_engine(plan, engine, spec)
    if plan.is_multi_stack:
        _check_stack_heads(config, spec)
    set_engine(model, chosen)
    if device_obj is not None:
        model.to(device_obj)
    model.eval()
    revision = getattr(config, "_commit_hash", None) or (weights_hash(local) if local.exists() else "unknown")
    loaded = LoadedModel(model, tokenizer, kind, spec, revision, residue_format=style,
                         has_contact_head=kind == ModelKind.PROTEIN_MLM and has_contact_head(model),
                         plan=plan, engine=chosen)
    return loaded, info


def _check_stack_heads(config, spec: str) -> None:
    """Encoder–decoder stacks share one head axis: their head counts must agree."""
    counts = {getattr(config, name) for name in ("encoder_attention_heads", "decoder_attention_heads",
                                                 "num_heads",
                                                  "num_decoder_heads")
                                                  if isinstance(getattr(config, name, None), int)}
    if len(counts) > 1:
        raise ProbeError(f"{spec}: the encoder and decoder have different head counts ({sorted(counts)}); "
                         "capture of such encoder-decoder models is not supported")


def _check_placed(model, spec: str) -> None:
    """A device map must leave some module on an execution device (cpu, cuda): with every weight on disk
    (--max-memory too small for even one layer) nothing can run the forward pass ("Cannot copy out of meta
    tensor"), so it is refused in one line."""
    placed = getattr(model, "hf_device_map", None)
    if placed and all(where == "disk" for where in placed.values()):
        raise ProbeError(f"the device map leaves no layer of {spec} on an execution device (cpu or cuda): "
                         "every weight went to disk; give one device more memory (e.g. --max-memory "
                         "cpu=4GiB) or drop --max-memory")


def _placement(device_map, offload_folder, max_memory) -> dict:
    """from_pretrained's big-model keywords (device_map, offload_folder, max_memory), checked; {} without a
    map."""
    if device_map is None:
        if offload_folder is not None or max_memory is not None:
            raise ProbeError("--offload-folder and --max-memory need --device-map (e.g. --device-map auto)")
        return {}
    if isinstance(device_map, str) and device_map not in DEVICE_MAPS:
        raise ProbeError(f"unknown --device-map {device_map!r}: use one of {', '.join(DEVICE_MAPS)}")
    if device_map == "cuda" and not torch.cuda.is_available():
        raise ProbeError("--device-map cuda was asked for but no CUDA device is available; use --device-map "
                         "cpu")
    placement: dict = {"device_map": device_map}
    if offload_folder is not None:
        folder = Path(offload_folder).expanduser()
        if folder.exists() and not folder.is_dir():
            raise ProbeError(f"--offload-folder {offload_folder} is a file; give a folder")
        try:  # made now and written to once, so an unwritable folder is one line before any weight loads
            folder.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=folder).close()
        except OSError as error:
            raise ProbeError(f"--offload-folder {offload_folder}: cannot write there "
                             f"({error.strerror or error}); give a writable folder") from None
        placement["offload_folder"] = str(folder)
    elif isinstance(device_map, dict) and "disk" in device_map.values():
        raise ProbeError("the device map puts weights on disk: give --offload-folder DIR")
    if max_memory is not None:
        placement["max_memory"] = parse_max_memory(max_memory) if isinstance(max_memory, str) else max_memory
    return placement


DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential", "cpu", "cuda")


def parse_max_memory(text: str) -> dict:
    """"0=10GiB,cpu=30GiB" -> {0: "10GiB", "cpu": "30GiB"} (transformers' max_memory); one-line error
    otherwise."""
    memory: dict = {}
    for part in text.split(","):
        where, sep, amount = part.strip().partition("=")
        if not sep or not where or not amount:
            raise ProbeError(f"bad --max-memory part {part!r}: write DEVICE=AMOUNT pairs, e.g. "
                             "0=10GiB,cpu=30GiB")
        key = int(where) if where.isdigit() else where
        if not re.match(r"^\d+(\.\d+)?\s*([KMGT]i?B)?$", amount.strip(), re.IGNORECASE):
            raise ProbeError(f"bad --max-memory amount {amount!r}: write it like 10GiB or 500MB")
        memory[key] = amount.strip()
    return memory


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
            raise ProbeError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA "
                             f"device(s), cuda:0..cuda:{torch.cuda.device_count() - 1}")
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
        ``input_ids`` and ``attention_mask``, shape (1, token), long (no ``token_type_ids``): the model's
        keyword inputs.

    Raises
    ------
    ProbeError
        The text is empty or longer than the model's positions, or the model reads audio (Whisper).

    Examples
    --------
    >>> loaded = load("zoo:induction")  # its vocabulary: <unk>, <pad>, <bos> and 128 pseudo-words
    >>> tokenize_text(loaded, "rada ruga buse")
    {'input_ids': tensor([[2, 3, 4, 5]]), 'attention_mask': tensor([[1, 1, 1, 1]])}
    >>> tokenize_text(loaded, "rada " * 100)
    Traceback (most recent call last):
    probe.errors.ProbeError: the text is 101 tokens but zoo:induction takes at most 64; shorten it
    """
    if not text:
        raise ProbeError("the text is empty: give at least one word")  # no CLI flag: callers are Python too
    if is_speech(loaded.config):
        raise ProbeError(f"{loaded.name} reads audio, not text: capture it from Python with its processor's "
                         "input_features (probe.engine.capture(loaded.model, sink); docs/engine.md)")
    encoded = loaded.tokenizer(text, return_tensors="pt")
    loaded.check_length(encoded["input_ids"].shape[1], "the text")
    inputs = {name: tensor.to(loaded.device) for name, tensor in encoded.items() if name != "token_type_ids"}
    return model_inputs(loaded, inputs["input_ids"], inputs["attention_mask"])


def model_inputs(loaded: LoadedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
                 ) -> dict[str, torch.Tensor]:
    """The keyword inputs of one forward pass over `input_ids` (batch, token): for an encoder–decoder
    (:attr:`ModelKind.SEQ2SEQ_LM`) the decoder reads the same tokens as its target, shifted right after the
    decoder start token (teacher forcing: the model reconstructs its input), so all three stacks see N tokens;
    for other models just ``input_ids`` (and ``attention_mask``).

    Parameters
    ----------
    loaded : LoadedModel
        What :func:`load` returned.
    input_ids : torch.Tensor, shape=(batch, token), long
        The tokens.
    attention_mask : torch.Tensor, shape=(batch, token), optional
        1 for real tokens, 0 for padding.

    Returns
    -------
    dict of str to torch.Tensor
        The model's keyword inputs.

    Examples
    --------
    >>> loaded = load("zoo:induction")  # a causal LM: the ids alone
    >>> model_inputs(loaded, torch.tensor([[2, 3, 4]]))
    {'input_ids': tensor([[2, 3, 4]])}
    """
    inputs = {"input_ids": input_ids}
    if attention_mask is not None:
        inputs["attention_mask"] = attention_mask
    if loaded.kind == ModelKind.SEQ2SEQ_LM:
        inputs["decoder_input_ids"] = loaded.model.prepare_decoder_input_ids_from_labels(labels=input_ids)
        if attention_mask is not None:  # the shifted target's padding: the row's last real token drops out
            inputs["decoder_attention_mask"] = torch.cat([torch.ones_like(attention_mask[:, :1]),
                                                          attention_mask[:, :-1]], dim=1)
    return inputs


def clean_protein(sequence: str, alphabet: str = AMINO_ACIDS) -> str:
    """Upper-case a protein sequence (whitespace removed) and reject letters outside `alphabet` (those the
    model would silently map to an unknown token), naming their positions."""
    cleaned = "".join(sequence.split()).upper()
    if not cleaned:
        raise ProbeError("the protein sequence is empty")
    bad = [(index + 1, letter) for index, letter in enumerate(cleaned) if letter not in alphabet]
    if bad:
        shown = ", ".join(f"{letter!r} at {position}" for position, letter in bad[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        unknown = " or use X for unknown" if "X" in alphabet else ""
        raise ProbeError(f"not amino-acid letters of this model: {shown}{more} (1-based positions); remove "
                         f"them{unknown}")
    return cleaned


def protein_alphabet(loaded: LoadedModel) -> str:
    """The amino-acid letters the model's vocabulary holds as residue tokens (in AMINO_ACIDS order)."""
    vocab = {_strip_marker(token) for token in loaded.tokenizer.get_vocab()}
    return "".join(letter for letter in AMINO_ACIDS if letter in vocab)


def protein_text(loaded: LoadedModel, cleaned: str) -> str:
    """A cleaned sequence written the model's way: as is (letters) or residues separated by spaces
    (spaced)."""
    return " ".join(cleaned) if loaded.residue_format == "spaced" else cleaned


def require_protein(loaded: LoadedModel, what: str = "this") -> None:
    """One-line error unless the model is a protein language model."""
    if loaded.kind != ModelKind.PROTEIN_MLM:
        raise ProbeError(f"{loaded.name} is a {loaded.kind} model: {what} needs a protein language model "
                         "(ESM, ProtBert-style BERT, ProtT5 encoder)")


def encode_proteins(loaded: LoadedModel, sequences: list[str] | tuple[str, ...]
                    ) -> tuple[list[str], dict[str, torch.Tensor]]:
    """(cleaned sequences, right-padded inputs on the model's device) for protein sequences, in the model's
    format.

    Every sequence must tokenize to exactly one token per residue, after `loaded.residue_offset` special
    tokens."""
    require_protein(loaded)
    alphabet = protein_alphabet(loaded)
    cleaned = [clean_protein(sequence, alphabet) for sequence in sequences]
    encoded = loaded.tokenizer([protein_text(loaded, sequence) for sequence in cleaned], return_tensors="pt",
                               padding=True, return_special_tokens_mask=True)
    residues = (1 - encoded["special_tokens_mask"]) * encoded["attention_mask"]  # [batch token]
    for index, sequence in enumerate(cleaned):
        if int(residues[index].sum()) != len(sequence):
            raise ProbeError(f"the tokenizer of {loaded.name} did not give one token per residue for "
                             f"sequence {index + 1}; this tokenizer convention is not supported")
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
            "layers": loaded.n_layers, "heads": loaded.n_heads, "max_tokens": loaded.max_tokens,
            "engine": loaded.engine, "attention_layers": list(loaded.attention_layers),
            "stacks": [stack.name for stack in loaded.plan.stacks if stack.name] if loaded.plan else []}

