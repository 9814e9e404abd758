"""`probe profile`: per-head attention statistics at any length (distance, entropy, sink, local window, offset)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe import models
from probe.commands.common import add_model_options, load_keywords, output_path
from probe.errors import ProbeError
from probe.heads.profile import ProfileConfig, head_profiles, random_inputs, text_inputs
from probe.heads.tables import TABLE_EXTENSIONS, save_table
from probe.runs.atomic import write_atomically

DEFAULTS = ProfileConfig()


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "profile", help="per-head attention statistics (distance, entropy, sink, locality) at any length",
        description="Profile every head on long inputs without ever holding [N, N]: mean and median attention "
                    "distance, entropy, sink and local-window mass, the dominant offset, with bootstrap intervals "
                    "over inputs, and a streaming ('local') / 'retrieval' split. One row per (layer, head).",
    )
    add_model_options(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text-file", help="a UTF-8 text file, cut into consecutive --seq-len token windows")
    source.add_argument("--random", type=int, metavar="N", help="N inputs of uniformly random tokens")
    parser.add_argument("--seq-len", type=int, default=None,
                        help=f"tokens per input (default {DEFAULTS.seq_len}, capped by the model's positions)")
    parser.add_argument("--query-rows", type=int, default=DEFAULTS.query_rows,
                        help="query rows sampled per input, stratified by position; inputs no longer use every "
                             f"row (default {DEFAULTS.query_rows})")
    parser.add_argument("--sink-tokens", type=int, default=DEFAULTS.sink_tokens,
                        help=f"first k tokens that count as the attention sink (default {DEFAULTS.sink_tokens})")
    parser.add_argument("--window", type=int, default=DEFAULTS.window,
                        help=f"local window: |query − key| < W (default {DEFAULTS.window})")
    parser.add_argument("--max-offset", type=int, default=DEFAULTS.max_offset,
                        help=f"search the dominant offset within ±M (default {DEFAULTS.max_offset})")
    parser.add_argument("--threshold", type=float, default=DEFAULTS.threshold,
                        help="streaming mass (sink + window) at or above which a head is 'local' "
                             f"(default {DEFAULTS.threshold})")
    parser.add_argument("--bootstrap", type=int, default=DEFAULTS.n_bootstrap, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed, help="seeds inputs, row sample and bootstrap")
    parser.add_argument("--out", required=True, help="output table: .parquet, .csv or .json")
    return parser


def run(args: argparse.Namespace) -> int:
    out = output_path(args.out, TABLE_EXTENSIONS)
    if args.random is not None and args.random < 1:
        raise ProbeError(f"--random {args.random}: give at least 1 input")
    if args.seq_len is not None and args.seq_len < 1:
        raise ProbeError(f"--seq-len {args.seq_len} must be at least 1")
    text = None
    if args.text_file is not None:
        path = Path(args.text_file).expanduser()
        if not path.is_file():
            raise ProbeError(f"--text-file {args.text_file} is not a file")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ProbeError(f"--text-file {args.text_file} cannot be read as UTF-8 text ({error})") from None
    config = ProfileConfig(seq_len=args.seq_len or DEFAULTS.seq_len, query_rows=args.query_rows,
                           sink_tokens=args.sink_tokens, window=args.window, max_offset=args.max_offset,
                           threshold=args.threshold, n_bootstrap=args.bootstrap, seed=args.seed)
    config.check()
    loaded = models.load(args.model, device=args.device, dtype=args.dtype, **load_keywords(args))
    if loaded.kind == models.ModelKind.PROTEIN_MLM and text is not None:
        raise ProbeError(f"{args.model} is a protein model: use --random N instead of --text-file")
    seq_len = config.seq_len
    if args.seq_len is None:
        seq_len = min(seq_len, loaded.max_tokens)
    loaded.check_length(seq_len, f"--seq-len {seq_len}")
    if text is not None:
        inputs = text_inputs(loaded, text, seq_len)
    else:
        inputs = random_inputs(loaded, args.random, seq_len, config.seed)

    def progress(done: int, total: int) -> None:
        print(f"\rprofile: input {done}/{total}", end="\n" if done == total else "", file=sys.stderr, flush=True)

    table = head_profiles(loaded, inputs, config, progress)
    write_atomically(out, lambda tmp: save_table(table, tmp))
    local = int((table["span"] == "local").sum())
    print(f"probe profile: {len(table)} heads ({local} local) over {len(inputs)} inputs of ≤ "
          f"{table['seq_len'].iloc[0]} tokens; wrote {out}", file=sys.stderr)
    return 0
