"""What `probe label` checks and says before any model is loaded: the probe lengths against each model's
positions (from its config), then its first line — the models, the work and its unit (forward batches of
probes), and where finished batches are kept, i.e. the unit a rerun resumes at (docs/cli.md, "What probe
label prints"). So a bad length is one line, and nothing is said before it."""

from __future__ import annotations

import argparse
from pathlib import Path


def first_line(args: argparse.Namespace, out: Path | None) -> str:
    """What the run is about to do, said before anything heavy is imported: the models, the work and its unit
    (forward batches), and where finished batches are kept (the unit a rerun resumes at)."""
    named = list(dict.fromkeys(args.model or []))
    if args.models_file is not None:
        what = f"the models listed in {args.models_file}"
    elif args.revisions is not None:
        what = f"the checkpoints {args.revisions} of {named[0] if len(named) == 1 else ', '.join(named)}"
    else:
        shown = ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
        what = f"{shown} ({len(named)} model{'s' if len(named) != 1 else ''})"
    keep = (f"each finished batch is journalled beside {out}, so a rerun of this command after an "
            "interruption resumes where it stopped" if out is not None
            else "nothing is kept on disk without --out: an interrupted run starts again")
    return (f"labelling every head of {what}: loading, building the probe sets, then forward batches of "
            f"{args.batch_size} probes ({args.examples} per probe set; the next line counts them), the "
            f"statistics and the ablation; {keep}")


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
        refuse_if_too_big(args, name, "probe label", longest, batch=config.batch_size,
                          block_bytes=config.block_bytes, flags="a smaller --batch-size or --seq-len")
