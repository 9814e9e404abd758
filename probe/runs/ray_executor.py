"""Run work units in-process or on a Ray cluster, with the same unit functions and the same results.

A *unit* is one piece of work with a stable key (a checkpoint to label, a FASTA record or a structure chain to
score). A *task* says how to load what the units of a *group* share (a model: loaded once per worker and kept while
the next units need the same one) and how to run one unit on it; it returns a small result (a pandas table and a few
arrays, never attention tensors). :func:`run_units` runs the units

* in-process (``ray=None``, the default): one loop in this process; Ray is never imported;
* on Ray (``ray="auto"``: a local Ray instance sized to this machine; ``ray="HOST:PORT"``: join a running cluster
  started with ``ray start --head``): one Ray actor per worker, each holding one model at a time.

Either way results come back one unit at a time, as units finish, through ``on_result`` (the command persists them:
journal, output file), a single tqdm bar counts units done / total and failures across the cluster, and the final
list is in unit order, so a Ray run's table equals the in-process run's row for row.

Failures. A unit whose input is bad (a :class:`~probe.errors.ProbeError`: an unreadable structure among hundreds)
is recorded with its one-line error (``kind="input"``) and the run goes on; any other exception is recorded the
same way with ``kind="internal"``. A worker process that dies (SIGKILL, out of memory) is restarted by Ray and its
unit retried (``max_restarts`` / ``max_task_retries``), so a lost worker costs only the unit it was running.

Why Ray Core actors and not Ray Data ``map_batches``: units here are few and heavy (a model per checkpoint, a
protein chain per unit), each result must reach the driver as soon as its unit finishes (to be journalled), a bad
unit must become a row of the errors table rather than fail a dataset, and the scheduler must send units of the
same model to the worker already holding it. A small actor pool with ``ray.wait`` does all of that in a page of code;
Ray Data's streaming executor, block batching and dataset-level error budget add nothing these runs need.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from probe.errors import ProbeError, first_line

ERROR_COLUMNS = ["unit", "kind", "error"]
MAX_RESTARTS = 3  # times Ray restarts a dead worker process
MAX_TASK_RETRIES = 3  # times Ray re-runs the unit a dead worker was running
QUEUE_DEPTH = 2  # units queued per worker, so a worker never waits for the driver between units
AUTO_OBJECT_STORE_BYTES = 256 * 2**20  # --ray auto: only small tables cross processes, so a small object store


class ModelTask(Protocol):
    """What a command gives :func:`run_units`: picklable (it travels to every worker)."""

    def load(self, group: Hashable) -> Any:  # what the units of one group share (a loaded model), kept per worker
        ...

    def run(self, state: Any, payload: Any) -> UnitOutput:  # one unit on it
        ...


@dataclass(frozen=True)
class Unit:
    """One piece of work. `key` is stable across runs (the journal's unit name), `group` names what the worker
    must hold loaded (units of one group share a model), `payload` is small and picklable."""

    key: str
    group: Hashable
    payload: Any = None


@dataclass
class UnitOutput:
    """What a task returns for one unit: small, picklable."""

    table: pd.DataFrame | None = None
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


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

    @property
    def ok(self) -> bool:
        return self.error is None


def errors_table(results: Iterable[UnitResult]) -> pd.DataFrame:
    """unit, kind, error of every failed unit, in the order given."""
    rows = [{"unit": r.key, "kind": r.kind, "error": r.error} for r in results if not r.ok]
    return pd.DataFrame(rows, columns=ERROR_COLUMNS)


def exit_code(results: Iterable[UnitResult]) -> int:
    """0 when every unit succeeded, 2 when some failed on bad input only, 1 when any failed otherwise."""
    kinds = {r.kind for r in results if not r.ok}
    return 0 if not kinds else 2 if kinds == {"input"} else 1


class UnitWorker:
    """Runs units of one task, holding the state (model) of the last group it loaded. Used as is in-process and as
    the class of the Ray actor (one per worker process)."""

    def __init__(self, task: ModelTask, threads: int | None = None) -> None:
        self.task = task
        self.group: Hashable = None
        self.state: Any = None
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
                self.state = self.task.load(unit.group)
                self.group = unit.group
                load_seconds = time.perf_counter() - started
            output = self.task.run(self.state, unit.payload)
        except ProbeError as error:
            return UnitResult(unit.key, error=first_line(error), kind="input", pid=os.getpid(),
                              run_seconds=time.perf_counter() - started)
        except Exception as error:  # noqa: BLE001 - recorded per unit; the run goes on
            if os.environ.get("PROBE_DEBUG"):
                traceback.print_exc()
            return UnitResult(unit.key, error=f"{type(error).__name__}: {first_line(error)}", kind="internal",
                              pid=os.getpid(), run_seconds=time.perf_counter() - started)
        return UnitResult(unit.key, table=output.table, arrays=dict(output.arrays), load_seconds=load_seconds,
                          run_seconds=time.perf_counter() - started - load_seconds, pid=os.getpid())


# ---------------------------------------------------------------------------------------------------------------
# Ray: starting or joining, the actor pool
# ---------------------------------------------------------------------------------------------------------------


def import_ray():
    """Ray, or a one-line ProbeError saying how to install it (it is an optional extra)."""
    try:
        import ray
    except ImportError:
        raise ProbeError('--ray needs Ray: pip install -e ".[ray]" (or pip install "ray>=2.9")') from None
    return ray


def start_ray(address: str = "auto", num_cpus: int | None = None, object_store_bytes: int | None = None) -> bool:
    """Connect this process to Ray: "auto" starts a local instance sized to this machine (``num_cpus`` overrides
    its CPU count), anything else is the address of a running cluster (``ray start --head`` prints it). Returns
    True when this call started or joined Ray (the caller then shuts it down), False when Ray was already up."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                               "logging_level": "ERROR", "configure_logging": True}
    if address == "auto":
        options.update(address="local", num_cpus=num_cpus or os.cpu_count() or 1)
        if object_store_bytes:
            options["object_store_memory"] = object_store_bytes
    else:
        options["address"] = address
    try:
        ray.init(**options)
    except (ConnectionError, ValueError, RuntimeError) as error:
        raise ProbeError(f"cannot start or join Ray at {address!r}: {first_line(error)} (start a cluster with "
                         "`ray start --head`, or use --ray auto)") from None
    return True


def cluster_cpus() -> int:
    ray = import_ray()
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _pick(pending: deque[Unit], group: Hashable) -> Unit | None:
    """The next unit for a worker holding `group`: the first of the same group, else the first pending one."""
    for index, unit in enumerate(pending):
        if unit.group == group:
            del pending[index]
            return unit
    return pending.popleft() if pending else None


def _ray_units(units: Sequence[Unit], task: ModelTask, workers: int, cpus_per_worker: float, gpus_per_worker: float,
               deliver: Callable[[UnitResult], None]) -> None:
    ray = import_ray()
    actor_class = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, max_restarts=MAX_RESTARTS,
                             max_task_retries=MAX_TASK_RETRIES)(UnitWorker)
    threads = max(1, int(cpus_per_worker))
    actors = [actor_class.remote(task, threads) for _ in range(workers)]
    held: list[Hashable] = [None] * workers  # the group each worker will hold after its queued units
    alive = [True] * workers
    pending = deque(units)
    inflight: dict[Any, tuple[int, Unit]] = {}

    def submit(worker: int) -> None:
        unit = _pick(pending, held[worker])
        if unit is not None:
            held[worker] = unit.group
            inflight[actors[worker].run.remote(unit)] = (worker, unit)

    try:
        for _ in range(QUEUE_DEPTH):
            for worker in range(workers):
                submit(worker)
        while inflight:
            (ref,), _ = ray.wait(list(inflight), num_returns=1)
            worker, unit = inflight.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayActorError as error:  # restarts used up: the worker is gone for good
                alive[worker] = False
                result = UnitResult(unit.key, error=f"worker lost: {first_line(error)}", kind="internal")
            except ray.exceptions.RayError as error:
                result = UnitResult(unit.key, error=f"{type(error).__name__}: {first_line(error)}", kind="internal")
            deliver(result)
            if alive[worker]:
                submit(worker)
            elif not any(alive):  # live workers keep taking pending units as theirs finish; with none left:
                while pending:
                    deliver(UnitResult(pending.popleft().key, error="no Ray worker left", kind="internal"))
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)


# ---------------------------------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RayOptions:
    """How a run uses Ray. `address`: "auto" (local instance sized to the machine) or a cluster address."""

    address: str = "auto"
    workers: int | None = None  # None: one per `cpus_per_worker` CPUs of the cluster, at most one per unit
    cpus_per_worker: float = 1.0  # CPUs each worker reserves (its torch threads)
    gpus_per_worker: float = 0.0  # GPUs each worker reserves (--device cuda: 1)
    num_cpus: int | None = None  # "auto" only: CPUs of the local instance (default: this machine's)
    object_store_bytes: int | None = None  # "auto" only: object store size (small results need little)


def run_units(
    units: Sequence[Unit],
    task: ModelTask,
    ray: RayOptions | str | None = None,
    on_result: Callable[[UnitResult], None] | None = None,
    done: dict[str, UnitResult] | None = None,
    progress: bool = True,
    description: str = "units",
) -> list[UnitResult]:
    """Run every unit (in-process when `ray` is None, else on Ray) and return their results in unit order.

    `done`: results of units finished earlier (from the journal), keyed by unit key: they are not run again and
    not passed to `on_result`. `on_result` is called in this process with each new result as its unit finishes
    (completion order), failures included. One tqdm bar on stderr counts units and failures.
    """
    keys = [unit.key for unit in units]
    if len(set(keys)) != len(keys):
        duplicate = next(k for k in keys if keys.count(k) > 1)
        raise ProbeError(f"unit {duplicate!r} is given twice; every unit needs its own key")
    finished: dict[str, UnitResult] = {k: r for k, r in (done or {}).items() if k in set(keys)}
    todo = [unit for unit in units if unit.key not in finished]
    from tqdm import tqdm

    bar = tqdm(total=len(units), initial=len(finished), desc=description, unit="unit", file=sys.stderr,
               dynamic_ncols=True, disable=not progress or len(units) < 2)
    failures = sum(not r.ok for r in finished.values())

    def deliver(result: UnitResult) -> None:
        nonlocal failures
        finished[result.key] = result
        failures += not result.ok
        if on_result is not None:
            on_result(result)
        bar.set_postfix(failed=failures, refresh=False)
        bar.update(1)

    try:
        if ray is None:
            worker = UnitWorker(task)
            for unit in todo:
                deliver(worker.run(unit))
        else:
            options = RayOptions(address=ray) if isinstance(ray, str) else ray
            started = start_ray(options.address, options.num_cpus, options.object_store_bytes)
            try:
                workers = options.workers or max(1, int(cluster_cpus() // max(options.cpus_per_worker, 1e-9)))
                workers = max(1, min(workers, len(todo)))
                if todo:
                    _ray_units(todo, task, workers, options.cpus_per_worker, options.gpus_per_worker, deliver)
            finally:
                if started:
                    import_ray().shutdown()
    finally:
        bar.close()
    return [finished[key] for key in keys if key in finished]


def results_table(results: Iterable[UnitResult]) -> pd.DataFrame:
    """The tables of the successful units concatenated in the order given (empty frame when none)."""
    tables = [r.table for r in results if r.ok and r.table is not None]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


# ---------------------------------------------------------------------------------------------------------------
# Journal glue: finished units survive a killed driver
# ---------------------------------------------------------------------------------------------------------------


def journaled(journal, identity: Callable[[Unit], str], units: Sequence[Unit]
              ) -> tuple[dict[str, UnitResult], Callable[[UnitResult], None]]:
    """(results already in `journal` with their unit's identity, a callback that records each new successful
    result). Failed units are not journalled: a rerun tries them again."""
    identities = {unit.key: identity(unit) for unit in units}
    done = {}
    for unit in units:
        entry = journal.get(unit.key, identities[unit.key])
        if entry is not None:
            done[unit.key] = UnitResult(unit.key, table=entry.table, arrays=dict(entry.arrays), cached=True)

    def record(result: UnitResult) -> None:
        if result.ok:
            journal.put(result.key, identities[result.key], table=result.table, arrays=result.arrays)

    return done, record


def add_ray_options(parser) -> None:
    """--ray [auto|ADDRESS] and --ray-workers N (the flags `probe label` and `probe contacts` share)."""
    parser.add_argument("--ray", nargs="?", const="auto", default=None, metavar="auto|ADDRESS",
                        help="run the units on Ray (pip install -e '.[ray]'): 'auto' (also the value of a bare "
                             "--ray) starts a local Ray sized to this machine, HOST:PORT joins a cluster started "
                             "with `ray start --head`")
    parser.add_argument("--ray-workers", type=int, default=None, metavar="N",
                        help="Ray workers (each loads the model once; default: one per CPU of the cluster)")


def ray_options(args) -> RayOptions | None:
    """The RayOptions the flags describe, or None (in-process) without --ray."""
    if getattr(args, "ray", None) is None:
        return None
    if args.ray_workers is not None and args.ray_workers < 1:
        raise ProbeError("--ray-workers must be at least 1")
    gpus = 1.0 if str(getattr(args, "device", "cpu")).startswith("cuda") else 0.0
    store = AUTO_OBJECT_STORE_BYTES if args.ray == "auto" else None
    return RayOptions(address=args.ray, workers=args.ray_workers, gpus_per_worker=gpus, object_store_bytes=store)
