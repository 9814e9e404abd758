"""The one runner of batch work: ``run(units, task, out, executor)``.

Every batch command goes through :func:`run` — ``probe label`` (one model, several, ``--models-file``,
``--revisions``, ``--ray``), ``probe contacts`` (records, structure chains, ``--structures``, ``--ray``),
``probe circuit --type`` and ``probe profile`` (per model and length; both ``--ray``) and the benchmarks — so
they cannot disagree. The parts:

* a **unit** (:class:`Unit`): one piece of work with a stable key (a checkpoint, a FASTA record, a structure
  chain); ``group`` names what its worker must hold loaded (units of one group share a model);
* a **task** (:class:`Task`, picklable: it travels to Ray workers) owns the unit's identity (everything that
  determines its result, checked against the journal before anything is loaded), its computation (``load`` the
  group's model once per worker, ``compute`` one unit) and its rows (``rows``: the unit's part of the output
  table; ``owners``: which unit each row of an earlier table belongs to);
* an **output** (:class:`Out`): where results go — the file the journal sits beside, how the earlier table is
  read and how the files are written from the finished units (the command says this; ``path=None`` persists
  nothing);
* an **executor**: :class:`InProcess` (the default: one loop here; Ray is never imported) or
  :class:`probe.runs.ray_executor.RayExecutor` (an actor pool on a local Ray instance or a cluster). Both hand
  each result back as its unit finishes.

The runner alone owns what must be the same on every path:

* the **journal** (:mod:`probe.runs.journal`): each finished unit is recorded with its identity as it arrives;
  a rerun reuses exactly the units whose identity is unchanged and says so in one line (and one line for the
  units it recomputes because their options or inputs changed); ``force`` recomputes everything;
* the **atomic rewrite** of the output files after each unit (at most a tenth of the run's time is spent
  writing: a rewrite waits until ten times the last rewrite's duration has passed), and after the last; a
  SIGKILL loses at most the unit in flight, Ctrl-C writes what finished;
* **other units' rows**: rows of the earlier table that belong to units not in this run are kept, in front;
  the table is re-read at every rewrite under the output's writer lock
  (:meth:`probe.runs.journal.Journal.writing`), so two runs into one output started together keep each
  other's rows (no lost update);
* **failures**: a unit that fails (a :class:`~probe.errors.ProbeError` is ``kind="input"``, anything else
  ``"internal"``) is printed in one line and listed in ``OUT.errors.csv`` beside the output, and the run goes
  on; a run of a single unit that fails raises its error instead (there is nothing to go on with: one line,
  exit 2 for bad input, nothing written);
* the **exit code**: 0 when every unit succeeded, 2 when some failed on bad input only, 1 otherwise.

:func:`run` is a :class:`Run` executed: its steps are methods with names (check the keys, read the earlier
table, match the journal, announce what is reused, deliver each result, write the files, finish). The
vocabulary (units, tasks, :class:`Out`, :class:`RunReport`) is :mod:`probe.runs.units`; the in-process
executor :mod:`probe.runs.executors`; both are importable from here.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Sequence

import pandas as pd
from tqdm import tqdm

from probe.errors import ProbeError
from probe.runs.atomic import write_atomically
from probe.runs.executors import Executor, InProcess, UnitWorker
from probe.runs.journal import Journal
from probe.runs.units import (
    ERROR_COLUMNS,
    Out,
    RunReport,
    Task,
    Unit,
    UnitOutput,
    UnitResult,
    errors_path,
    errors_table,
    exit_code,
    results_table,
)

WRITE_SHARE = 0.1  # at most this share of a run's wall time goes to rewriting its outputs
NAMED = 3  # messages name at most this many units


def _names(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:NAMED])
    return shown + (f" and {len(keys) - NAMED} more" if len(keys) > NAMED else "")


class Run:
    """One run of :func:`run`, step by step (see the module doc). Build it, then :meth:`execute` it once."""

    def __init__(self, units: Sequence[Unit], task: Task, out: Out | None = None,
                 executor: Executor | None = None, progress: bool = True,
                 description: str | None = None) -> None:
        self.units, self.task = list(units), task
        self.out = out or Out()
        self.executor = executor or InProcess()
        self.progress, self.description = progress, description
        self.keys = [unit.key for unit in self.units]
        self.by_key = {unit.key: unit for unit in self.units}
        # rows of the earlier table that belong to units not in this run
        self.kept: pd.DataFrame | None = None
        self.owned: set[str] = set()  # units of this run with rows in the earlier table
        self.journal: Journal | None = None
        self.identities: dict[str, str | None] = {}
        self.finished: dict[str, UnitResult] = {}
        self.reused: list[str] = []
        self.stale: list[str] = []
        self.failures = 0
        self.said: set[str] = set()  # notes said in this run (each once)
        self.last_end, self.last_cost, self.writes = time.perf_counter(), 0.0, 0
        self.bar = None

    # -- before any unit runs --------------------------------------------------------------------------------

    def say(self, message: str) -> None:
        print(f"{self.out.command}: {message}", file=sys.stderr)

    def check_keys(self) -> None:
        """Every key once, or one line naming the duplicate."""
        if len(set(self.keys)) != len(self.keys):
            duplicate = next(k for k in self.keys if self.keys.count(k) > 1)
            raise ProbeError(f"{duplicate!r} is given twice; every {self.out.noun} needs its own name")

    def read_earlier(self) -> None:
        """The earlier output table: which of its rows are other units' (kept) and which units own the
        rest."""
        out, earlier = self.out, None
        if (out.path is not None and out.read is not None and out.path.exists()
                and out.path.stat().st_size > 0):
            try:
                earlier = out.read()
            except ProbeError:
                if not out.force:
                    raise
        if earlier is not None and len(earlier):
            owners = self.task.owners(earlier)
            mine = owners.isin(set(self.keys))
            self.owned = set(owners[mine])
            self.kept = earlier[~mine.to_numpy()]

    def match_journal(self) -> None:
        """Units recorded with the same identity are finished (reused); those recorded otherwise, or with rows
        in the output, are stale (recomputed)."""
        self.identities = {unit.key: self.task.identity(unit) for unit in self.units}
        if self.out.path is None:
            return
        self.journal = Journal(self.out.path, force=self.out.force)
        for unit in self.units:
            identity = self.identities[unit.key]
            entry = self.journal.get(unit.key, identity) if identity is not None else None
            if entry is not None:
                self.finished[unit.key] = UnitResult(unit.key, table=entry.table, arrays=dict(entry.arrays),
                                                     cached=True, identity=identity)
            elif self.journal.stale(unit.key, identity or "") or unit.key in self.owned:
                self.stale.append(unit.key)  # recorded with another identity, or rows of it in the output
        self.reused = [key for key in self.keys if key in self.finished]

    def announce(self) -> None:
        """One line for the reused units, one for the recomputed ones; reused units are shown."""
        out, n = self.out, len(self.units)
        if self.reused:
            self.say(f"reused {_names(self.reused)} from {out.path}: {len(self.reused)} of {n} {out.noun}(s) "
                     "already done with the same options and inputs (--force recomputes them)")
        if self.stale:
            self.say(f"recomputing {_names(self.stale)}: {len(self.stale)} {out.noun}(s) whose options, "
                     f"model revision or input files differ from what {out.path} holds")
        if out.show is not None:
            for key in self.reused:
                out.show(self.by_key[key], self.finished[key])

    # -- while units finish ----------------------------------------------------------------------------------

    def table_and_finished(self, say: bool = False) -> tuple[pd.DataFrame, list[tuple[Unit, UnitResult]]]:
        """The output table (kept rows, then every finished unit's rows in unit order, through ``out.finish``)
        and the finished units; with `say`, ``out.finish``'s lines are said."""
        done = [(unit, self.finished[unit.key]) for unit in self.units
                if unit.key in self.finished and self.finished[unit.key].ok]
        parts = [self.kept] if self.kept is not None and len(self.kept) else []
        for unit, result in done:
            rows = self.task.rows(unit, result)
            if rows is not None:
                parts.append(rows)
        table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        if self.out.finish is not None:
            table, lines = self.out.finish(table)
            for line in lines if say else ():
                self.say(line)
        return table, done

    def rewrite(self, final: bool = False) -> None:
        """Write the output files atomically: always when `final`, else only once ten times the last write's
        duration has passed (at most WRITE_SHARE of the run's time goes to writing)."""
        out = self.out
        if out.path is None or out.write is None:
            return
        now = time.perf_counter()
        if not final and self.writes and now - self.last_end < self.last_cost / WRITE_SHARE:
            return
        with self.journal.writing() if self.journal is not None else contextlib.nullcontext():
            self.read_earlier()  # another run may have written since: its rows are kept too (no lost update)
            table, done = self.table_and_finished()
            if not done and (self.kept is None or not len(self.kept)):
                return
            for path, writer in out.write(table, done).items():
                write_atomically(path, writer)
        self.last_end = time.perf_counter()
        self.last_cost = self.last_end - now
        self.writes += 1

    def deliver(self, result: UnitResult) -> None:
        """One result as it arrives: its notes (each once), the journal, the show line and a rewrite; or a
        one-line failure."""
        self.finished[result.key] = result
        if result.ok:
            fresh = [note for note in result.notes if note not in self.said]
            if fresh:
                self.bar.clear()
            for note in fresh:
                self.said.add(note)
                self.say(note)
            if self.journal is not None:
                identity = result.identity or self.identities[result.key]
                if identity is not None:
                    self.journal.put(result.key, identity, table=result.table, arrays=result.arrays)
            if self.out.show is not None:
                self.out.show(self.by_key[result.key], result)
            self.rewrite()
        else:
            self.failures += 1
            if len(self.units) > 1:
                self.bar.clear()
                self.say(f"{result.key}: failed: {result.error}")
        self.bar.set_postfix(failed=self.failures, refresh=False)
        self.bar.update(1)

    def compute(self) -> None:
        """The units not finished, on the executor (prepared first, closed after, also on failure); Ctrl-C
        writes what finished and says how to go on."""
        todo = [unit for unit in self.units if unit.key not in self.finished]
        if todo:
            self.executor.prepare()  # start or join Ray now: its failure is one line, before any progress bar
        self.bar = tqdm(total=len(self.units), initial=len(self.reused),
                        desc=self.description or self.out.noun + "s", unit=self.out.noun, file=sys.stderr,
                        dynamic_ncols=True, disable=not self.progress or len(self.units) < 2)
        try:
            if todo:
                self.executor.map(self.task, todo, self.deliver)
        except KeyboardInterrupt:
            self.bar.close()
            self.rewrite(final=True)
            done = sum(1 for r in self.finished.values() if r.ok)
            self.say(f"stopped after {done} of {len(self.units)} {self.out.noun}(s); rerun the same command "
                     "to finish")
            raise
        finally:
            self.bar.close()
            self.executor.close()

    # -- after the last unit ---------------------------------------------------------------------------------

    def raise_single_failure(self, results: list[UnitResult]) -> None:
        """A run of one unit that failed raises its error (there is nothing to go on with)."""
        failed = [r for r in results if not r.ok]
        if len(self.units) == 1 and failed:
            result = failed[0]
            if result.exception is not None:
                raise result.exception
            if result.kind == "input":
                raise ProbeError(result.error)
            raise RuntimeError(result.error)

    def write_errors(self, results: list[UnitResult]) -> None:
        """OUT.errors.csv lists the failed units (removed when none failed) and the closing lines are said."""
        out = self.out
        if out.path is None:
            return
        errors, failed = errors_path(out.path), [r for r in results if not r.ok]
        if failed:
            frame = errors_table(results)
            write_atomically(errors, lambda tmp: frame.to_csv(tmp, index=False))
            self.say(f"{len(failed)} of {len(self.units)} {out.noun}(s) failed; listed in {errors}")
        elif errors.exists():
            errors.unlink()  # from an earlier run whose failures are now done

    def finish(self, table: pd.DataFrame, done: list[tuple[Unit, UnitResult]]) -> None:
        """The written lines and, when every unit was reused, "nothing to do"."""
        out = self.out
        if out.path is None:
            return
        if out.written is not None and done and len(self.reused) < len(self.units):
            for line in out.written(table, done):
                self.say(line)
        if self.reused and len(self.reused) == len(self.units):
            self.say(f"nothing to do: every {out.noun} is already in {out.path} with these options "
                     "(--force recomputes)")

    def execute(self) -> RunReport:
        """Every step in order; the report."""
        self.check_keys()
        self.read_earlier()
        self.match_journal()
        self.announce()
        self.compute()
        results = [self.finished[key] for key in self.keys if key in self.finished]
        self.raise_single_failure(results)
        self.rewrite(final=True)
        table, done = self.table_and_finished(say=True)
        self.write_errors(results)
        self.finish(table, done)
        computed = [r.key for r in results if r.ok and not r.cached]
        return RunReport(results, table, exit_code(results), reused=self.reused, computed=computed)


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
    return Run(units, task, out, executor, progress, description).execute()


__all__ = ["ERROR_COLUMNS", "Executor", "InProcess", "Out", "Run", "RunReport", "Task", "Unit", "UnitOutput",
           "UnitResult", "UnitWorker", "errors_path", "errors_table", "exit_code", "results_table", "run"]
