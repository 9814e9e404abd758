"""`probe profile`: per-head attention statistics at any length (distance, entropy, sink, local window,
offset)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from probe.commands.common import (
    TABLE_EXTENSIONS,
    add_control_option,
    add_model_options,
    add_ray_options,
    check_model_options,
    executor,
    load_keywords,
    parse_lengths,
    refuse_if_too_big,
)
from probe.commands.paths import output_path, owned_table
from probe.errors import ProbeError
from probe.untrained import parse_control

# The defaults of probe.heads.profile.ProfileConfig, written out so that `probe profile --help` and argument
# errors need no torch (tests/commands/test_cli_fast.py checks they equal the library's).
DEFAULTS = {"seq_len": 4096, "query_rows": 1024, "sink_tokens": 4, "window": 256, "max_offset": 64,
            "threshold": 0.9, "n_bootstrap": 1000, "seed": 0}
# The most --random inputs: the profile keeps per-input statistics of every head ([input layer head offset],
# about 1 KiB per head and input) for the bootstrap over inputs, so 10,000 inputs of a 144-head model hold
# ~1.5 GiB.
MAX_RANDOM = 10_000


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "profile", help="per-head attention statistics (distance, entropy, sink, locality) at any length",
        description="Profile every head on long inputs without ever holding [N, N]: mean and median "
                    "attention distance, entropy, sink and local-window mass, the dominant offset, with "
                    "bootstrap intervals over inputs, and a streaming ('local') / 'retrieval' split. One row "
                    "per (layer, head).",
    )
    add_model_options(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text-file", help="a UTF-8 text file, cut into consecutive --seq-len token windows")
    source.add_argument("--random", type=int, metavar="N",
                        help=f"N inputs of uniformly random tokens, made one at a time (1..{MAX_RANDOM:,})")
    parser.add_argument("--seq-len", default=None,
                        help=f"tokens per input (default {DEFAULTS['seq_len']}, capped by the model's "
                             "positions); several, comma-separated (512,4096): one profile per length")
    parser.add_argument("--query-rows", type=int, default=DEFAULTS["query_rows"],
                        help="query rows sampled per input, stratified by position; inputs no longer use "
                             f"every row (default {DEFAULTS['query_rows']})")
    parser.add_argument("--sink-tokens", type=int, default=DEFAULTS["sink_tokens"],
                        help="first k tokens that count as the attention sink (default "
                             f"{DEFAULTS['sink_tokens']})")
    parser.add_argument("--window", type=int, default=DEFAULTS["window"],
                        help=f"local window: |query − key| < W, W ≥ 1 (default {DEFAULTS['window']})")
    parser.add_argument("--max-offset", type=int, default=DEFAULTS["max_offset"],
                        help=f"search the dominant offset within ±M (default {DEFAULTS['max_offset']})")
    parser.add_argument("--threshold", type=float, default=DEFAULTS["threshold"],
                        help="streaming mass (sink + window) at or above which a head is 'local' "
                             f"(default {DEFAULTS['threshold']})")
    parser.add_argument("--bootstrap", type=int, default=DEFAULTS["n_bootstrap"],
                        help=f"bootstrap resamples (default {DEFAULTS['n_bootstrap']})")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="seeds inputs, row sample and "
                                                                           "bootstrap")
    # off by default: the profile labels nothing, and K twins cost K more forwards per input
    add_control_option(parser, default="none",
                       rule="each measure's 1st and 99th percentile over their heads beside every head, "
                            "and whether a head's span beats them (span_beats_untrained); K more forwards "
                            "per input")
    parser.add_argument("--out", required=True, help="output table: .parquet, .csv or .json")
    parser.add_argument("--force", action="store_true",
                        help="overwrite an --out that is not a profile table; recompute its journal")
    add_ray_options(parser)  # one unit per length, on Ray (docs/scale.md)
    return parser


def check_args(args: argparse.Namespace) -> Path:
    """Every check that needs no library, before anything is imported or loaded; returns --out. One-line
    ProbeError naming the flag."""
    out = output_path(args.out, TABLE_EXTENSIONS)
    if args.random is not None and not 1 <= args.random <= MAX_RANDOM:
        raise ProbeError(f"--random {args.random}: give 1 to {MAX_RANDOM:,} inputs (the profile keeps "
                         "statistics of every input for its bootstrap)")
    for part in (args.seq_len or "").split(","):
        if part.strip().lstrip("-").isdigit() and int(part) < 1:
            raise ProbeError(f"--seq-len {part.strip()} must be at least 1")
    parse_lengths(args.seq_len)  # one line: "bad --seq-len '32,x': give a number of tokens, or several ..."
    for flag, value, least in (("--query-rows", args.query_rows, 1),
                               ("--bootstrap", args.bootstrap, 1), ("--window", args.window, 1),
                               ("--sink-tokens", args.sink_tokens, 0), ("--max-offset", args.max_offset, 0)):
        if value is not None and value < least:
            raise ProbeError(f"{flag} {value} must be at least {least}")
    if not 0.0 <= args.threshold <= 1.0:  # also refuses nan
        raise ProbeError(f"--threshold {args.threshold} must lie in [0, 1]")
    if args.text_file is not None and not Path(args.text_file).expanduser().is_file():
        raise ProbeError(f"--text-file {args.text_file} is not a file")
    parse_control(args.control)  # import-light: a bad --control is answered before torch loads
    check_model_options(args)
    return out


def check_foreign(out: Path, force: bool) -> None:
    """Refuse to overwrite an existing --out that is not a profile table (another command's table, or
    anyone's file), unless --force: as `probe label` does with its tables
    (:func:`probe.commands.paths.owned_table`)."""
    owned_table(out, force, ("layer", "head", "head_name", "streaming_mass", "span"), "probe profile table")


def run(args: argparse.Namespace) -> int:
    out = check_args(args)
    lengths = parse_lengths(args.seq_len)
    run_on = executor(args)  # --ray / --ray-workers: one line before torch loads
    # torch, pandas and transformers are imported only now, after the checks that need none of them, so
    # `--help`, argument errors and missing files answer at once (tests/commands/test_cli_fast.py).
    from probe.heads.profile import ProfileConfig
    from probe.heads.profile_sink import ROW_STATS
    from probe.runs import runner
    from probe.runs.profiles import ProfileTask, profile_output, profile_units

    check_foreign(out, args.force)
    text = None
    if args.text_file is not None:
        try:
            text = Path(args.text_file).expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ProbeError(f"--text-file {args.text_file} cannot be read as UTF-8 text ({error})") from None
    config = ProfileConfig(seq_len=max(lengths or (DEFAULTS["seq_len"],)), query_rows=args.query_rows,
                           sink_tokens=args.sink_tokens, window=args.window, max_offset=args.max_offset,
                           threshold=args.threshold, n_bootstrap=args.bootstrap, seed=args.seed,
                           twins=parse_control(args.control).twins)
    config.check()
    n_inputs = args.random if args.random is not None else 1 + len(text) // 2  # (≤ one input per 2 chars)
    per_head = n_inputs * (len(ROW_STATS) + 2 + 2 * config.max_offset) * 8  # float64 sums per input and head
    per_head *= 2 if config.twins else 1  # twins fill a sink each, one after the other (weights: not planned)
    refuse_if_too_big(args, args.model, "probe profile", config.seq_len, block_bytes=config.block_bytes,
                      sink_bytes_per_head=per_head, flags="a shorter --seq-len or fewer --random inputs")
    config = replace(config, seq_len=DEFAULTS["seq_len"])  # each unit's own length (None: the default)
    task = ProfileTask(config, text, args.random, args.device, args.dtype, load_keywords(args), str(out),
                       progress=isinstance(run_on, runner.InProcess))
    return runner.run(profile_units(args.model, lengths), task, profile_output(out, args.force), run_on,
                      description="profile").code
