"""Where a labelling run's time goes: wall-clock seconds per stage of :func:`probe.heads.label.label_model`.

Stages (each summed over the run): ``probe sets`` (corpus tokenization, natural-text, repeated-block and
bracket probes), ``GAP pairs`` (fitting and encoding the span examples), ``forwards`` (the streamed scoring
passes; the output norms ride in the same kernel calls, so their cost is inside this stage — docs/labels.md
measures it apart), ``generation`` (decoding types), ``bootstrap`` (per-type statistics, the FDR decision),
``copying`` (OV eigenvalues, direct logit attribution), ``per-head ablation``, ``group ablation`` (per layer
and per type) and ``retrieval ablation``. ``probe label`` prints one line per model (:meth:`StageTimes.line`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class StageTimes:
    """Seconds per stage, in the order the stages first ran.

    Attributes
    ----------
    seconds : dict of str to float
        Wall-clock seconds by stage name (a stage run twice adds up).

    Examples
    --------
    >>> times = StageTimes()
    >>> with times.stage("probe sets"):
    ...     pass
    >>> with times.stage("forwards"):
    ...     pass
    >>> list(times.seconds)  # label_model(..., timings=times) fills it; probe label prints times.line(model)
    ['probe sets', 'forwards']
    """

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Add the wall-clock time of the block to stage `name`."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def line(self, model: str) -> str:
        """ "model · time by stage: probe sets 0.4 s, forwards 3.1 s, … (total 9.8 s)"."""
        parts = ", ".join(f"{name} {value:.1f} s" for name, value in self.seconds.items())
        return f"{model} · time by stage: {parts} (total {sum(self.seconds.values()):.1f} s)"
