"""What the runner moves: units, their outputs and results, the task protocol, where results go
(:class:`Out`), the run's report, and the tables of errors and results (the vocabulary of
:mod:`probe.runs.runner`)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

ERROR_COLUMNS = ["unit", "kind", "error"]



@dataclass(frozen=True)
class Unit:
    """One piece of work. `key` is stable across runs (the journal's unit name), `group` names what the worker
    must hold loaded (units of one group share a model), `payload` is small and picklable."""

    key: str
    group: Hashable
    payload: Any = None


@dataclass
class UnitOutput:
    """What a task computes for one unit: small and picklable (never attention tensors). `identity`: the
    unit's identity as known after computing (a hub model's commit), when the task could not tell it
    before."""

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
        """Everything that determines the unit's result, hashed (:func:`probe.hashing.identity_hash`);
        computed in the driver before anything is loaded. None: not known before computing (never reused)."""

    def load(self, group: Hashable) -> Any:
        """What the units of one group share (a loaded model); kept by the worker while its next units need
        it."""

    def compute(self, state: Any, unit: Unit) -> UnitOutput:
        """One unit on the loaded state."""

    def rows(self, unit: Unit, result: UnitResult) -> pd.DataFrame | None:
        """The unit's rows of the output table (None: the task has no table)."""

    def owners(self, table: pd.DataFrame) -> pd.Series:
        """The unit key each row of an earlier output table belongs to (rows of keys not in the run are
        kept)."""


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
        ``write(table, finished) -> {path: writer}``: the files to (re)write from the output table (kept rows,
        then every finished unit's rows in unit order) and the finished results (unit order); each writer is
        called with a temporary path by :func:`probe.runs.atomic.write_atomically`.
    read
        ``read() -> table | None``: the earlier output table, whose rows of other units are kept (a foreign
        file is a one-line ProbeError; ``force`` ignores it). None: nothing is kept.
    force
        Recompute every unit (the journal is emptied).
    show
        ``show(unit, result)``, called in the driver for each successful unit as it finishes or is reused (one
        report line on stdout, say).
    written
        ``written(table, finished) -> lines`` said on stderr after the last write.
    finish
        ``finish(table) -> (table, lines)``: applied to the output table before it is written or returned
        (columns that need every unit, e.g. ``same_weights_as``); its lines are said once, after the last
        unit.
    command, noun
        For messages: ``"probe label: reused 2 of 3 model(s) ..."``.
    """

    path: Path | None = None
    write: Callable[[pd.DataFrame, list[tuple[Unit, UnitResult]]], Mapping[Path, Writer]] | None = None
    read: Callable[[], pd.DataFrame | None] | None = None
    force: bool = False
    show: Callable[[Unit, UnitResult], None] | None = None
    written: Callable[[pd.DataFrame, list[tuple[Unit, UnitResult]]], list[str]] | None = None
    finish: Callable[[pd.DataFrame], tuple[pd.DataFrame, list[str]]] | None = None
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


