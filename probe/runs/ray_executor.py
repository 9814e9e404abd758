"""The Ray executor of :func:`probe.runs.runner.run`: the same units on a Ray actor pool, results as they
finish.

``RayExecutor(RayOptions(address="auto"))`` starts a local Ray instance sized to this machine;
``address="HOST:PORT"`` joins a running cluster started with ``ray start --head``. One Ray actor per worker,
each holding one model at a time (units of the same group go to the worker already holding it); each result
reaches the driver as its unit finishes, so the runner journals it at once. A worker process that dies
(SIGKILL, out of memory) is restarted by Ray and its unit retried (``max_restarts`` / ``max_task_retries``),
so a lost worker costs only the unit it was running.

Failing fast and quietly. Before Ray is touched, joining an address checks within :data:`CONNECT_TIMEOUT` s
that a Ray cluster answers there (a TCP connect, then the HTTP/2 preface its GCS, a gRPC server, answers), so
an unreachable or wrong address is one line (:class:`~probe.errors.ProbeError`, exit 2) within seconds, never
Ray's client retrying for a minute with a screen of ``rpc_client`` warnings. Ray's own logging (its Python
loggers, its C++ core at error level, worker output) is kept off stderr.

Nothing outlives the driver. A local instance gets no dashboard, and a watchdog process
(:mod:`~probe.runs.ray_watchdog`) holds the reading end of a pipe whose writing end only the driver has: when
the driver exits — normally, by an exception, or SIGKILLed — the pipe closes and the watchdog ends every
process of that Ray session (raylet, GCS, the dashboard and runtime-env agents, workers) within a second or
two.

Why Ray Core actors and not Ray Data ``map_batches``: units here are few and heavy (a model per checkpoint, a
protein chain per unit), each result must reach the driver as soon as its unit finishes (to be journalled), a
bad unit must become a row of the errors table rather than fail a dataset, and the scheduler must send units
of the same model to the worker already holding it. A small actor pool with ``ray.wait`` does all of that in a
page of code.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from probe.errors import ProbeError, first_line
from probe.runs.runner import Task, Unit, UnitResult, UnitWorker

MAX_RESTARTS = 3  # times Ray restarts a dead worker process
MAX_TASK_RETRIES = 3  # times Ray re-runs the unit a dead worker was running
QUEUE_DEPTH = 2  # units queued per worker, so a worker never waits for the driver between units
# address "auto": only small tables cross processes, so a small object store
AUTO_OBJECT_STORE_BYTES = 256 * 2**20
CONNECT_TIMEOUT = 3.0  # seconds: the TCP connect to a cluster address, and its answer to the HTTP/2 preface
# Read by Ray at start: no usage-stats reporting. (Not RAY_BACKEND_LOG_LEVEL: setting it makes Ray's C++ core
# say so on stderr. And never a shorter GCS reconnect timeout: when it runs out, Ray's core ends the whole
# process without a message; a bad address is caught before Ray by check_reachable instead.)
_RAY_ENVIRONMENT = {"RAY_USAGE_STATS_ENABLED": "0"}
_watchdog: dict[str, Any] = {}  # the running watchdog and the pipe end only this driver holds


@dataclass(frozen=True)
class RayOptions:
    """How a run uses Ray. `address`: "auto" (local instance sized to the machine) or a cluster's
    HOST:PORT."""

    address: str = "auto"
    workers: int | None = None  # None: one per `cpus_per_worker` CPUs of the cluster, at most one per unit
    cpus_per_worker: float = 1.0  # CPUs each worker reserves (its torch threads)
    gpus_per_worker: float = 0.0  # GPUs each worker reserves (--device cuda: 1)
    num_cpus: int | None = None  # "auto" only: CPUs of the local instance (default: this machine's)
    object_store_bytes: int | None = AUTO_OBJECT_STORE_BYTES  # "auto" only: object store size


def import_ray():
    """Ray, or a one-line ProbeError saying how to install it (it is an optional extra)."""
    try:
        import ray  # optional extra (--ray): imported only when asked for
    except ImportError:
        raise ProbeError('--ray needs Ray: pip install -e ".[ray]" (or pip install "ray>=2.9")') from None
    return ray


def _quiet() -> None:
    """Ray's Python loggers to errors only, and its C++ core to fatal (set before Ray starts its core
    worker)."""
    for name, value in _RAY_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    for name in ("ray", "ray.worker", "ray._private", "ray.util", "ray.data"):
        logging.getLogger(name).setLevel(logging.ERROR)


def split_address(address: str) -> tuple[str, int]:
    """"HOST:PORT" -> (host, port); one-line ProbeError for anything else."""
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ProbeError(f"--ray {address!r}: give auto, or the HOST:PORT of a cluster (`ray start --head` "
                         "prints it)")
    return host.strip("[]"), int(port)


# + empty SETTINGS
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """A bounded check that a Ray cluster answers at `address`, before Ray is touched: a TCP connect, then the
    HTTP/2 preface that Ray's GCS (a gRPC server) answers with a SETTINGS frame. One-line ProbeError when
    nothing listens there, or something that is not a gRPC server does (it would leave Ray's own client
    retrying)."""
    host, port = split_address(address)
    hint = "(start a cluster with `ray start --head`, or use --ray auto)"
    try:
        with socket.create_connection((host, port), timeout=timeout) as connection:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return  # a TLS cluster: the handshake is Ray's own
            connection.sendall(_HTTP2_PREFACE)
            answer = b""
            while len(answer) < 9:
                chunk = connection.recv(9 - len(answer))
                if not chunk:
                    break
                answer += chunk
    except OSError as error:
        reason = "timed out" if isinstance(error, TimeoutError) else (error.strerror or str(error))
        if isinstance(error, TimeoutError) and "connection" in locals():
            reason = ("something listens there but does not answer as a Ray cluster does within "
                      f"{timeout:.0f} s")
        raise ProbeError(f"cannot join Ray at {address}: {reason} {hint}") from None
    # an HTTP/2 frame header: 3 bytes length, 1 byte type (4: SETTINGS)
    if len(answer) < 9 or answer[3] != 0x04:
        raise ProbeError(f"cannot join Ray at {address}: what listens there is not a Ray cluster {hint}")


def _start_watchdog(session_dir: str) -> None:
    """A process that ends every process of this Ray session once this driver is gone (see the module doc)."""
    read_end, write_end = os.pipe()  # both non-inheritable: Ray's processes never hold the writing end
    try:
        process = subprocess.Popen([sys.executable, "-m", "probe.runs.ray_watchdog", session_dir,
                                    str(os.getpid())], stdin=read_end,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
    finally:
        os.close(read_end)
    _watchdog.update(process=process, pipe=write_end)


def _stop_watchdog(wait: float = 10.0) -> None:
    """Close the pipe: the watchdog ends what is left of the session, then exits (waited for up to `wait`
    s)."""
    pipe, process = _watchdog.pop("pipe", None), _watchdog.pop("process", None)
    if pipe is not None:
        os.close(pipe)
    if process is not None:
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass


def start_ray(address: str = "auto", num_cpus: int | None = None,
              object_store_bytes: int | None = None) -> bool:
    """Connect this process to Ray: "auto" starts a local instance sized to this machine (``num_cpus``
    overrides its CPU count), anything else is the HOST:PORT of a running cluster. Returns True when this call
    started or joined Ray (the caller then calls :func:`stop_ray`), False when Ray was already up."""
    # before Ray is imported: its C++ core reads them when it loads
    for name, value in _RAY_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    ray = import_ray()
    if ray.is_initialized():
        return False
    _quiet()
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                               "logging_level": logging.ERROR, "configure_logging": True}
    if address == "auto":
        options.update(address="local", num_cpus=num_cpus or os.cpu_count() or 1)
        if object_store_bytes:
            options["object_store_memory"] = object_store_bytes
        what = "cannot start a local Ray instance"
    else:
        check_reachable(address)
        options["address"] = address
        what = f"cannot join Ray at {address}"
    try:
        # In this thread, never a helper thread: Ray ties the processes it starts to the starting thread's
        # life (PR_SET_PDEATHSIG), so a local instance started from a thread that ends dies with it.
        context = ray.init(**options)
    except Exception as error:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError, ...
        raise ProbeError(f"{what}: {first_line(error)} (start a cluster with `ray start --head`, or use "
                         "--ray auto)") from None
    session_dir = (getattr(context, "address_info", None) or {}).get("session_dir")
    if address == "auto" and session_dir:
        _start_watchdog(session_dir)
    return True


def stop_ray() -> None:
    """Shut down what :func:`start_ray` started or joined, and let the watchdog end any straggler."""
    import_ray().shutdown()
    _stop_watchdog()


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


def _ray_units(units: Sequence[Unit], task: Task, workers: int, cpus_per_worker: float,
               gpus_per_worker: float, deliver: Callable[[UnitResult], None]) -> None:
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
                result = UnitResult(unit.key, error=f"{type(error).__name__}: {first_line(error)}",
                                    kind="internal")
            deliver(result)
            if alive[worker]:
                submit(worker)
            elif not any(alive):  # live workers keep taking pending units as theirs finish; with none left:
                while pending:
                    deliver(UnitResult(pending.popleft().key, error="no Ray worker left", kind="internal"))
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)


@dataclass
class RayExecutor:
    """An executor of :func:`probe.runs.runner.run` on Ray (see the module doc). Starts or joins Ray for the
    run (``prepare``) and shuts it down after (``close``), unless Ray was already initialised in this process
    (then it is left running)."""

    options: RayOptions = RayOptions()  # noqa: RUF009 - frozen
    _state: dict = field(default_factory=dict, repr=False)

    def prepare(self) -> None:
        if "started" not in self._state:
            options = self.options
            store = options.object_store_bytes if options.address == "auto" else None
            self._state["started"] = start_ray(options.address, options.num_cpus, store)

    def close(self) -> None:
        if self._state.pop("started", False):
            stop_ray()

    def map(self, task: Task, units: Sequence[Unit], deliver: Callable[[UnitResult], None]) -> None:
        prepared = "started" in self._state
        self.prepare()
        try:
            options = self.options
            workers = options.workers or max(1, int(cluster_cpus() // max(options.cpus_per_worker, 1e-9)))
            workers = max(1, min(workers, len(units)))
            if units:
                _ray_units(units, task, workers, options.cpus_per_worker, options.gpus_per_worker, deliver)
        finally:
            if not prepared:
                self.close()


__all__ = ["RayExecutor", "RayOptions", "check_reachable", "cluster_cpus", "import_ray", "split_address",
           "start_ray", "stop_ray"]
