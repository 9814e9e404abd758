"""Plain ``pytest --doctest-modules probe`` reads the examples as the project's own doctest test does
(issue 56 item 5): the repository's conftest.py gives them ``loaded`` and ``inputs`` and pyproject.toml the
same NORMALIZE_WHITESPACE flag. Run on one module whose examples read ``loaded`` and ``inputs`` without
defining them (the whole package takes minutes: `pytest --doctest-modules probe -o addopts=`)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE = "probe/engine/mass.py"


def test_plain_pytest_runs_a_modules_examples_with_the_shared_names():
    text = (ROOT / MODULE).read_text(encoding="utf-8")
    assert re.search(r">>> .*\binputs\b", text) and "inputs =" not in text  # the names come from conftest.py
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--doctest-modules", MODULE,
               "-o", "addopts="]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.search(r"\b[1-9]\d* passed\b", done.stdout)
