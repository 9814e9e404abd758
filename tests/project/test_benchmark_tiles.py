"""benchmarks/tiles.py runs, and its variants compute the same attention output (the kernel against the
flash kernel and the torch path it stands in for)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from probe.engine import tiles

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "tiles.py"
pytestmark = pytest.mark.skipif(not tiles.available(), reason="the tile kernel is not available here")


def test_it_prints_every_variant_per_length():
    done = subprocess.run([sys.executable, str(SCRIPT), "--lengths", "300", "--repeats", "2"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "N = 300:" in done.stdout
    names = ("flash", "torch path + Σα", "tile kernel + Σα", "reduced Σα in kernel", "reduced Σα + entropy")
    for name in names:
        line = next(line for line in done.stdout.splitlines() if line.strip().startswith(name))
        assert line.count(",") >= 2  # two rounds of seconds and two ratios


def test_the_variants_compute_the_same_output():
    spec = importlib.util.spec_from_file_location("bench_tiles", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    outputs = {name: run() for name, run in module.variants(300).items()}
    reference = outputs["flash"]  # [head seq dim]
    assert reference.abs().max() > 0
    for name, output in outputs.items():
        assert torch.allclose(output, reference, atol=1e-5), name
