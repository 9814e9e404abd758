"""The command line answers `--help`, argument errors and missing files before importing torch, pandas or
transformers: probe/cli.py and probe/commands/<name>.py import only light modules at their top, and a command
imports its library inside `run()` after its own checks. Each check runs in a fresh interpreter (this test
process has torch imported already); the timing bound is generous, measured against `python -c pass` on the
same machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probe.cli import SUBCOMMANDS

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "pandas", "transformers", "numpy")
def python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)


def heavy_after(code: str) -> dict:
    """Run `code` in a fresh interpreter; which heavy modules it imported, and its output."""
    script = ("import sys, json, io, contextlib\nerr = io.StringIO()\nwith contextlib.redirect_stderr(err):\n"
              + "".join(f"    {line}\n" for line in code.splitlines())
              + f"print(json.dumps({{'heavy': [m for m in {HEAVY!r} if m in sys.modules],"
              + " 'err': err.getvalue()}))")
    result = python(script)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_subcommands_is_the_one_list_of_command_modules():
    """probe.commands.SUBCOMMANDS names exactly the modules with add_parser and run, probe.cli registers
    exactly those, and the docstrings do not keep a second list."""
    import probe.cli
    import probe.commands
    from probe.cli import build_parser

    modules = {path.stem for path in (ROOT / "probe" / "commands").glob("*.py")
               if "\ndef add_parser(" in path.read_text(encoding="utf-8")
               and "\ndef run(" in path.read_text(encoding="utf-8")}
    assert set(SUBCOMMANDS) == modules and len(SUBCOMMANDS) == len(modules) == 10
    assert probe.cli.SUBCOMMANDS is probe.commands.SUBCOMMANDS
    registered = build_parser()._subparsers._group_actions[0].choices
    assert list(registered) == list(SUBCOMMANDS)
    # negative control: a helper module (no add_parser) is not a subcommand
    assert "common" not in SUBCOMMANDS and "common" not in registered
    for doc in (probe.commands.__doc__, probe.cli.__doc__):
        assert "SUBCOMMANDS" in doc and "capture, label" not in doc and "capture | label" not in doc


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_command_module_is_light(name):
    """Importing a command module and building its parser imports no heavy library."""
    found = heavy_after(f"import argparse, probe.commands.{name} as m\n"
                        "m.add_parser(argparse.ArgumentParser().add_subparsers())")
    assert found["heavy"] == [], f"probe.commands.{name} imports {found['heavy']} at its top"


def test_the_check_sees_a_heavy_import():
    """Negative control: the same check on a module that imports torch finds it."""
    assert "torch" in heavy_after("import probe.engine")["heavy"]


@pytest.mark.parametrize("argv, message", [
    (["label", "--help"], ""),
    (["label", "--model", "zoo:induction", "--examples", "0"], "--examples must be at least 1"),
    (["label", "--model", "zoo:induction", "--examples", "many"], "invalid int value"),
    (["label", "--model", "zoo:induction", "--probe-file", "/no/such.jsonl"], "--probe-file /no/such.jsonl"),
    (["label", "--models-file", "/no/such.txt"], "--models-file /no/such.txt"),
    (["label", "--model", "zoo:induction", "--control", "untrained:65"], "K must be a whole number"),
    (["label", "--model", "zoo:induction", "--control", "twins"], "use untrained (K = 3 twins)"),
    (["label", "--model", "zoo:induction", "--out", "/no/such/folder/t.csv"], "does not exist"),
    (["profile", "--model", "zoo:induction", "--random", "2", "--window", "0", "--out", "p.csv"],
     "--window 0"),
    (["profile", "--model", "zoo:induction", "--text-file", "/no/such.txt", "--out", "p.csv"],
     "is not a file"),
    (["capture", "--model", "zoo:induction", "--text", "a", "--out", "a.txt"], "extension"),
    (["contacts", "--model", "zoo:esm-random", "--sequence", "MKT", "--control", "untrained:0"],
     "--control 'untrained:0': K must be a whole number"),
    (["contacts", "--model", "zoo:esm-random", "--sequence", "MKT", "--control", "random"],
     "use untrained (K = 3 twins), untrained:K or none"),
    (["report", "--model", "zoo:induction", "--labels", "/no/such.csv", "--out", "r.html"], "no such file"),
    (["report", "--model", "zoo:induction", "--labels", "probe", "--out", "r.html"], "is a folder"),
    (["report", "--model", "zoo:induction", "--labels", "README.md", "--out", "r.html"], "extension"),
    (["report", "--model", "zoo:induction", "--text", "/no/such.txt", "--out", "r.html"], "no such file"),
    (["report", "--model", "zoo:induction", "--structure", "/no/such.pdb", "--out", "r.html"],
     "no such file"),
    (["report", "--model", "zoo:induction", "--out", "r.pdf"], "extension"),
    (["report", "--model", "zoo:induction", "--out", "/no/such/folder/r.html"], "does not exist"),
    # a mistyped model path, missing input files and wrong output extensions in every command (issue 44, 7)
    (["label", "--model", "/no/such/dir"], "model directory /no/such/dir does not exist"),
    (["label", "--model", "zoo:induction", "--model", "zoo:no-such-organism"], "no-such-organism"),
    (["capture", "--model", "/no/such/dir", "--text", "a", "--out", "a.npz"], "does not exist"),
    (["profile", "--model", "/no/such/dir", "--random", "2", "--out", "p.csv"], "does not exist"),
    (["report", "--model", "/no/such/dir", "--out", "r.html"], "does not exist"),
    (["app", "--model", "/no/such/dir"], "does not exist"),
    (["contacts", "--model", "/no/such/dir", "--sequence", "MKT"], "does not exist"),
    (["contacts", "--model", "zoo:esm-random", "--structure", "/no/such.pdb"], "no such file"),
    (["contacts", "--model", "zoo:esm-random", "--fasta", "/no/such.fasta"], "no such file"),
    (["contacts", "--model", "zoo:esm-random", "--sequence", "MKT", "--heads-out", "h.tsv"], "extension"),
    (["contacts", "--model", "zoo:esm-random", "--sequence", "MKT", "--out", "/no/such/c.npz"],
     "does not exist"),
    (["train", "induction"], "give --out DIR"),
    (["train", "--help"], ""),
    (["history", "--help"], ""),
    (["history", "--model", "/no/such/run"], "is not a folder"),
    (["history", "--model", "m", "--icl-positions", "120,12"], "EARLY < LATE"),
    (["history", "--model", "m", "--examples", "0"], "--examples must be at least 1"),
    (["history", "--model", "m", "--text", "english"], "argument --text: invalid choice: 'english'"),
    (["card", "--help"], ""),
    (["app", "--port", "0"], "is not a port number"),
])
def test_help_and_bad_input_answer_without_torch(argv, message):
    found = heavy_after(f"from probe.cli import main\ncode = main({argv!r})")
    assert found["heavy"] == [], f"probe {' '.join(argv)} imported {found['heavy']}"
    assert message in found["err"]


def fastest(command: list[str], runs: int = 3) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, env=env, cwd=ROOT, timeout=300, check=False)
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize("argv", [["label", "--help"],
                                  ["profile", "--model", "m", "--random", "0", "--out", "x.csv"],
                                  ["label", "--model", "/no/such/dir"]])
def test_a_subcommands_help_and_errors_take_well_under_a_second_more_than_python(argv):
    baseline = fastest([sys.executable, "-c", "pass"])
    assert fastest([sys.executable, "-m", "probe.cli", *argv]) < baseline + 1.5


def test_probe_help_builds_every_parser_without_torch():
    found = heavy_after("from probe.cli import build_parser\nbuild_parser()")
    assert found["heavy"] == []
    baseline = fastest([sys.executable, "-c", "pass"])
    assert fastest([sys.executable, "-m", "probe.cli", "--help"]) < baseline + 1.5


# ------------------------------------------------------------------------------------------------------------
# The values the commands write out (so that they need no library) equal the library's
# ------------------------------------------------------------------------------------------------------------


def test_label_defaults_and_choices_equal_the_library():
    from dataclasses import fields

    from probe.commands import label
    from probe.heads import label as heads_label
    from probe.heads.registry import names

    defaults = {field.name: field.default for field in fields(heads_label.LabelConfig)}
    assert {key: defaults[key] for key in label.DEFAULTS} == label.DEFAULTS
    assert label.COREF_SETS == heads_label.COREF_SETS and label.ABLATE == heads_label.ABLATE
    from probe.heads.corpus import TEXTS
    from probe.heads.label.config import RETRIEVAL_MASKS

    assert label.TEXTS == TEXTS

    assert label.RETRIEVAL_MASKS == RETRIEVAL_MASKS
    assert label.HEAD_TYPES == names()


def test_profile_defaults_and_table_extensions_equal_the_library():
    from dataclasses import asdict

    from probe.commands import common, profile
    from probe.heads.profile import ProfileConfig
    from probe.heads.tables import TABLE_EXTENSIONS

    library = asdict(ProfileConfig())
    assert {key: library[key] for key in profile.DEFAULTS} == profile.DEFAULTS
    assert common.TABLE_EXTENSIONS == TABLE_EXTENSIONS


def test_history_defaults_equal_the_library():
    from dataclasses import fields

    from probe.commands import history
    from probe.heads.label import LabelConfig
    from probe.training import incontext

    defaults = {field.name: field.default for field in fields(LabelConfig)}
    assert {key: defaults[key] for key in history.DEFAULTS} == history.DEFAULTS
    assert history.ICL_POSITIONS == (incontext.ICL_EARLY, incontext.ICL_LATE)
    from probe.runs.history_inputs import TEXT_SPLITS

    assert history.TEXTS == ("auto", *TEXT_SPLITS)


def test_train_offers_every_recipe():
    from probe import zoo
    from probe.commands.train import NOT_SHIPPED, recipe_names
    from probe.training.cards import ESM_RANDOM
    from probe.training.organisms import ORGANISMS

    assert zoo.names() == sorted(set([*ORGANISMS, ESM_RANDOM]) - set(NOT_SHIPPED))
    assert recipe_names() == sorted([*ORGANISMS, ESM_RANDOM])
