"""The inference gate: one forward pass at a time in the whole process, views first.

A view (a layer of the explorer, the grid, a protein) passes the gate in the *foreground*; a labelling job in
the *background* holds it only between its probe batches and steps aside at the next batch whenever a view is
waiting. So a labelling job never holds the models for its whole run: a view waits at most one probe batch's
forward, and the job pauses until no view has run for QUIET_S (a page load is many requests: none of them
waits for the job).

    gate = InferenceGate()
    with gate.foreground():          # a view
        model(**inputs)
    with gate.background() as turn:  # a labelling job
        for batch in batches:
            turn.step_aside()        # lets every waiting view through first
            model(**batch)
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

QUIET_S = 1.5  # a background job resumes only after this long without a view (a page load is many requests)


class InferenceGate:
    """A re-entrant lock in which foreground holders always go before background ones."""

    def __init__(self, quiet_s: float = QUIET_S) -> None:
        self.quiet_s = quiet_s
        self._last_view = float("-inf")  # time.monotonic() when the last view left the gate
        self._condition = threading.Condition()
        self._owner: int | None = None  # thread id of the holder
        self._depth = 0  # re-entrant acquisitions by the holder
        self._waiting = 0  # foreground threads waiting for the gate
        self._background: int | None = None  # thread id of the background holder

    def touch(self) -> None:
        """Count now as a view (a page being served): background jobs stay paused for `quiet_s`."""
        with self._condition:
            self._last_view = time.monotonic()

    def quiet(self) -> bool:
        """No view has used the gate for `quiet_s`."""
        with self._condition:
            return time.monotonic() - self._last_view >= self.quiet_s

    @property
    def waiting(self) -> int:
        """How many views wait for the gate now."""
        with self._condition:
            return self._waiting

    @contextmanager
    def foreground(self):
        """Hold the gate for a view (re-entrant); a background holder lets it through at its next step."""
        me = threading.get_ident()
        with self._condition:
            if self._owner != me:
                self._waiting += 1
                try:
                    while self._owner is not None:
                        self._condition.wait()
                finally:
                    self._waiting -= 1
                self._owner = me
            self._depth += 1
        try:
            yield self
        finally:
            self._release()

    @contextmanager
    def background(self):
        """Hold the gate for a background job, which calls `step_aside()` between its batches."""
        self._acquire_background()
        turn = _Turn(self)
        try:
            yield turn
        finally:
            if turn.holding:
                self._release()

    def _acquire_background(self) -> None:
        me = threading.get_ident()
        with self._condition:
            while True:
                quiet = time.monotonic() - self._last_view
                if self._owner is None and not self._waiting and quiet >= self.quiet_s:
                    break
                self._condition.wait(timeout=max(0.05, self.quiet_s - quiet))
            self._owner, self._depth, self._background = me, 1, me

    def _release(self) -> None:
        with self._condition:
            self._depth -= 1
            if self._depth == 0:
                if self._owner == self._background:
                    self._background = None
                else:
                    self._last_view = time.monotonic()
                self._owner = None
                self._condition.notify_all()


class _Turn:
    """A background job's hold on the gate."""

    def __init__(self, gate: InferenceGate) -> None:
        self._gate = gate
        self.holding = True

    def step_aside(self) -> None:
        """Let every waiting view pass, then take the gate back once no view has run for `quiet_s` (no wait
        when the views are quiet)."""
        if self._gate.waiting or not self._gate.quiet():
            self._gate._release()
            self.holding = False
            self._gate._acquire_background()
            self.holding = True

    def release(self) -> None:
        """Give the gate up for good (the job's remaining work needs no model: statistics, the table)."""
        if self.holding:
            self._gate._release()
            self.holding = False
