"""Background labelling: one worker thread runs one labelling job at a time, holding the inference gate only
between probe batches so that every view goes first (:class:`probe_app.gate.InferenceGate`). Built on the
model registry and the gate alone; what a finished job computed is handed to `on_done`."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from probe.errors import ProbeError
from probe.naming import display_name

from .gate import InferenceGate
from .registry import ModelRegistry

REPORT_EVERY_S = 5.0  # a labelling job's progress line in the terminal at most this often

# (loaded model, progress(done, total)) -> the label table
LabelRun = Callable[[object, Callable[[int, int], None]], pd.DataFrame]


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


class JobSlots:
    """A bound on the heavy work a shared dashboard takes on: labelling jobs (queued or running) and circuit
    searches (running or waiting for the model) together hold at most `limit` slots; one more is refused in
    one line, never queued without end (AppConfig.max_jobs, ``probe app --max-jobs``).

    >>> slots = JobSlots(1)
    >>> slots.take("a circuit search")
    >>> slots.take("labelling")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    probe.errors.ProbeError: the server is busy: 1 job (labelling or a circuit search) is queued or ...
    >>> slots.give(); slots.held
    0
    """

    def __init__(self, limit: int) -> None:
        self.limit, self.held = int(limit), 0
        self._lock = threading.Lock()

    def take(self, what: str) -> None:
        """Hold a slot for `what` (named in the refusal), or raise ProbeError when every slot is held."""
        with self._lock:
            if self.held >= self.limit:
                jobs = "1 job" if self.limit == 1 else f"{self.limit} jobs"
                verb = "is" if self.limit == 1 else "are"
                raise ProbeError(f"the server is busy: {jobs} (labelling or a circuit search) {verb} "
                                 f"queued or running, its limit (probe app --max-jobs {self.limit}); "
                                 f"try {what} again when it has finished")
            self.held += 1

    def give(self) -> None:
        """Free a slot taken with :meth:`take`."""
        with self._lock:
            self.held = max(0, self.held - 1)


@dataclass
class LabelJob:
    """Progress of one background labelling run (queued, then running, then done or failed)."""

    done: int = 0
    total: int = 0
    state: str = "queued"  # queued | running | done | failed
    error: str = ""
    started: float | None = None  # time.monotonic() when it began running
    ended: float | None = None
    reported: float = 0.0  # when its last progress line went to the terminal

    def eta_s(self, now: float | None = None) -> float | None:
        """Seconds left, from the pace so far (None before the first probe batch is done)."""
        if self.state != "running" or self.started is None or self.done <= 0 or self.total <= 0:
            return None
        elapsed = (time.monotonic() if now is None else now) - self.started
        return max(0.0, elapsed / self.done * (self.total - self.done))

    def describe(self, name: str) -> str:
        """One line: "labelling M: 12/40 probe batches, about 30 s left" (or queued, done, failed)."""
        if self.state == "queued":
            return f"{name}: queued for labelling (another model is being labelled first)"
        if self.state == "failed":
            return f"labelling {name} failed: {self.error}"
        if self.state == "done":
            took = f" in {self.ended - self.started:.0f} s" if self.started and self.ended else ""
            return f"labelled every head of {name}{took}"
        eta = self.eta_s()
        left = "estimating the time left" if eta is None else f"about {_duration(eta)} left"
        return f"labelling {name}: {self.done}/{self.total or '?'} probe batches, {left}"


class LabelQueue:
    """Labelling jobs by model spec, run one at a time by one daemon worker thread.

    Parameters
    ----------
    registry : ModelRegistry
        Where the models come from.
    gate : InferenceGate
        Held in the background between probe batches.
    on_done : callable
        (spec, table) for every job that finished.
    slots : JobSlots, optional
        Held by each job from queued to ended (shared with the circuit searches: AppConfig.max_jobs); default
        one per served model.
    """

    def __init__(self, registry: ModelRegistry, gate: InferenceGate,
                 on_done: Callable[[str, pd.DataFrame], None], slots: JobSlots | None = None) -> None:
        self.registry, self.gate, self.on_done = registry, gate, on_done
        self.slots = slots if slots is not None else JobSlots(len(registry.specs) or 1)
        self._jobs: dict[str, LabelJob] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self.report: Callable[[str], None] | None = None  # where progress lines go (the terminal)

    def job(self, spec: str) -> LabelJob | None:
        with self._lock:
            return self._jobs.get(spec)

    def running(self) -> tuple[str, LabelJob] | None:
        """(spec, job) of the labelling job running now, else of the next queued one, else None."""
        with self._lock:
            pending = [(spec, job) for spec, job in self._jobs.items() if job.state in ("running", "queued")]
        return next((item for item in pending if item[1].state == "running"), pending[0] if pending else None)

    def finished(self) -> int:
        """How many labelling jobs have ended (a counter the page watches to redraw what waited for them)."""
        with self._lock:
            return sum(job.state in ("done", "failed") for job in self._jobs.values())

    def start(self, spec: str, run: LabelRun) -> LabelJob:
        """Queue labelling `spec` with `run` (a job already queued or running is returned as it is)."""
        self.registry.get(spec)  # unknown spec: error now, in the request
        with self._lock:
            job = self._jobs.get(spec)
            if job is not None and job.state in ("queued", "running"):
                return job
            self.slots.take("labelling")  # the server's bound on queued work: refused in one line
            job = self._jobs[spec] = LabelJob()
            self._queue.put((spec, job, run))
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="probe-labelling", daemon=True)
                self._worker.start()
        return job

    def _work(self) -> None:
        while True:
            try:
                spec, job, run = self._queue.get(timeout=1.0)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._worker = None
                        return
                continue
            self._label(spec, job, run)

    def _label(self, spec: str, job: LabelJob, run: LabelRun) -> None:
        job.state, job.started = "running", time.monotonic()
        self._say(spec, job, force=True)
        try:
            with self.gate.background() as turn:
                def progress(done: int, total: int) -> None:
                    job.done, job.total = int(done), int(total)
                    self._say(spec, job)
                    if job.total and job.done >= job.total:
                        turn.release()  # the statistics that follow need no model
                    else:
                        turn.step_aside()  # every waiting view goes first

                table = run(self.registry.get(spec), progress)
            self.on_done(spec, table)
            job.state = "done"
        except ProbeError as error:
            job.state, job.error = "failed", str(error)
        except Exception as error:  # noqa: BLE001 - reported in the page, not as a traceback
            job.state, job.error = ("failed",
                                    f"internal error while labelling: {type(error).__name__}: {error}")
        job.ended = time.monotonic()
        self.slots.give()
        self._say(spec, job, force=True)

    def _say(self, spec: str, job: LabelJob, force: bool = False) -> None:
        """A progress line in the terminal: at start and end, and at most every REPORT_EVERY_S meanwhile."""
        now = time.monotonic()
        if self.report is None or not (force or now - job.reported >= REPORT_EVERY_S):
            return
        job.reported = now
        self.report("probe app: " + job.describe(display_name(spec)))
