"""benchmarks/gpu.sh, the one-command GPU check: its CPU dry run goes through every stage and prints the
summary (so the script cannot rot between the days a GPU is lent); on a machine without CUDA the real run
refuses in one line instead of passing; a stage out of time is ended with its children; the summary's ratios
are the medians' ratios."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu.sh"


def _gpu_module():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PROBE_GPU_PYTHON": sys.executable, "OMP_NUM_THREADS": "1", **env}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=1500, env=env)


def test_the_dry_run_goes_through_every_stage_and_prints_one_summary():
    started = time.monotonic()
    done = _run("--dry-run")
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "GPU check (DRY RUN on the CPU" in out and "verdict: every stage ok" in out
    for stage in ("python", "needs", "device", "gpu tests", "capture benchmark"):
        assert re.search(rf"^\| {stage} \| ok \| \d+ \|$", out, re.M), stage
    tests = re.search(r"gpu tests: (\d+) passed, (\d+) failed, (\d+) skipped", out)
    # every gpu test collected (the CUDA modules import) and skipped without a device
    assert tests and tests.group(1) == tests.group(2) == "0" and int(tests.group(3)) >= 50, out
    for n in (32, 64):  # a row of medians and ratios per length
        row = re.search(rf"^\| {n} \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", out, re.M)
        assert row and float(row.group(1)) > 0, (n, out)
    print(f"dry run: {seconds:.0f} s")  # < 60 s on a quiet machine (docs/benchmarks.md, GPU check)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_the_real_run_refuses_in_one_line():
    """Negative control: the real run on a CPU finds no Python whose torch sees a GPU, and says so."""
    done = _run(PROBE_GPU_BUDGET="60")
    assert done.returncode == 1
    assert "GPU check: NOT run: no Python here has torch that sees a CUDA device" in done.stdout


def test_a_stage_out_of_time_is_ended_with_its_children(tmp_path):
    gpu = _gpu_module()
    pid_file = tmp_path / "grandchild.pid"
    grandchild = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}])"
    status, seconds, _ = gpu.run_stage([sys.executable, "-c", child], limit=3)
    assert status == "timed out after 3 s" and seconds < 30
    grandchild = Path(f"/proc/{pid_file.read_text()}/stat")
    time.sleep(0.5)
    # the benchmark's own child went with the stage: gone, or a zombie its new parent has not reaped yet
    assert not grandchild.exists() or grandchild.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    assert gpu.run_stage([sys.executable, "-c", "print(1)"], limit=0.5)[0].startswith("skipped")
    assert gpu.run_stage([sys.executable, "-c", "import sys; sys.exit(3)"], limit=30)[0] == "failed (exit 3)"


def test_the_budget_grants_the_smaller_of_a_limit_and_what_is_left():
    gpu = _gpu_module()
    budget = gpu.Budget(100)
    assert 90 <= budget.grant(1000) <= 100 - gpu.RESERVE
    assert budget.grant(20) == 20
    assert gpu.Budget(2).grant(50) == 0  # less than the reserve left: nothing


def test_the_summary_rows_are_medians_and_their_ratios():
    gpu = _gpu_module()
    result = {"timings": {"times": {"plain": [0.010, 0.020, 0.030], "engine": [0.022, 0.080, 0.024],
                                    "reduced": [0.011, 0.021, 0.031]}},
              "peaks": {"plain": {"peak_mib": 100.0}, "engine": {"peak_mib": 150.0},
                        "reduced": {"peak_mib": 100.0}}}
    rows = gpu.capture_rows({1024: result, 4096: {"error": "timed out after 50 s: "}})
    assert rows[2] == ("| 1024 | 20.0 | 24.0 | 21.0 | not run | 1.20 | 1.05 | — | 100 | 1.50 | 1.00 |")
    assert rows[3].startswith("| 4096 | timed out after 50 s")
