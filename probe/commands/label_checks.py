"""What `probe label` checks before any weights are loaded: its flags (:func:`check_args`), the LabelConfig
they describe (:func:`config_from_args`), and from each model's config the probe lengths against the model's
positions and the run's memory plan against the memory free (one line each, exit 2)."""

from __future__ import annotations

import argparse
from pathlib import Path

from probe.commands.common import parse_lengths
from probe.errors import ProbeError
from probe.untrained import parse_control


def check_args(args: argparse.Namespace) -> None:
    """The checks that need no torch: numbers in range, --probe-file present. One-line ProbeError."""
    for flag, value in (("--examples", args.examples), ("--batch-size", args.batch_size),
                        ("--bootstrap", args.bootstrap)):
        if value < 1:
            raise ProbeError(f"{flag} must be at least 1")
    if not 0 < args.fdr < 1:
        raise ProbeError(f"--fdr {args.fdr} must be between 0 and 1 (e.g. 0.05)")
    for flag, value in (("--min-effect", args.min_effect), ("--min-accuracy-gain", args.min_accuracy_gain)):
        if not -1 <= value <= 1:  # also refuses nan
            raise ProbeError(f"{flag} {value} must be between -1 and 1")
    parse_lengths(args.seq_len), parse_control(args.control)  # each refuses with one line
    if args.probe_file is not None and not Path(args.probe_file).expanduser().is_file():
        raise ProbeError(f"--probe-file {args.probe_file} is not a file: give a JSONL file of span examples")


def config_from_args(args: argparse.Namespace):
    """The probe.heads.label.LabelConfig the flags describe (validated: one-line ProbeError on bad values)."""
    from probe.heads.label import LabelConfig  # torch: only after --help and argument parsing
    from probe.heads.probesets import load_probe_file
    from probe.heads.registry import parse_head_types

    check_args(args)
    types = parse_head_types(args.types) if args.types else None
    lengths = parse_lengths(args.seq_len)
    if args.probe_file is not None:
        load_probe_file(args.probe_file)  # check it before any model is loaded
        if types is not None and "coreference" not in types:
            raise ProbeError("--probe-file examples are scored as the coreference type: add coreference to "
                             "--types")
    return LabelConfig(types=types, examples=args.examples, seq_len=lengths, seed=args.seed,
                       text=args.text, probe_file=args.probe_file, coref_set=args.coref_set,
                       batch_size=args.batch_size,
                       n_bootstrap=args.bootstrap, min_effect=args.min_effect,
                       min_accuracy_gain=args.min_accuracy_gain, fdr=args.fdr, ablate=args.ablate,
                       retrieval_mask=args.retrieval_mask, twins=parse_control(args.control).twins)


def check_before_loading(args: argparse.Namespace, config) -> None:
    """Each model's probe lengths against its positions and the run's memory plan against the memory free,
    from its config (the library checks the lengths again after loading, with the same message): a config
    that cannot be read is left to the loading to explain."""
    from probe.card import load_config  # transformers: after the fast checks
    from probe.commands.common import refuse_if_too_big
    from probe.errors import ProbeError
    from probe.heads.label.config import check_lengths
    from probe.models import config_max_tokens

    named = list(dict.fromkeys(args.model or [])) if args.revisions is None else []
    for name in named if config.lengths else ():
        try:
            limit = config_max_tokens(load_config(name))
        except ProbeError:
            continue
        check_lengths(config.lengths, name, limit)
    longest = max(config.lengths or (128,))
    for name in named:
        check_types_apply(name, config)
        check_needles_fit(name, config)
    for name in named:
        refuse_if_too_big(args, name, "probe label", longest, batch=config.batch_size,
                          block_bytes=config.block_bytes, flags="a smaller --batch-size or --seq-len")


def check_types_apply(name: str, config) -> None:
    """Refuse, from the config, a run none of whose asked types applies to the model's kind (what
    probe.heads.label.config.resolve_types refuses after loading, with the loading note before it)."""
    from probe.errors import ProbeError
    from probe.heads.registry import REGISTRY, types_for_kind
    from probe.models import spec_kinds

    if config.types is None:
        return
    kinds = spec_kinds(name)  # () when unreadable here: loading says why
    if kinds and not any(types_for_kind(kind.value, tuple(config.types)) for kind in kinds):
        asked = ", ".join(config.types)
        fits = sorted({t for kind in kinds for t in types_for_kind(kind.value) if t in REGISTRY})
        raise ProbeError(f"none of the types {asked} applies to {name} ({kinds[0].description}): choose from "
                         f"{', '.join(fits)}")


def check_needles_fit(name: str, config) -> None:
    """Retrieval's needle probes need a key twice and a needle after the tokenizer's leading specials: a
    shorter --seq-len is refused before loading (before: after the plan line, with other batches run)."""
    from probe.card import load_config
    from probe.errors import ProbeError
    from probe.heads.label.config import DEFAULT_SEQ_LEN
    from probe.heads.retrieval import KEY_LEN, NEEDLE_LEN
    from probe.models import config_max_tokens

    if config.types is None or "retrieval" not in config.types:
        return
    try:
        lengths = config.lengths or (min(DEFAULT_SEQ_LEN, config_max_tokens(load_config(name))),)
    except ProbeError:
        return
    prefix = leading_specials(name)
    shortest = prefix + 2 * KEY_LEN + NEEDLE_LEN
    for length in lengths:
        if length < shortest:
            raise ProbeError(f"--seq-len {length}: a retrieval (needle) probe needs at least {shortest} "
                             f"tokens with {name}'s tokenizer ({prefix} leading special token(s), a "
                             f"{KEY_LEN}-token key twice and a {NEEDLE_LEN}-token needle); use --seq-len "
                             f"{shortest} or more")


def leading_specials(name: str) -> int:
    """How many special tokens the model's tokenizer puts before a text (<bos>, [CLS]); 0 when it cannot be
    read here (loading then says why)."""
    import transformers

    from probe.heads.probesets.tokens import special_frame
    from probe.quiet import transformers_quiet
    from probe.specs import resolve

    try:
        with transformers_quiet():
            tokenizer = transformers.AutoTokenizer.from_pretrained(resolve(name))
    except Exception:  # noqa: BLE001 - any reason: the loading explains it in one line
        return 0
    return len(special_frame(tokenizer)[0])
