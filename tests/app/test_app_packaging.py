"""The dashboard installs as `probe_app` (source folder app/), never as a top-level `app`; no package is left
out."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _setuptools() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def discovered() -> set[str]:
    """The packages setup.py finds (setuptools' find_namespace_packages)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("probe_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return set(module.packages())


def test_every_package_of_the_tree_is_found():
    listed = discovered()
    tree = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "probe").rglob("__init__.py")}
    tree |= {"probe_app." + ".".join(path.parent.relative_to(ROOT / "app").parts)
             for path in (ROOT / "app").rglob("__init__.py") if path.parent != ROOT / "app"} | {"probe_app"}
    assert tree - listed == set(), "setup.py's discovery misses these"
    assert {"probe.zoo.induction", "probe_app.assets", "probe.data.gap"} <= listed  # data folders, no banner
    assert not any("-" in name or name.startswith("app") for name in listed)
    assert _setuptools()["package-dir"] == {"probe_app": "app"}


def test_the_dashboard_imports_relatively_so_it_works_under_either_name():
    for path in (ROOT / "app").rglob("*.py"):
        assert not re.search(r"^\s*(from app\b|import app\b)", path.read_text(), re.MULTILINE), path


@pytest.mark.slow
def test_the_wheel_holds_probe_app_and_no_top_level_app(tmp_path):
    import shutil

    source = tmp_path / "source"  # build from a copy: setuptools writes build/ and *.egg-info into the tree
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):  # what the build reads
        shutil.copy(ROOT / name, source / name)
    for name in ("probe", "app"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v",
                            "-w", str(tmp_path), str(source)], check=True, capture_output=True, text=True)
    log = built.stdout + built.stderr
    # no warning of our own making: every data folder is a package found by discovery, the license an SPDX
    # string
    assert "absent from" not in log and "project.license` as a TOML table" not in log, log[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "probe_app/__init__.py" in names and "probe_app/panels/grid.py" in names
    assert "probe_app/assets/keys.js" in names and "probe/data/labels/all-MiniLM-L6-v2.csv" in names
    # the view layer
    assert "probe/views/assets/views.js" in names and "probe/views/assets/views.css" in names
    assert "probe/zoo/induction/labels.csv" in names and "probe/zoo/esm-random/labels.csv" in names
    assert "probe/training/train.py" in names
    assert not any(name.startswith("app/") for name in names)
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    code = "import probe_app, probe_app.panels.grid; print(probe_app.create_app.__module__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(target)},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "probe_app"
