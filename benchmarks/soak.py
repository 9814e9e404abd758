"""Soak test: `probe label` and `probe contacts` killed with SIGKILL at random moments, again and again, then
the 20-user load test of `probe app` (benchmarks/app_load.py). Bounded: a few minutes on a laptop.

    python benchmarks/soak.py                         # 8 kills per command, then 20 users for 60 s
    python benchmarks/soak.py --kills 4 --users 5 --duration 10   # quicker
    python benchmarks/soak.py --no-app                # kills only

Each command first runs once uninterrupted (the reference). Then runs of the same command are started and
killed with SIGKILL after a random delay (30-100% of the reference's own wall time); after every kill the
output must be absent or whole (never half-written) and the journal must hold at least the units it held
before. A run that completes must leave no temporary file of the killed ones and must equal the reference
(after a run that finished before its kill, the next round starts from nothing). Tiny seeded models are built
in a temporary folder; nothing touches the network. Prints one summary table; exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AMINO = "ACDEFGHIKLMNPQRSTVWY"


@dataclass
class Outcome:
    command: str
    kills: int = 0
    finished_before_kill: int = 0
    # journal units after each kill (a finished run resets)
    units_kept: list[int] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    reference_s: float = 0.0


def probe_process(argv: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.Popen([sys.executable, "-m", "probe.cli", *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def run_to_end(argv: list[str]) -> float:
    started = time.monotonic()
    process = probe_process(argv)
    _, err = process.communicate(timeout=900)
    if process.returncode != 0:
        raise SystemExit(f"probe {' '.join(argv[:1])} failed: {err[-2000:]}")
    return time.monotonic() - started


def journal_units(out: Path) -> int:
    from probe.runs.journal import Journal

    return len(Journal(out).units())


def unreadable(path: Path) -> str | None:
    """None when `path` is absent or a whole file of its format, else the reader's complaint."""
    import numpy as np
    import pandas as pd

    if not path.exists():
        return None
    try:
        if path.suffix == ".npz":
            with np.load(path) as archive:
                sizes = [archive[name].size for name in archive.files]  # reads every member: a cut one fails
                del sizes
        elif path.suffix == ".parquet":
            pd.read_parquet(path)
        else:
            pd.read_csv(path)
    except Exception as error:  # noqa: BLE001 - any failure to read is the finding
        return f"{type(error).__name__}: {error}"
    return None


def equal_outputs(outputs: list[Path], reference: list[Path]) -> str | None:
    """None when every output equals its reference, else what differs."""
    import numpy as np
    import pandas as pd

    for got, expected in zip(outputs, reference, strict=True):
        if not got.exists():
            return f"{got.name} is missing"
        if got.suffix == ".npz":
            with np.load(got) as a, np.load(expected) as b:
                if sorted(a.files) != sorted(b.files):
                    return f"{got.name}: arrays {sorted(a.files)} != {sorted(b.files)}"
                for name in b.files:
                    if not np.array_equal(a[name], b[name], equal_nan=a[name].dtype.kind == "f"):
                        return f"{got.name}: {name} differs"
        else:
            read = pd.read_parquet if got.suffix == ".parquet" else pd.read_csv
            try:
                pd.testing.assert_frame_equal(read(got), read(expected))
            except AssertionError as error:
                return f"{got.name}: {str(error).splitlines()[0]}"
    return None


def soak(command: str, argv: list[str], outputs: list[Path], reference: list[Path], kills: int,
         rng: random.Random) -> Outcome:
    outcome = Outcome(command)
    outcome.reference_s = run_to_end([*argv, *_output_args(command, reference)])
    out_args = _output_args(command, outputs)
    journal_of = outputs[0]
    tries = 0
    while outcome.kills < kills and tries < 4 * kills:
        tries += 1
        before = journal_units(journal_of)
        process = probe_process([*argv, *out_args])
        delay = rng.uniform(0.3, 1.0) * outcome.reference_s  # the first ~30% is mostly start-up
        try:
            process.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
            outcome.kills += 1
            for path in outputs:
                problem = unreadable(path)
                if problem:
                    outcome.failures.append(f"kill {outcome.kills}: {path.name} is half-written: {problem}")
            units = journal_units(journal_of)
            outcome.units_kept.append(units)
            if units < before:
                outcome.failures.append(f"kill {outcome.kills}: journal went from {before} to {units} units")
            continue
        if process.returncode != 0:
            outcome.failures.append(f"a resumed run exited {process.returncode}: "
                                    f"{process.stderr.read()[-500:]}")
        outcome.finished_before_kill += 1
        check_no_leftovers(outputs, outcome)
        difference = equal_outputs(outputs, reference)
        if difference:
            outcome.failures.append(f"finished run differs from the reference: {difference}")
        for path in outputs:  # start the next round from nothing
            path.unlink(missing_ok=True)
            shutil.rmtree(path.parent / f".{path.name}.parts", ignore_errors=True)
    run_to_end([*argv, *out_args])
    check_no_leftovers(outputs, outcome)
    difference = equal_outputs(outputs, reference)
    if difference:
        outcome.failures.append(f"the completed run differs from the reference: {difference}")
    return outcome


def check_no_leftovers(outputs: list[Path], outcome: Outcome) -> None:
    """After a run that completed, no temporary file of any killed run may remain beside the outputs."""
    folder = outputs[0].parent
    leftovers = [p.name for p in folder.iterdir() if p.is_file() and any(p.name.startswith(f".{o.name}.")
                                                                          for o in outputs)]
    if leftovers:
        outcome.failures.append(f"temporary files left after a completed run: {leftovers}")


def _output_args(command: str, outputs: list[Path]) -> list[str]:
    if command == "label":
        return ["--out", str(outputs[0])]
    return ["--out", str(outputs[0]), "--heads-out", str(outputs[1])]


def app_load(users: int, duration: float) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "app_load.py"), "--users", str(users),
                             "--duration", str(duration)], capture_output=True, text=True, env=env,
                             timeout=1200)
    return result.returncode, (result.stdout + result.stderr[-2000:]).strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=8, help="SIGKILLs per command (default 8)")
    parser.add_argument("--users", type=int, default=20, help="app load test users (default 20)")
    parser.add_argument("--duration", type=float, default=60.0, help="app load test seconds (default 60)")
    parser.add_argument("--no-app", action="store_true", help="skip the app load test")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not (1 <= args.kills <= 100 and 1 <= args.users <= 100 and 1 <= args.duration <= 600):
        parser.error("bounded: 1..100 kills, 1..100 users, 1..600 s")
    sys.path.insert(0, str(REPO))
    from probe.zoo.tiny import save_tiny

    rng = random.Random(args.seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="probe-soak-") as folder:
        work = Path(folder)
        text_models = [str(save_tiny("gpt2", work / f"gpt2-{seed}", seed=seed)) for seed in range(3)]
        esm = str(save_tiny("esm", work / "esm", seed=0))
        fasta = work / "set.fa"
        fasta.write_text("".join(f">p{i}\n{''.join(rng.choice(AMINO) for _ in range(rng.randint(30, 90)))}\n"
                                 for i in range(24)))
        label_argv = ["label", *[part for model in text_models for part in ("--model", model)], "--examples",
                      "8", "--bootstrap", "50", "--types", "previous_token,induction", "--seq-len", "16",
                      "--ablate", "none"]
        contacts_argv = ["contacts", "--model", esm, "--fasta", str(fasta)]
        outcomes = [
            soak("label", label_argv, [work / "labels.csv"], [work / "labels-reference.csv"], args.kills,
                 rng),
            soak("contacts", contacts_argv, [work / "maps.npz", work / "heads.parquet"],
                 [work / "maps-reference.npz", work / "heads-reference.parquet"], args.kills, rng),
        ]
    print(f"{'command':<10}{'kills':>7}{'finished':>10}{'ref s':>8}{'units kept after kills':>26}  failures")
    for outcome in outcomes:
        kept = ",".join(str(n) for n in outcome.units_kept)
        print(f"{outcome.command:<10}{outcome.kills:>7}{outcome.finished_before_kill:>10}{outcome.reference_s:>8.1f}"
              f"{kept:>26}  {len(outcome.failures)}")
        for failure in outcome.failures:
            print(f"  {outcome.command}: {failure}")
    failed = any(outcome.failures for outcome in outcomes)
    if not args.no_app:
        code, report = app_load(args.users, args.duration)
        print(report)
        failed = failed or code != 0
    print(f"soak: {'FAILED' if failed else 'ok'} in {time.monotonic() - started:.0f} s; "
          f"{sum(o.kills for o in outcomes)} SIGKILLs survived")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
