"""Every notebook in notebooks/ runs top to bottom, offline."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_runs(path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [output for cell in notebook.cells if cell.cell_type == "code"
              for output in cell.get("outputs", [])
              if output.get("output_type") == "error"]
    assert not errors
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    # the inline views are in the outputs as text/html (tests/views/test_views_browser.py)
    if path.stem == "views":
        html = [output["data"]["text/html"] for cell in notebook.cells if cell.cell_type == "code"
                for output in cell.get("outputs", []) if "text/html" in output.get("data", {})]
        # the views' own containers (the inlined views.js, which every view and the table carry, names the
        # attribute too)
        assert sum('class="probe-view" data-probe-view="' in text and "window.probeViews" in text
                   for text in html) == 2
        assert any('class="probe-table"' in text for text in html)
        assert sum('data-probe-structure="' in text and "window.probeStructure" in text for text in html) == 1
