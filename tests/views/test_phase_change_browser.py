"""The phase change of the shipped natural-text organism, offline in Chromium (issue 54): ``probe report
--model zoo:stdlib-code --history … --history-control …`` writes one file whose timeline holds the model's ICL
score and its 1-layer control's, and the page's numbers (the dots' hover titles) are the shipped table's —
the best induction score rises by more than 0.1 from the first checkpoint to the last and the ICL score falls
below its step-0 value, read from the CSV, never written here. Console clean, no request leaves the page."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import probe
from probe.cli import main
from probe.errors import ProbeError
from probe.runs.history import read_history
from tests.browser import chromium, console_errors, requests_elsewhere, wait_for

pytestmark = pytest.mark.browser

ICL = re.compile(r"^(step-\d+) \(step ([\d,]+)\): ICL score ([+-]\d+\.\d{3}) ± ")
CONTROL = re.compile(r"^(\d+)-layer control: (.+) · (step-\d+) \(step ([\d,]+)\): ICL score "
                     r"([+-]\d+\.\d{3}) ± ")
TITLES = ("return Array.from(document.querySelectorAll('.probe-timeline circle title'))"
          ".map(function (t) { return t.textContent; })")  # every dot's hover title, in the page's order
INDUCTION = re.compile(r"^(L\d+H\d+) at (step-\d+) \(step ([\d,]+)\): induction (-?\d+\.\d{3}) · ")


def shipped_histories() -> tuple[str, Path, Path]:
    """(the model, its shipped history, its 1-layer control's): zoo:stdlib-code and zoo:stdlib-code-1layer's
    ``history.csv``; the test is skipped while the package ships neither."""
    try:
        model, control = (probe.zoo.path(name) / "history.csv"
                          for name in ("stdlib-code", "stdlib-code-1layer"))
    except ProbeError as missing:
        pytest.skip(f"the package ships no stdlib-code organism yet ({missing})")
    if not (model.is_file() and control.is_file()):
        pytest.skip("zoo:stdlib-code and zoo:stdlib-code-1layer ship no history.csv yet")
    return "zoo:stdlib-code", model, control


def checkpoint_values(path: Path, column: str) -> dict[int, float]:
    """Per step, the checkpoint row's `column` (rounded as the page writes it), unknown values left out."""
    points = read_history(path).query("row == 'checkpoint'").dropna(subset=[column])
    return {int(step): round(float(value), 3) for step, value in zip(points["step"], points[column],
                                                                     strict=True)}


def best_induction(path: Path) -> dict[int, float]:
    """Per step, the best induction score of any head (rounded as the page writes it)."""
    heads = read_history(path).query("row == 'head'").dropna(subset=["induction"])
    best = heads.groupby("step")["induction"].max()
    return {int(step): round(float(value), 3) for step, value in best.items()}


def steps_of(text: str) -> int:
    return int(text.replace(",", ""))


@pytest.fixture(scope="module")
def driver():
    browser = chromium((1200, 900), offline=True, network_log=True)
    yield browser
    browser.quit()


def test_the_report_shows_the_phase_change_beside_the_control(tmp_path, driver):
    model, history, control = shipped_histories()
    out = tmp_path / "stdlib-code.html"
    assert main(["report", "--model", model, "--history", str(history), "--history-control", str(control),
                 "--seq-len", "32", "--out", str(out)]) == 0
    driver.get(out.as_uri())
    wait_for(lambda: driver.execute_script("return document.querySelectorAll('.probe-timeline svg').length"),
             30, "the timeline")
    lines = driver.execute_script("return Array.from(document.querySelectorAll('.probe-timeline polyline'))"
                                  ".map(function (p) { return p.getAttribute('data-name'); })")
    assert "icl_score" in lines and "control icl_score" in lines  # the ICL panel holds both
    said = driver.execute_script(TITLES)
    # the model's ICL score, dot for dot the shipped table's
    icl = {steps_of(m[2]): float(m[3]) for m in map(ICL.match, said) if m}
    assert icl == checkpoint_values(history, "icl_score")
    # the control's, named in its dots' titles as in the legend
    theirs = [m for m in map(CONTROL.match, said) if m]
    assert {steps_of(m[4]): float(m[5]) for m in theirs} == checkpoint_values(control, "icl_score")
    assert {m[1] for m in theirs} == {"1"}  # a 1-layer control
    # per checkpoint the best induction score over the heads, as the table has it
    best: dict[int, float] = {}
    for m in filter(None, map(INDUCTION.match, said)):
        best[steps_of(m[3])] = max(best.get(steps_of(m[3]), -1.0), float(m[4]))
    assert best == best_induction(history)
    # the phase change, in the page's numbers: induction forms, the ICL score falls below its step-0 value
    first, last = min(best), max(best)
    assert best[last] - best[first] > 0.1, (best[first], best[last])
    assert icl[max(icl)] < icl[0], (icl[0], icl[max(icl)])
    texts = driver.execute_script("return Array.from(document.querySelectorAll('.probe-timeline text'))"
                                  ".map(function (t) { return t.textContent; })")
    table = read_history(history)
    early, late = (int(table[column].dropna().iloc[0]) for column in ("icl_early", "icl_late"))
    assert f"ICL score: loss at token {late} − loss at token {early}" in texts  # the positions stated
    assert requests_elsewhere(driver) == []
    assert console_errors(driver) == []


def test_the_page_reads_the_table_it_was_given(tmp_path, driver):
    """Negative control of the comparison above: a history whose ICL scores are shifted by 0.5 nats gives a
    page whose numbers no longer equal the shipped table's."""
    model, history, control = shipped_histories()
    shifted = read_history(history)
    shifted.loc[shifted["row"] == "checkpoint", "icl_score"] += 0.5
    path = tmp_path / "shifted.csv"
    shifted.to_csv(path, index=False)
    out = tmp_path / "shifted.html"
    assert main(["report", "--model", model, "--history", str(path), "--history-control", str(control),
                 "--seq-len", "32", "--out", str(out)]) == 0
    driver.get(out.as_uri())
    said = wait_for(lambda: driver.execute_script(TITLES), 30, "the timeline")
    icl = {steps_of(m[2]): float(m[3]) for m in map(ICL.match, said) if m}
    shipped = checkpoint_values(history, "icl_score")
    assert icl.keys() == shipped.keys() and all(abs(icl[s] - shipped[s] - 0.5) < 2e-3 for s in icl)
    assert pd.Series(icl).ne(pd.Series(shipped)).all()
    assert console_errors(driver) == []
