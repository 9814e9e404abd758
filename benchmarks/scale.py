"""Benchmark: the same checkpoint sweep in-process and on a local Ray instance with 1 and 2 workers, and a
projection to N machines from the measured costs.

The sweep: `probe label` of every checkpoint of a zoo training run through the runner the command uses
(probe.runs.runner.run with LabelTask units, one checkpoint per unit, default LabelConfig; nothing persisted).
With no --checkpoints, a 400-step run of the induction organism with a checkpoint every 50 steps (9
checkpoints) is trained first into a temporary folder (~15 s, not timed).

Measured (each a separate phase, in this order):

  in-process   run(executor=InProcess()), torch on 1 thread (what one Ray worker gets): wall time; per unit
  its load
               and its labelling time
  ray start    ray.init(address="local", num_cpus=2, 256 MB object store, no dashboard): wall time
  actor start  W actors created and answering (a Python worker process each, importing probe + torch): wall
  time ray W=1, 2   run(executor=RayExecutor) on the running instance with W workers (actor start included,
  ray.init
               not): wall time

Projection. With U units of equal cost t_u = load + label (measured in-process), W = M·c workers (M machines,
c workers each), Ray start/join t_r, actor start t_a (workers start in parallel) and a per-unit
driver/transfer overhead t_d (serial in the driver). t_u is a worker's median unit time in the W=1 Ray run
(its first unit also pays imports and warm-up, counted in t_a); t_d is timed on 60 no-op units that each
return a real label table (between the first and the last result, one worker):

    T(M) = t_r + t_a + ceil(U / W)·t_u + U·t_d         speed-up S(M) = U·t_u / T(M)

Assumptions: units cost the same; a worker's CPU is not shared (this machine's 2 cores are shared by other
jobs, so its numbers are noisy); every machine reads the checkpoints locally (shared file system or its own
hub cache); result tables are tens of kB, so the network is not the bottleneck. Run:

    python benchmarks/scale.py                    # trains 9 small checkpoints, then the four phases
    python benchmarks/scale.py --checkpoints DIR  # DIR/step-*/ from probe train NAME --checkpoint-steps
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path


def checkpoint_dirs(directory: Path) -> list[str]:
    found = sorted((p for p in directory.glob("step-*") if (p / "config.json").is_file()),
                   key=lambda p: int(p.name.split("-", 1)[1]))
    return [p.name for p in found]


def train_checkpoints(out: Path, steps: int, every: int) -> None:
    from probe.training.train import train

    train("induction", 0, out, overrides={"steps": steps}, label=False,
          checkpoint_steps=tuple(range(0, steps + 1, every)))


def projection(units: int, t_unit: float, t_ray: float, t_actor: float, t_driver: float,
               machines: list[int], per_machine: int) -> list[dict]:
    rows = []
    for m in machines:
        workers = m * per_machine
        total = t_ray + t_actor + math.ceil(units / workers) * t_unit + units * t_driver
        rows.append({"machines": m, "workers": workers, "seconds": total, "speedup": units * t_unit / total})
    return rows


class EchoTask:
    """A unit that returns a label table it already holds: what one unit costs Ray and the driver, minus the
    work."""

    def __init__(self, table) -> None:
        self.table = table

    def identity(self, unit):
        return None

    def load(self, group):
        return None

    def compute(self, state, unit):
        from probe.runs.runner import UnitOutput

        return UnitOutput(table=self.table.copy())

    def rows(self, unit, result):
        return result.table

    def owners(self, table):
        return table["model"]


def run_units(units, task, ray=None, on_result=None):
    """The results of one runner run, nothing persisted (`on_result(result)` as each unit finishes)."""
    from probe.runs.ray_executor import RayExecutor
    from probe.runs.runner import InProcess, Out, run

    show = (lambda unit, result: on_result(result)) if on_result else None
    executor = RayExecutor(ray) if ray is not None else InProcess()
    return run(units, task, Out(show=show), executor, progress=False).results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=Path, help="folder of step-N/ checkpoints (default: train 9)")
    parser.add_argument("--steps", type=int, default=400, help="training steps when training (default 400)")
    parser.add_argument("--every", type=int, default=50,
                        help="checkpoint interval when training (default 50)")
    parser.add_argument("--project-units", type=int, default=154,
                        help="units in the projection (Pythia: 154)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)

    import torch

    from probe.heads.label import LabelConfig
    from probe.runs.checkpoints import make_checkpoint
    from probe.runs.ray_executor import RayOptions, start_ray, stop_ray
    from probe.runs.runner import UnitWorker
    from probe.runs.tasks import LabelTask, label_units

    with tempfile.TemporaryDirectory() as scratch:
        directory = args.checkpoints
        if directory is None:
            directory = Path(scratch) / "induction"
            print(f"training {args.steps} steps, a checkpoint every {args.every} ...", file=sys.stderr)
            train_checkpoints(directory, args.steps, args.every)
        names = checkpoint_dirs(directory)
        if not names:
            parser.error(f"{directory} holds no step-N/ checkpoint directories")
        units = label_units([make_checkpoint(str(directory), name) for name in names])
        task = LabelTask(LabelConfig())
        n = len(units)

        torch.set_num_threads(1)
        started = time.perf_counter()
        local = run_units(units, task)
        t_local = time.perf_counter() - started
        loads = [r.load_seconds for r in local]
        runs = [r.run_seconds for r in local]

        import ray

        started = time.perf_counter()
        start_ray("auto", num_cpus=2, object_store_bytes=256 * 2**20)
        t_ray = time.perf_counter() - started
        try:
            actor_start = {}
            for workers in (1, 2):
                remote = ray.remote(num_cpus=1)(UnitWorker)
                started = time.perf_counter()
                actors = [remote.remote(task, 1) for _ in range(workers)]
                ray.get([actor.pid.remote() for actor in actors])
                actor_start[workers] = time.perf_counter() - started
                for actor in actors:
                    ray.kill(actor)
            # the driver's cost per unit: no-op units returning a real label table, one worker, timed between
            # the first and the last result (actor start excluded)
            from probe.runs.runner import Unit

            stamps: list[float] = []
            echo = [Unit(f"echo{i}", None, i) for i in range(60)]
            run_units(echo, EchoTask(local[0].table), ray=RayOptions(workers=1),
                      on_result=lambda result: stamps.append(time.perf_counter()))
            t_driver = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
            on_ray, worker_units = {}, {}
            for workers in (1, 2):
                started = time.perf_counter()
                results = run_units(units, task, ray=RayOptions(workers=workers))
                on_ray[workers] = time.perf_counter() - started
                assert all(r.ok for r in results), [r.error for r in results if not r.ok]
                worker_units[workers] = results
        finally:
            stop_ray()

    # worker-side costs from the W=1 run: a worker's first unit also pays its imports and warm-up
    single = worker_units[1]
    first = single[0].load_seconds + single[0].run_seconds
    rest = [r.load_seconds + r.run_seconds for r in single[1:]]
    t_unit_worker = statistics.median(rest)
    t_warm = max(0.0, first - t_unit_worker)
    t_rest = on_ray[1] - actor_start[1] - t_warm - n * (t_unit_worker + t_driver)  # unexplained (contention)
    numbers = {
        "units": n, "in_process_s": t_local, "unit_load_s": statistics.mean(loads),
        "unit_label_s": statistics.mean(runs), "ray_start_s": t_ray, "actor_start_s": actor_start,
        "ray_s": on_ray, "worker_unit_s": t_unit_worker, "worker_warmup_s": t_warm,
        "driver_overhead_per_unit_s": t_driver, "unexplained_w1_s": t_rest,
    }
    print(f"\n{n} checkpoints (units), torch 1 thread per worker, 2-core machine shared with other jobs\n")
    print("| run | wall s | units/s | vs in-process |")
    print("|---|---|---|---|")
    print(f"| in-process | {t_local:.1f} | {n / t_local:.2f} | 1.00 |")
    for workers in (1, 2):
        print(f"| Ray, {workers} worker{'s' if workers > 1 else ''} (+ {t_ray:.1f} s ray.init) | "
              f"{on_ray[workers]:.1f} | {n / on_ray[workers]:.2f} | {t_local / on_ray[workers]:.2f} |")
    print(f"\nin-process per unit: model load {statistics.mean(loads):.3f} s + labelling "
          f"{statistics.mean(runs):.3f} s; ray.init {t_ray:.1f} s; actor start {actor_start[1]:.1f} s (1 "
          f"actor), {actor_start[2]:.1f} s (2 started together); in a Ray worker: first unit +{t_warm:.1f} s "
          f"warm-up (imports), then {t_unit_worker:.2f} s per unit; Ray + driver per unit (no-op units) "
          f"{t_driver * 1000:.1f} ms; W=1 wall not explained by these {t_rest:.1f} s")
    rows = []
    for label, cost in (("measured", t_unit_worker), ("if a unit cost 60 s", 60.0)):
        projected = projection(args.project_units, cost, t_ray, actor_start[1] + t_warm, t_driver,
                               [1, 2, 4, 8, 16], 8)
        print(f"\nprojection ({label}): U = {args.project_units} units of {cost:.2f} s, 8 workers per "
              f"machine, t_r {t_ray:.1f} s, t_a {actor_start[1] + t_warm:.1f} s, t_d {t_driver:.3f} s:\n")
        print("| machines | workers | T s | speed-up vs 1 process |")
        print("|---|---|---|---|")
        for row in projected:
            print(f"| {row['machines']} | {row['workers']} | {row['seconds']:.1f} | {row['speedup']:.1f} |")
            rows.append({"unit_s": cost, **row})
    numbers["projection"] = rows
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
