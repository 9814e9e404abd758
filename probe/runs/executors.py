"""Where units run in this process: :class:`UnitWorker` (holds the last group's model; also the class of the
Ray actor) and the :class:`InProcess` executor, with the :class:`Executor` protocol both executors follow."""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from probe.errors import ProbeError, first_line
from probe.runs.units import Task, Unit, UnitResult


class UnitWorker:
    """Runs units of one task, holding the state (model) of the last group it loaded. Used as is in-process
    and as the class of the Ray actor (one per worker process)."""

    def __init__(self, task: Task, threads: int | None = None,
                 preloaded: Mapping[Hashable, Any] | None = None, keep_exceptions: bool = False) -> None:
        self.task = task
        self.group: Hashable = None
        self.state: Any = None
        self.preloaded = dict(preloaded or {})
        self.keep_exceptions = keep_exceptions
        if threads:
            torch.set_num_threads(threads)

    def pid(self) -> int:
        return os.getpid()

    def run(self, unit: Unit) -> UnitResult:
        started = time.perf_counter()
        load_seconds = 0.0
        try:
            if self.state is None or unit.group != self.group:
                self.state, self.group = None, None  # free the old model before loading the next
                self.state = self.preloaded.get(unit.group) if unit.group in self.preloaded else \
                    self.task.load(unit.group)
                self.group = unit.group
                load_seconds = time.perf_counter() - started
            output = self.task.compute(self.state, unit)
        except ProbeError as error:
            return UnitResult(unit.key, error=first_line(error), kind="input", pid=os.getpid(),
                              run_seconds=time.perf_counter() - started,
                              exception=error if self.keep_exceptions else None)
        except Exception as error:  # noqa: BLE001 - recorded per unit; the run goes on
            if os.environ.get("PROBE_DEBUG"):
                traceback.print_exc()
            return UnitResult(unit.key, error=f"{type(error).__name__}: {first_line(error)}", kind="internal",
                              pid=os.getpid(), run_seconds=time.perf_counter() - started,
                              exception=error if self.keep_exceptions else None)
        return UnitResult(unit.key, table=output.table, arrays=dict(output.arrays), load_seconds=load_seconds,
                          run_seconds=time.perf_counter() - started - load_seconds, pid=os.getpid(),
                          identity=output.identity, notes=list(output.notes))


class Executor(Protocol):
    """Runs units of a task and hands each result to `deliver` (in this process) as its unit finishes;
    ``prepare()`` is called before the run's first unit (start what it needs, fail early) and ``close()``
    after the run, also when it failed or was interrupted (both may do nothing)."""

    def prepare(self) -> None: ...

    def map(self, task: Task, units: Sequence[Unit], deliver: Callable[[UnitResult], None]) -> None: ...

    def close(self) -> None: ...


@dataclass
class InProcess:
    """Units one after another in this process. `preloaded`: states the driver already holds, by group (a
    model the command loaded to check its inputs), used instead of loading them again."""

    preloaded: Mapping[Hashable, Any] | None = None

    def prepare(self) -> None:
        """Nothing to start: the units run in this process."""

    def map(self, task: Task, units: Sequence[Unit], deliver: Callable[[UnitResult], None]) -> None:
        worker = UnitWorker(task, preloaded=self.preloaded, keep_exceptions=True)
        for unit in units:
            deliver(worker.run(unit))

    def close(self) -> None:
        """Nothing to stop."""


