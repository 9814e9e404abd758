"""What `probe label` checks from each model's config before any weights are loaded: the probe lengths
against the model's positions and the run's memory plan against the memory free (one line each, exit 2)."""

from __future__ import annotations

import argparse


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
