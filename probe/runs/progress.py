"""The progress bar of one labelling unit: forward batches done of all, at a rate that is real.

:func:`probe.heads.label.label_model` calls ``progress(done, total)`` once with ``done=0`` before the first
forward (the bar starts there, so the first rate is one batch's real time, not a first instant tick) and
after each probe batch. A batch read back from the unit's journalled steps
(:class:`probe.runs.steps.StepStore`) is counted as done but not timed: it moves the bar's ``initial`` with
it, so neither the smoothed rate nor the average counts it, and until a batch has been computed no rate is
shown ("?batch/s").
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tqdm import tqdm

from probe.heads.label.config import Memo

SMOOTHING = 0.3  # tqdm's exponential moving average of the rate (its default): recent batches weigh more


class BatchBar:
    """A tqdm bar on stderr counting a unit's forward batches (``unit="batch"``); read-back batches are not
    timed.

    Parameters
    ----------
    description : str
        The bar's label (the model).
    enabled : bool
        False: nothing is drawn (Ray workers, library calls).

    Use :meth:`memo` to wrap the unit's step memo (so the bar knows which ticks were read back) and pass the
    bar itself as ``progress``.
    """

    def __init__(self, description: str, enabled: bool = True) -> None:
        self.description, self.enabled = description, enabled
        self.bar: tqdm | None = None
        self.computing = False  # a step is being computed (a generated type ticks inside its step)
        self.read_back = False  # the last step was read back: the ticks that follow it are not timed
        self.resumed = 0  # batches read back

    def memo(self, memo: Memo) -> Memo:
        """`memo` (a :data:`probe.heads.label.config.Memo`) that tells the bar whether each step was computed
        or read back."""

        def watched(key: str, compute: Callable[[], object]) -> object:
            computed = False

            def timed() -> object:
                nonlocal computed
                computed, self.computing = True, True
                try:
                    return compute()
                finally:
                    self.computing = False

            value = memo(key, timed)
            self.read_back = not computed
            return value

        return watched

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            self.bar = tqdm(total=total, initial=done, desc=self.description, unit="batch", file=sys.stderr,
                            dynamic_ncols=True, leave=False, smoothing=SMOOTHING)
        bar = self.bar
        bar.total = total
        step = done - bar.n
        if step <= 0:
            return
        if self.read_back and not self.computing:  # read back: done, but not timed
            self.resumed += step
            now = time.time()
            if bar.n == bar.initial:  # nothing computed yet: the clock starts at the first computed batch
                bar.start_t = now
            bar.n += step
            bar.initial += step
            bar.last_print_n = bar.n
            bar.last_print_t = now
            bar.refresh()
            return
        bar.update(step)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


__all__ = ["BatchBar", "SMOOTHING"]
