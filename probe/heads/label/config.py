"""What ``probe label`` is asked: the frozen :class:`LabelConfig`, a run's identity, and which head types and
probe lengths apply to a loaded model (step 0 of :func:`probe.heads.label.label_model`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

from probe.errors import ProbeError
from probe.hashing import file_hash
from probe.heads.corpus import PROBE_SPLIT
from probe.heads.registry import REGISTRY, HeadType, HeadTypeSpec, types_for_kind
from probe.models import ModelKind

# Default probe length, capped by the model's positions: the length most pre-training and fine-tuning of
# encoder and decoder models used (BERT's 90 % phase, sentence-transformers' fine-tuning), and about one GAP
# passage. Labels measured beyond a model's training length describe its extrapolation, not its ordinary
# behaviour (docs/labels.md).
DEFAULT_SEQ_LEN = 128
COREF_SETS = ("auto", "gap", "templates", "causality")
ABLATE = ("labelled", "all", "none")
RETRIEVAL_MASKS = ("output", "query")  # probe.heads.retrieval_ablation.MASKS


@dataclass(frozen=True)
class LabelConfig:
    """How heads are probed and labelled (frozen). The ``probe label`` flags mirror these fields.

    Attributes
    ----------
    types : tuple of str, or None
        Head types to score (names in :data:`probe.heads.registry.REGISTRY`); None: every type that applies to
        the model's kind (``--types``).
    examples : int, default 64
        Probe examples per probe set: natural-text and repeated-block probes, coreference examples
        (``--examples``).
    seq_len : int, tuple of int, or None
        Tokens per probe, one length or several (one row per length, and ``stable`` compares them); None:
        min(128, the model's positions) (``--seq-len``).
    seed : int, default 0
        Seeds the probe sets, the bootstrap and the ablation controls (``--seed``).
    probe_file : str or None
        JSONL file of span examples scored as coreference instead of GAP / the templates (``--probe-file``).
    text : str, default "development"
        The natural text the natural-text probes are cut from and the repeated-block probes' tokens are drawn
        by (its token frequencies): a name in :data:`probe.heads.corpus.TEXTS` — GAP's development split, or
        "stdlib-held-out" (the Python standard library's held-out modules) for a model trained on Python
        source (``--text``). The coreference pairs stay GAP's or the templates.
    coref_set : {"auto", "gap", "templates"}, default "auto"
        Coreference examples: GAP when the tokenizer reads English, else the templates (``--coref-set``).
    batch_size : int, default 8
        Probe examples per forward pass (``--batch-size``; not part of a run's identity). Span examples
        (coreference sentences) are packed more to a forward while their padded batch holds at most
        ``batch_size × seq_len`` tokens, the token probes' own
        (:func:`probe.heads.label.scoring.span_slices`).
    n_bootstrap : int, default 1000
        Clustered bootstrap resamples (``--bootstrap``).
    confidence : float, default 0.95
        Coverage of the interval ``[ci_low, ci_high]``.
    min_effect : float, default 0.25
        Mass types: H0 is score − chance ≤ `min_effect` (``--min-effect``).
    min_accuracy_gain : float, default 0.1
        Accuracy types: H0 is the paired accuracy gain over the best baseline ≤ `min_accuracy_gain`
        (``--min-accuracy-gain``).
    fdr : float, default 0.05
        A head is labelled when its Benjamini–Hochberg q-value ≤ `fdr` (``--fdr``).
    ablate : {"labelled", "all", "none"}, default "labelled"
        Heads that get the ``ablation_effect`` / ``ablation_z`` columns (``--ablate``).
    ablation_examples : int, default 16
        Probe examples per type used for the ablation.
    ablation_controls : int, default 8
        Random same-layer heads each ablation is compared with.
    output_share : bool, default True
        Also measure each head's output share (Kobayashi et al. 2020) and its role (``output_share``).
    block_bytes : int, default 16 MiB
        Memory budget of one streamed α block, all heads of a layer (not part of a run's identity). 16 MiB
        gives the engine's 128-row blocks (where the CPU GEMMs run at full speed) for a GPT-2-small layer at
        2 × 1,024 tokens; the block lives only during attention, below the MLP's own intermediates.
    retrieval_mask : {"output", "query"}, default "output"
        How the retrieval check masks a head (:mod:`probe.heads.retrieval_ablation`): its output zeroed in the
        prefill and decoding (ours), or its query zeroed on decoding steps — uniform attention — as Wu et al.
        (``--retrieval-mask``).
    twins : int, default 0
        Untrained twins (:mod:`probe.untrained`: the model's architecture and tokenizer with seeded random
        weights) scored on the same probes (``--control untrained:K``; 0: ``--control none``). Per type and
        length the 99th percentile of the twins' statistic over all their heads is ``untrained_p99``, and a
        label must beat it as well as chance (docs/labels.md, "Untrained twins").
    twin_share : float, default 0.25
        The share of the model's probes the K twins run together: each twin scores the first
        ``ceil(share × n / K)`` token probes of every probe set (at least :data:`MIN_TWIN_PROBES`) and as many
        span pairs, evenly spaced, so the control costs about ``share`` more forwards whatever K is. A twin's
        head statistic is then a mean over fewer probes, a noisier value, which spreads the twins'
        distribution and raises its 99th percentile: fewer probes make the bar stricter, never looser. An
        accuracy (coreference: a mean of right/wrong outcomes) is too coarse on a few pairs — on 6, an
        untrained head's p99 is ~1.0 and no head could beat it — so span sets scored by accuracy give each
        twin at least :data:`MIN_TWIN_ACCURACY_PROBES` pairs (all of a smaller set).

    Examples
    --------
    >>> config = LabelConfig(types=("previous_token", "induction"), examples=16, seq_len=(32, 64))
    >>> config.lengths  # one row per length; `stable` compares them
    (32, 64)
    >>> config.fdr = 0.01
    Traceback (most recent call last):
    dataclasses.FrozenInstanceError: cannot assign to field 'fdr'
    >>> import dataclasses
    >>> dataclasses.replace(config, fdr=0.01).fdr
    0.01
    """

    # head types to score; None: every type that applies to the model
    types: tuple[HeadType, ...] | None = None
    examples: int = 64  # probe examples per token probe set and per template set (GAP: every pair that fits)
    # tokens per probe, one or several; None: min(128, positions)
    seq_len: int | tuple[int, ...] | None = None
    seed: int = 0  # seeds the probe sets, the bootstrap and the ablation controls
    probe_file: str | None = None  # JSONL of span examples scored as coreference instead of GAP / templates
    text: str = PROBE_SPLIT  # the natural text of the token probes (probe.heads.corpus.TEXTS)
    # auto (GAP when the tokenizer reads it and a pair fits, else templates) | gap | templates
    coref_set: str = "auto"
    # | causality (implicit-causality templates; auto picks them for a tokenizer that reads them but not the
    # others)
    batch_size: int = 8  # probe examples per forward
    n_bootstrap: int = 1000  # clustered bootstrap resamples
    confidence: float = 0.95  # width of the interval [ci_low, ci_high]
    min_effect: float = 0.25  # mass types: H0 is score − chance ≤ min_effect
    # accuracy types: H0 is accuracy − best baseline ≤ min_accuracy_gain (paired)
    min_accuracy_gain: float = 0.1
    fdr: float = 0.05  # label when the Benjamini–Hochberg q-value ≤ fdr
    ablate: str = "labelled"  # ablation column for: labelled heads | all heads | none
    ablation_examples: int = 16  # probe examples per type used for ablation
    # random control heads (same layer where possible) / control groups per ablation
    ablation_controls: int = 8
    output_share: bool = True  # also measure each head's output share (Kobayashi et al. 2020) and its role
    block_bytes: int = 16 * 2**20  # memory budget of one streamed α block (all heads of a layer)
    retrieval_mask: str = "output"  # retrieval ablation: output zeroed (ours) | query zeroed (Wu et al.)
    twins: int = 0  # untrained twins scored on the same probes (their p99 is a label's second bar); 0: none
    twin_share: float = 0.25  # the share of the probes the twins run together (each: share / twins of them)

    @property
    def lengths(self) -> tuple[int, ...] | None:
        if self.seq_len is None:
            return None
        return (self.seq_len,) if isinstance(self.seq_len, int) else tuple(self.seq_len)


MIN_TWIN_PROBES = 4  # the fewest probes of a set a twin scores (LabelConfig.twin_share)
# The fewest span pairs a twin scores where a type's statistic is an accuracy: over n pairs a coin-flip
# head's accuracy has standard deviation 0.5 / sqrt(n), so the p99 over ~10-100 twin heads sits near
# 0.5 + 2.5 · 0.5 / sqrt(n): 0.66 at n = 64, where on 6 pairs it is ~1.0 (no trained head could beat it)
MIN_TWIN_ACCURACY_PROBES = 64


def twin_probes(count: int, config: LabelConfig, floor: int = MIN_TWIN_PROBES) -> int:
    """How many of a probe set's `count` probes each twin scores: ``ceil(twin_share × count / twins)``, at
    least `floor` (:data:`MIN_TWIN_PROBES`; :data:`MIN_TWIN_ACCURACY_PROBES` for a span set scored by
    accuracy), at most `count`.

    Examples
    --------
    >>> config = LabelConfig(twins=3)
    >>> twin_probes(64, config), twin_probes(1799, config), twin_probes(8, config)
    (6, 150, 4)
    >>> twin_probes(64, config, MIN_TWIN_ACCURACY_PROBES), twin_probes(1799, config, MIN_TWIN_ACCURACY_PROBES)
    (64, 150)
    """
    if config.twins <= 0:
        return 0
    return min(count, max(floor, math.ceil(config.twin_share * count / config.twins)))


# LabelConfig fields that do not change the rows (so they are not part of a run's identity)
NOT_IDENTITY = ("batch_size", "block_bytes")


def config_identity(config: LabelConfig) -> dict[str, object]:
    """The fields of `config` that determine the label rows, with the probe file by its content hash (for
    probe.runs.journal identities: a rerun reuses rows only when this and the model's revision are the
    same)."""
    options = {key: value for key, value in asdict(config).items() if key not in NOT_IDENTITY}
    if not options["twins"]:  # without twins the rows are those of the runs before the field existed
        del options["twins"], options["twin_share"]
    if options["text"] == PROBE_SPLIT:  # GAP's: the rows of the runs before the field existed
        del options["text"]
    options["probe_file"] = file_hash(config.probe_file) if config.probe_file else None
    return options


Note = Callable[[str], None]
Progress = Callable[[int, int], None]
# memo(key, compute) -> compute() or what an earlier call with this key returned. label_model names each of
# its resumable steps by a key (unique within one model's run with one identity: a probe batch's forward by
# its probe set, length and rows; a type's ablation by the type) and hands the step's result over as a flat
# dict of tensors (or, for an ablation, a DataFrame whose attrs["notes"] are its notes). The library never
# persists anything; probe.runs.steps keeps the results on disk, so an interrupted probe label resumes there.
Memo = Callable[[str, Callable[[], object]], object]


# ------------------------------------------------------------------------------------------------------------
# Which types, which lengths, which probes
# ------------------------------------------------------------------------------------------------------------


def resolve_types(loaded, config: LabelConfig, note: Note | None = None) -> tuple[HeadTypeSpec, ...]:
    """The specs to score on this model: the asked types (all by default) that apply to its kind; the others
    are skipped with one note."""
    if config.types is not None:
        for name in config.types:
            if name not in REGISTRY:
                raise ProbeError(f"unknown head type {name!r}: choose from {', '.join(REGISTRY)}")
    # registered types too; opt-in types (spec.default False, e.g. retrieval) only when asked for
    asked = tuple(name for name,
                  spec in REGISTRY.items() if spec.default) if config.types is None else tuple(config.types)
    kept = types_for_kind(loaded.kind, asked)
    skipped = [name for name in asked if name not in kept]
    # by default a causal LM just has no next_token
    explicit = config.types is not None or not is_text_model(loaded)
    if skipped and explicit and note is not None:
        note(f"{loaded.name} is a {loaded.kind.description}: skipped {', '.join(skipped)} (not defined for "
             "it)")
    if not kept:
        raise ProbeError(f"none of the types {', '.join(asked)} applies to {loaded.name} "
                         f"({loaded.kind.description})")
    return tuple(REGISTRY[name] for name in kept)


def default_seq_len(loaded) -> int:
    """min(DEFAULT_SEQ_LEN, the model's positions)."""
    return min(DEFAULT_SEQ_LEN, loaded.max_tokens)


def resolve_lengths(loaded, config: LabelConfig) -> tuple[int, ...]:
    """The probe lengths (config.seq_len checked against the model's positions, or the default)."""
    lengths = config.lengths or (default_seq_len(loaded),)
    check_lengths(lengths, loaded.name, loaded.max_tokens)
    return tuple(dict.fromkeys(lengths))


def check_lengths(lengths: tuple[int, ...], model: str, max_tokens: int) -> None:
    """One-line ProbeError for a probe length below 1 or beyond the model's `max_tokens` positions (also
    called by ``probe label`` from the config alone, before any weights are loaded)."""
    for length in lengths:
        if length < 1:
            raise ProbeError("--seq-len must be a positive number of tokens")
        if length > max_tokens:
            raise ProbeError(f"--seq-len {length} is beyond {model}'s {max_tokens} positions; "
                             f"use --seq-len {max_tokens} or less")


def is_text_model(loaded) -> bool:
    """Whether `loaded` is a text model (not a protein MLM)."""
    return loaded.kind != ModelKind.PROTEIN_MLM

