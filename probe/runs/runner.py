"""The one runner of batch work: ``run(units, task, out, executor)``.

Every batch command goes through :func:`run` — ``probe label`` (one model, several, ``--models-file``,
``--revisions``, ``--ray``), ``probe contacts`` (records, structure chains, ``--structures``, ``--ray``) and the
benchmarks — so they cannot disagree. The parts:

* a **unit** (:class:`Unit`): one piece of work with a stable key (a checkpoint, a FASTA record, a structure chain);
  ``group`` names what its worker must hold loaded (units of one group share a model);
* a **task** (:class:`Task`, picklable: it travels to Ray workers) owns the unit's identity (everything that
  determines its result, checked against the journal before anything is loaded), its computation (``load`` the
  group's model once per worker, ``compute`` one unit) and its rows (``rows``: the unit's part of the output table;
  ``owners``: which unit each row of an earlier table belongs to);
* an **output** (:class:`Out`): where results go — the file the journal sits beside, how the earlier table is read
  and how the files are written from the finished units (the command says this; ``path=None`` persists nothing);
* an **executor**: :class:`InProcess` (the default: one loop here; Ray is never imported) or
  :class:`probe.runs.ray_executor.RayExecutor` (an actor pool on a local Ray instance or a cluster). Both hand
  each result back as its unit finishes.

The runner alone owns what must be the same on every path:

* the **journal** (:mod:`probe.runs.journal`): each finished unit is recorded with its identity as it arrives; a
  rerun reuses exactly the units whose identity is unchanged and says so in one line (and one line for the units it
  recomputes because their options or inputs changed); ``force`` recomputes everything;
* the **atomic rewrite** of the output files after each unit (at most a tenth of the run's time is spent writing:
  a rewrite waits until ten times the last rewrite's duration has passed), and after the last; a SIGKILL
  loses at most the unit in flight, Ctrl-C writes what finished;
* **other units' rows**: rows of the earlier table that belong to units not in this run are kept, in front;
* **failures**: a unit that fails (a :class:`~probe.errors.ProbeError` is ``kind="input"``, anything else
  ``"internal"``) is printed in one line and listed in ``OUT.errors.csv`` beside the output, and the run goes on;
  a run of a single unit that fails raises its error instead (there is nothing to go on with: one line, exit 2 for
  bad input, nothing written);
* the **exit code**: 0 when every unit succeeded, 2 when some failed on bad input only, 1 otherwise.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from probe.errors import ProbeError, first_line

ERROR_COLUMNS = ["unit", "kind", "error"]
WRITE_SHARE = 0.1  # at most this share of a run's wall time goes to rewriting its outputs
NAMED = 3  # messages name at most this many units


@dataclass(frozen=True)
class Unit:
    """One piece of work. `key` is stable across runs (the journal's unit name), `group` names what the worker
    must hold loaded (units of one group share a model), `payload` is small and picklable."""

    key: str
    group: Hashable
    payload: Any = None


@dataclass
class UnitOutput:
    """What a task computes for one unit: small and picklable (never attention tensors). `identity`: the unit's
    identity as known after computing (a hub model's commit), when the task could not tell it before."""

    table: pd.DataFrame | None = None
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    identity: str | None = None
    notes: list[str] = field(default_factory=list)  # one-line notes for the user, said when the unit succeeds


@dataclass
class UnitResult:
    """One finished unit, as the driver receives it."""

    key: str
    table: pd.DataFrame | None = None
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    error: str | None = None  # one line; None when the unit succeeded
    kind: str | None = None  # "input" (bad input, ProbeError) | "internal" (anything else); None when ok
    load_seconds: float = 0.0  # time this unit spent loading its group's model (0 when the worker held it)
    run_seconds: float = 0.0
    pid: int = 0  # the process that ran it (a Ray worker's pid, or this process)
    cached: bool = False  # taken from the journal, not computed
    identity: str | None = None  # the identity it was computed with (UnitOutput.identity), when the task said
    notes: list[str] = field(default_factory=list)  # UnitOutput.notes (a failed unit's notes are dropped: its
    # error line says what matters)
    exception: BaseException | None = field(default=None, repr=False)  # in-process failures: the error itself

    @property
    def ok(self) -> bool:
        return self.error is None


class Task(Protocol):
    """What a command gives :func:`run`. Picklable: it travels to every Ray worker (models never do)."""

    def identity(self, unit: Unit) -> str | None:
        """Everything that determines the unit's result, hashed (:func:`probe.hashing.identity_hash`); computed in
        the driver before anything is loaded. None: not known before computing (never reused)."""

    def load(self, group: Hashable) -> Any:
        """What the units of one group share (a loaded model); kept by the worker while its next units need it."""

    def compute(self, state: Any, unit: Unit) -> UnitOutput:
        """One unit on the loaded state."""

    def rows(self, unit: Unit, result: UnitResult) -> pd.DataFrame | None:
        """The unit's rows of the output table (None: the task has no table)."""

    def owners(self, table: pd.DataFrame) -> pd.Series:
        """The unit key each row of an earlier output table belongs to (rows of keys not in the run are kept)."""


Writer = Callable[[Path], object]


@dataclass(frozen=True)
class Out:
    """Where a run's results go.

    Parameters
    ----------
    path
        The file the journal (``.NAME.parts/``) and ``NAME.errors.csv`` sit beside; None: no journal, nothing
        persisted (the caller prints :attr:`RunReport.table`).
    write
        ``write(table, finished) -> {path: writer}``: the files to (re)write from the output table (kept rows, then
        every finished unit's rows in unit order) and the finished results (unit order); each writer is called with
        a temporary path by :func:`probe.runs.atomic.write_atomically`.
    read
        ``read() -> table | None``: the earlier output table, whose rows of other units are kept (a foreign file is a
        one-line ProbeError; ``force`` ignores it). None: nothing is kept.
    force
        Recompute every unit (the journal is emptied).
    show
        ``show(unit, result)``, called in the driver for each successful unit as it finishes or is reused (one
        report line on stdout, say).
    written
        ``written(table, finished) -> lines`` said on stderr after the last write.
    command, noun
        For messages: ``"probe label: reused 2 of 3 model(s) ..."``.
    """

    path: Path | None = None
    write: Callable[[pd.DataFrame, list[tuple[Unit, UnitResult]]], Mapping[Path, Writer]] | None = None
    read: Callable[[], pd.DataFrame | None] | None = None
    force: bool = False
    show: Callable[[Unit, UnitResult], None] | None = None
    written: Callable[[pd.DataFrame, list[tuple[Unit, UnitResult]]], list[str]] | None = None
    command: str = "probe"
    noun: str = "unit"


@dataclass
class RunReport:
    """What :func:`run` returns: every unit's result in unit order, the output table, the exit code."""

    results: list[UnitResult]
    table: pd.DataFrame
    code: int
    reused: list[str] = field(default_factory=list)
    computed: list[str] = field(default_factory=list)

    @property
    def errors(self) -> pd.DataFrame:
        return errors_table(self.results)


def errors_table(results: Iterable[UnitResult]) -> pd.DataFrame:
    """unit, kind, error of every failed unit, in the order given."""
    rows = [{"unit": r.key, "kind": r.kind, "error": r.error} for r in results if not r.ok]
    return pd.DataFrame(rows, columns=ERROR_COLUMNS)


def exit_code(results: Iterable[UnitResult]) -> int:
    """0 when every unit succeeded, 2 when some failed on bad input only, 1 when any failed otherwise."""
    kinds = {r.kind for r in results if not r.ok}
    return 0 if not kinds else 2 if kinds == {"input"} else 1


def errors_path(out: Path) -> Path:
    """OUT.errors.csv beside an output file (the failed units of its last run)."""
    return out.with_name(out.stem + ".errors.csv")


def results_table(results: Iterable[UnitResult]) -> pd.DataFrame:
    """The tables of the successful units concatenated in the order given (empty frame when none)."""
    tables = [r.table for r in results if r.ok and r.table is not None]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


# ---------------------------------------------------------------------------------------------------------------
# Executors
# ---------------------------------------------------------------------------------------------------------------


class UnitWorker:
    """Runs units of one task, holding the state (model) of the last group it loaded. Used as is in-process and as
    the class of the Ray actor (one per worker process)."""

    def __init__(self, task: Task, threads: int | None = None, preloaded: Mapping[Hashable, Any] | None = None,
                 keep_exceptions: bool = False) -> None:
        self.task = task
        self.group: Hashable = None
        self.state: Any = None
        self.preloaded = dict(preloaded or {})
        self.keep_exceptions = keep_exceptions
        if threads:
            import torch

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
    """Runs units of a task and hands each result to `deliver` (in this process) as its unit finishes. It may also
    have ``prepare()`` (called before the run's first unit: start what it needs, fail early) and ``close()``
    (called after the run, also when it failed or was interrupted)."""

    def map(self, task: Task, units: Sequence[Unit], deliver: Callable[[UnitResult], None]) -> None: ...


@dataclass
class InProcess:
    """Units one after another in this process. `preloaded`: states the driver already holds, by group (a model
    the command loaded to check its inputs), used instead of loading them again."""

    preloaded: Mapping[Hashable, Any] | None = None

    def map(self, task: Task, units: Sequence[Unit], deliver: Callable[[UnitResult], None]) -> None:
        worker = UnitWorker(task, preloaded=self.preloaded, keep_exceptions=True)
        for unit in units:
            deliver(worker.run(unit))


# ---------------------------------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------------------------------


def _names(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:NAMED])
    return shown + (f" and {len(keys) - NAMED} more" if len(keys) > NAMED else "")


def run(units: Sequence[Unit], task: Task, out: Out | None = None, executor: Executor | None = None,
        progress: bool = True, description: str | None = None) -> RunReport:
    """Run every unit not already finished with the same identity, persisting results as they arrive.

    Parameters
    ----------
    units
        The work, in output order; keys must be unique.
    task
        Identity, computation and rows of a unit (:class:`Task`).
    out
        Where results go (:class:`Out`); None: nothing persisted, the table is returned.
    executor
        :class:`InProcess` (default) or :class:`probe.runs.ray_executor.RayExecutor`.
    progress
        One tqdm bar on stderr counting units done / total and failures (shown for two or more units).

    Returns
    -------
    RunReport
        Results in unit order (reused ones with ``cached=True``), the output table, the exit code.

    Raises
    ------
    ProbeError
        Duplicate keys, an earlier output that is not ours, or the only unit failing on bad input.
    KeyboardInterrupt
        After writing what finished.
    """
    out = out or Out()
    executor = executor or InProcess()

    def say(message: str) -> None:
        print(f"{out.command}: {message}", file=sys.stderr)

    keys = [unit.key for unit in units]
    if len(set(keys)) != len(keys):
        duplicate = next(k for k in keys if keys.count(k) > 1)
        raise ProbeError(f"{duplicate!r} is given twice; every {out.noun} needs its own name")

    earlier = None
    if out.path is not None and out.read is not None and out.path.exists() and out.path.stat().st_size > 0:
        try:
            earlier = out.read()
        except ProbeError:
            if not out.force:
                raise
    kept = None
    owned: set[str] = set()
    if earlier is not None and len(earlier):
        owners = task.owners(earlier)
        owned = set(owners[owners.isin(set(keys))])
        kept = earlier[~owners.isin(set(keys)).to_numpy()]

    journal = None
    if out.path is not None:
        from probe.runs.journal import Journal

        journal = Journal(out.path, force=out.force)
    identities = {unit.key: task.identity(unit) for unit in units}
    finished: dict[str, UnitResult] = {}
    stale = []
    if journal is not None:
        for unit in units:
            identity = identities[unit.key]
            entry = journal.get(unit.key, identity) if identity is not None else None
            if entry is not None:
                finished[unit.key] = UnitResult(unit.key, table=entry.table, arrays=dict(entry.arrays),
                                                cached=True, identity=identity)
            elif journal.stale(unit.key, identity or "") or unit.key in owned:
                stale.append(unit.key)  # recorded with another identity, or rows of it in the output
    reused = [key for key in keys if key in finished]
    todo = [unit for unit in units if unit.key not in finished]
    if reused:
        say(f"reused {_names(reused)} from {out.path}: {len(reused)} of {len(units)} {out.noun}(s) already done "
            "with the same options and inputs (--force recomputes them)")
    if stale:
        say(f"recomputing {_names(stale)}: {len(stale)} {out.noun}(s) whose options, model revision or input files "
            f"differ from what {out.path} holds")
    by_key = {unit.key: unit for unit in units}
    if out.show is not None:
        for key in reused:
            out.show(by_key[key], finished[key])

    def table_and_finished() -> tuple[pd.DataFrame, list[tuple[Unit, UnitResult]]]:
        done = [(unit, finished[unit.key]) for unit in units if unit.key in finished and finished[unit.key].ok]
        parts = [kept] if kept is not None and len(kept) else []
        for unit, result in done:
            rows = task.rows(unit, result)
            if rows is not None:
                parts.append(rows)
        table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        return table, done

    timing = {"last_end": time.perf_counter(), "last_cost": 0.0, "writes": 0}

    def rewrite(final: bool = False) -> None:
        if out.path is None or out.write is None:
            return
        now = time.perf_counter()
        if not final and timing["writes"] and now - timing["last_end"] < timing["last_cost"] / WRITE_SHARE:
            return
        table, done = table_and_finished()
        if not done and (kept is None or not len(kept)):
            return
        from probe.runs.atomic import write_atomically

        for path, writer in out.write(table, done).items():
            write_atomically(path, writer)
        timing["last_end"] = time.perf_counter()
        timing["last_cost"] = timing["last_end"] - now
        timing["writes"] += 1

    prepare, close = getattr(executor, "prepare", None), getattr(executor, "close", None)
    if todo and prepare is not None:
        prepare()  # start or join Ray now: its failure is one line, before any progress bar
    from tqdm import tqdm

    bar = tqdm(total=len(units), initial=len(reused), desc=description or out.noun + "s", unit=out.noun,
               file=sys.stderr, dynamic_ncols=True, disable=not progress or len(units) < 2)
    failures = 0
    many = len(units) > 1
    said: set[str] = set()

    def deliver(result: UnitResult) -> None:
        nonlocal failures
        finished[result.key] = result
        if result.ok:
            fresh = [note for note in result.notes if note not in said]  # each note once per run
            if fresh:
                bar.clear()
            for note in fresh:
                said.add(note)
                say(note)
            if journal is not None:
                identity = result.identity or identities[result.key]
                if identity is not None:
                    journal.put(result.key, identity, table=result.table, arrays=result.arrays)
            if out.show is not None:
                out.show(by_key[result.key], result)
            rewrite()
        else:
            failures += 1
            if many:
                bar.clear()
                say(f"{result.key}: failed: {result.error}")
        bar.set_postfix(failed=failures, refresh=False)
        bar.update(1)

    try:
        if todo:
            executor.map(task, todo, deliver)
    except KeyboardInterrupt:
        bar.close()
        rewrite(final=True)
        done = sum(1 for r in finished.values() if r.ok)
        say(f"stopped after {done} of {len(units)} {out.noun}(s); rerun the same command to finish")
        raise
    finally:
        bar.close()
        if close is not None:
            close()

    results = [finished[key] for key in keys if key in finished]
    failed = [r for r in results if not r.ok]
    if len(units) == 1 and failed:  # nothing to go on with: the unit's error is the run's
        result = failed[0]
        if result.exception is not None:
            raise result.exception
        if result.kind == "input":
            raise ProbeError(result.error)
        raise RuntimeError(result.error)
    rewrite(final=True)
    table, done = table_and_finished()
    if out.path is not None:
        errors = errors_path(out.path)
        if failed:
            from probe.runs.atomic import write_atomically

            frame = errors_table(results)
            write_atomically(errors, lambda tmp: frame.to_csv(tmp, index=False))
            say(f"{len(failed)} of {len(units)} {out.noun}(s) failed; listed in {errors}")
        elif errors.exists():
            errors.unlink()  # from an earlier run whose failures are now done
        if out.written is not None and done and len(reused) < len(units):
            for line in out.written(table, done):
                say(line)
        if reused and len(reused) == len(units):
            say(f"nothing to do: every {out.noun} is already in {out.path} with these options (--force recomputes)")
    computed = [r.key for r in results if r.ok and not r.cached]
    return RunReport(results, table, exit_code(results), reused=reused, computed=computed)


__all__ = ["ERROR_COLUMNS", "Executor", "InProcess", "Out", "RunReport", "Task", "Unit", "UnitOutput", "UnitResult",
           "UnitWorker", "errors_path", "errors_table", "exit_code", "results_table", "run"]
