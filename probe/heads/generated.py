"""What a generation-scored head type's scorer hands back (retrieval heads): kept apart from the registry so
the scorers can import it without importing the registry that names them."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GeneratedScores:
    """What a generation-scored type's scorer returns for one probe length: per-example scores the label rule
    treats like a mass type's (effect = score − chance, clustered bootstrap, FDR)."""

    probe_set: str  # the probe_set column
    score: torch.Tensor  # [example layer head] float; NaN for examples that do not count
    chance: torch.Tensor  # [example] float: a uniform head's score; NaN where score is
    cluster: torch.Tensor  # [example] long: bootstrap clusters
    recall: torch.Tensor | None = None  # [example]: how well the model did the probe's task (for notes)
