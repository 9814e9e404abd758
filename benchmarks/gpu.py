"""The GPU check's stages and its one summary (run by benchmarks/gpu.sh, which picks the Python first).

Stages, each under a hard time limit inside one overall budget (default 470 s: the whole command within 8
minutes), run in order; a stage that fails or runs out of time is reported and the next one still runs:

  device    torch, CUDA and the device's name (a dry run: the CPU); the repository's engine imports
  tests     `pytest -m gpu`: the CUDA kernels' log-sum-exp against torch (flash without a mask in bf16/fp16,
            memory-efficient with one, key counts the kernel's alignment would refuse), and the engine on CUDA
            against eager attention (tiny models, every architecture of the coverage list, reduced precision)
  capture   benchmarks/capture.py per length, 1K / 4K / 16K / 32K tokens, GPT-2-small shape in bfloat16: the
            plain sdpa forward (the flash kernel) against the engine with dense α of all 144 heads and with a
            row-reduction sink; the device's peak memory per variant

A dry run (--dry-run) runs the same stages on the CPU with tiny lengths and one layer (the gpu tests are then
collected and skip), so the plumbing cannot rot: tests/project/test_gpu_script.py runs it in the default
suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = (1024, 4096, 16384, 32768)
DRY_LENGTHS = (32, 64)
# seconds: the most each stage may take (a length's capture run: its own limit); a dry run's are wide (it
# checks the plumbing, not the speed, and a shared CPU may be slow)
LIMITS = {"device": 60, "tests": 180, 1024: 40, 4096: 45, 16384: 60, 32768: 90}
DRY_LIMITS = {"device": 300, "tests": 400, 32: 300, 64: 300}
RESERVE = 5  # seconds kept for the summary


class Budget:
    """The overall deadline; each stage gets the smaller of its own limit and what is left."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def grant(self, limit: float) -> float:
        return max(0.0, min(limit, self.deadline - time.monotonic() - RESERVE))


def run_stage(command: list[str], limit: float) -> tuple[str, float, str]:
    """(status, seconds, output) of one stage: "ok", "failed (exit N)", "timed out after S s" or "skipped".
    The stage runs in its own process group, and a stage out of time is ended with all its children (the
    capture benchmark's own subprocesses too), so that nothing of it runs on into the next stage."""
    if limit < 1:
        return "skipped (no time left in the budget)", 0.0, ""
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return f"timed out after {limit:.0f} s", time.monotonic() - started, output or ""
    status = "ok" if process.returncode == 0 else f"failed (exit {process.returncode})"
    return status, time.monotonic() - started, output


DEVICE_PROBE = """
import json, torch
import probe.engine  # the repository's engine imports with this torch and transformers
cuda = torch.cuda.is_available()
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "available": cuda}
if cuda:
    props = torch.cuda.get_device_properties(0)
    info.update(name=props.name, memory_gib=round(props.total_memory / 2**30, 1),
                capability=".".join(map(str, torch.cuda.get_device_capability(0))))
print("device:", json.dumps(info))
"""


def device_stage(budget: Budget, dry: bool) -> tuple[str, float, dict]:
    limit = (DRY_LIMITS if dry else LIMITS)["device"]
    status, seconds, output = run_stage([sys.executable, "-c", DEVICE_PROBE], budget.grant(limit))
    info = {}
    if status != "ok":
        status += f": {(output.strip().splitlines() or [''])[-1][:160]}"
    else:
        info = json.loads(next(line for line in output.splitlines() if line.startswith("device: "))[8:])
        if not info["available"] and not dry:
            status = "failed (torch sees no CUDA device)"
    return status, seconds, info


def tests_stage(budget: Budget, dry: bool, scratch: Path) -> tuple[str, float, dict]:
    report = scratch / "gpu-tests.xml"
    limit = budget.grant((DRY_LIMITS if dry else LIMITS)["tests"])
    # only the files that hold gpu tests: collecting the whole suite would import what the GPU stages do not
    # need (the dashboard's and the proteins' packages), which a GPU machine's Python may lack
    files = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py")
                   if "mark.gpu" in path.read_text(encoding="utf-8"))
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-p", "no:dash",
               "-rfEs", f"--junitxml={report}", *files]
    status, seconds, output = run_stage(command, limit)
    counts = {"passed": 0, "failed": 0, "skipped": 0, "problems": []}
    if report.is_file():
        for case in ElementTree.parse(report).getroot().iter("testcase"):
            name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
            outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
            if outcome is None:
                counts["passed"] += 1
            elif outcome.tag == "skipped":
                counts["skipped"] += 1
            else:
                counts["failed"] += 1
                counts["problems"].append(f"{name}: {(outcome.get('message') or '').splitlines()[0][:160]}")
    elif output:
        counts["problems"].append(output.strip().splitlines()[-1][:200])
    if status.startswith("failed") and counts["failed"] and not counts["problems"]:
        counts["problems"].append("see pytest's output")
    if status.startswith("failed (exit 5)"):  # pytest: no tests collected
        counts["problems"].append("no gpu-marked test was collected")
    return status, seconds, counts


def capture_stage(budget: Budget, dry: bool, scratch: Path) -> tuple[str, float, dict]:
    """One benchmarks/capture.py run per length, each in its own time limit, so a slow length costs only
    itself."""
    lengths, limits = (DRY_LENGTHS, DRY_LIMITS) if dry else (LENGTHS, LIMITS)
    results, statuses, total = {}, [], 0.0
    for n in lengths:
        out = scratch / f"capture-{n}.json"
        if dry:  # the plumbing only: one layer, one round, no peak children
            flags = ["--device", "cpu", "--dtype", "bfloat16", "--layers", "1", "--repeats", "1",
                     "--no-peaks"]
        else:
            # α blocks of up to 256 MiB: the engine's longest blocks (128 rows) at 32K with 12 heads
            flags = ["--device", "cuda", "--dtype", "bfloat16", "--repeats", "3", "--eager-limit-gib", "16",
                     "--block-mib", "256"]
        command = [sys.executable, str(ROOT / "benchmarks" / "capture.py"), "--lengths", str(n),
                   "--json", str(out), *flags]
        status, seconds, output = run_stage(command, budget.grant(limits[n]))
        total += seconds
        statuses.append(status)
        if status == "ok" and out.is_file():
            raw = json.loads(out.read_text())
            results[n] = {"timings": raw["timings"][str(n)], "peaks": raw["peaks"][str(n)]}
        else:
            results[n] = {"error": f"{status}: {(output.strip().splitlines() or [''])[-1][:160]}"}
    ok = sum(status == "ok" for status in statuses)
    return ("ok" if ok == len(lengths) else f"{ok} of {len(lengths)} lengths"), total, results


def _median(values) -> float:
    return statistics.median(values) if values else float("nan")


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}" if value is not None and base else "—"


def capture_rows(results: dict) -> list[str]:
    """A markdown table: medians, ratios to plain, and the device's peak per variant."""
    rows = ["| N | plain ms | engine ms | reduced ms | eager ms | engine/plain | reduced/plain | "
            "eager/plain | plain peak MiB | engine/plain peak | reduced/plain peak |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, result in results.items():
        if "error" in result:
            rows.append(f"| {n} | {result['error']} |" + " |" * 10)
            continue
        ms = {variant: _median(seconds) * 1e3 for variant, seconds in result["timings"]["times"].items()}
        peaks = {variant: entry.get("peak_mib") for variant, entry in result["peaks"].items()
                 if isinstance(entry, dict)}
        plain, eager, plain_peak = ms["plain"], ms.get("eager"), peaks.get("plain")
        rows.append(f"| {n} | {plain:.1f} | {ms['engine']:.1f} | {ms['reduced']:.1f} | "
                    f"{'not run' if eager is None else f'{eager:.1f}'} | {_ratio(ms['engine'], plain)} | "
                    f"{_ratio(ms['reduced'], plain)} | {_ratio(eager, plain)} | "
                    f"{'—' if plain_peak is None else f'{plain_peak:.0f}'} | "
                    f"{_ratio(peaks.get('engine'), plain_peak)} | "
                    f"{_ratio(peaks.get('reduced'), plain_peak)} |")
    return rows


def summary(dry: bool, stages: list[tuple[str, str, float]], device: dict, tests: dict, capture: dict,
            environment: str, started: float) -> str:
    lines = ["", "=" * 78, f"GPU check{' (DRY RUN on the CPU: plumbing only, no CUDA)' if dry else ''} — "
             f"{time.monotonic() - started:.0f} s in all", "=" * 78]
    if environment:
        lines.append(f"python: {environment}")
    if device:
        where = (f"{device.get('name')} ({device.get('memory_gib')} GiB, sm {device.get('capability')})"
                 if device.get("available") else "no CUDA device")
        lines.append(f"torch {device.get('torch')}, CUDA {device.get('cuda')}: {where}")
    lines += ["", "| stage | status | seconds |", "|---|---|---|"]
    lines += [f"| {name} | {status} | {seconds:.0f} |" for name, status, seconds in stages]
    if tests:
        lines += ["", f"gpu tests: {tests['passed']} passed, {tests['failed']} failed, "
                      f"{tests['skipped']} skipped"]
        lines += [f"  - {problem}" for problem in tests["problems"][:12]]
    if capture:
        lines += ["", "capture (GPT-2-small shape, 12 layers × 12 heads; medians of alternating rounds):"
                  if not dry else "capture (dry run: 1 layer, 1 round, bfloat16 on the CPU, no peaks):"]
        lines += capture_rows(capture)
    verdict = all(status == "ok" for _, status, _ in stages) and not tests.get("failed")
    lines += ["", f"verdict: {'every stage ok' if verdict else 'NOT all ok (see above)'}", "=" * 78]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true",
                        help="the plumbing on a CPU: tiny lengths, one layer")
    parser.add_argument("--budget", type=float, default=470.0, help="seconds for all stages (default 470)")
    parser.add_argument("--environment", default="", help="what gpu.sh found and installed (one line)")
    parser.add_argument("--stage", action="append", default=[],
                        help="NAME=STATUS=SECONDS of a stage gpu.sh ran before this script")
    args = parser.parse_args()
    started = time.monotonic()
    budget = Budget(args.budget)
    stages = []
    for stage in args.stage:
        name, status, seconds = stage.split("=", 2)
        stages.append((name, status, float(seconds)))
    with tempfile.TemporaryDirectory(prefix="probe-gpu-") as scratch:
        status, seconds, device = device_stage(budget, args.dry_run)
        stages.append(("device", status, seconds))
        tests, capture = {}, {}
        if status == "ok":
            status, seconds, tests = tests_stage(budget, args.dry_run, Path(scratch))
            stages.append(("gpu tests", status, seconds))
            status, seconds, capture = capture_stage(budget, args.dry_run, Path(scratch))
            stages.append(("capture benchmark", status, seconds))
        else:
            stages += [("gpu tests", "skipped (the device stage failed)", 0.0),
                       ("capture benchmark", "skipped (the device stage failed)", 0.0)]
        print(summary(args.dry_run, stages, device, tests, capture, args.environment, started), flush=True)
    ok = all(status == "ok" for _, status, _ in stages) and not tests.get("failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
