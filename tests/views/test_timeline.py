"""The training timeline (probe/views/timeline.py, issue 42): a history table drawn as one static SVG — the
exact values on a planted history, gaps for unknown values (never 0), another model's history refused, the
report's section and the page offline in Chromium."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

import probe
from probe.errors import ProbeError
from probe.runs.history import HISTORY_COLUMNS, read_history
from probe.views import timeline

SVG = "{http://www.w3.org/2000/svg}"
STEPS = (0, 10, 100, 1000)


def planted(model: str = "run", icl_gap: bool = False) -> pd.DataFrame:
    """Four checkpoints, two layers × two heads: L0H1 becomes a previous-token head at step 100, L1H0 an
    induction head at step 1000, the ICL score falls 0 → −0.6; with `icl_gap` the step-10 ICL is unknown."""
    rows = []
    for step, icl in zip(STEPS, (0.0, -0.05, -0.1, -0.6), strict=True):
        rows.append({"model": model, "checkpoint": f"step-{step}", "step": step, "row": "checkpoint",
                     "icl_score": math.nan if icl_gap and step == 10 else icl, "icl_se": 0.05,
                     "held_out_loss": 5.0 - step / 1000, "train_loss": 4.9 - step / 1000, "icl_early": 12,
                     "icl_late": 120})
        for layer in (0, 1):
            for head in (0, 1):
                prev = 0.1 + (0.4 * step / 1000 if (layer, head) == (0, 1) else 0.0)
                ind = 0.02 + (0.5 * step / 1000 if (layer, head) == (1, 0) else 0.0)
                rows.append({"model": model, "checkpoint": f"step-{step}", "step": step, "row": "head",
                             "layer": layer, "head": head, "head_name": f"L{layer}H{head}",
                             "previous_token": prev,
                             "previous_token_label": (layer, head) == (0, 1) and step >= 100,
                             "induction": ind, "induction_label": (layer, head) == (1, 0) and step >= 1000})
    return pd.DataFrame(rows).reindex(columns=HISTORY_COLUMNS)


def titles(svg: str) -> list[str]:
    return [element.text for element in ET.fromstring(svg).iter(f"{SVG}title")]


def test_the_planted_history_is_drawn_with_its_exact_values():
    view = probe.show_history(planted())
    assert view.heads == ("L0H0", "L0H1", "L1H0", "L1H1") and view.steps.tolist() == list(STEPS)
    assert view.first_labelled("induction") == {"L1H0": 1000}
    assert view.first_labelled("previous_token") == {"L0H1": 100}
    svg = view.svg()
    root = ET.fromstring(svg)  # well-formed
    labelled = [c for c in root.iter(f"{SVG}circle") if c.get("class") == "labelled"]
    # filled dots: the ICL panel's 4, L0H1 at steps 100 and 1000, L1H0 at step 1000
    assert len(labelled) == 4 + 2 + 1
    said = titles(svg)
    assert "L1H0 at step-1000 (step 1,000): induction 0.520 · labelled" in said
    assert "L1H0 at step-100 (step 100): induction 0.070 · not labelled" in said
    assert "step-1000 (step 1,000): ICL score -0.600 ± 0.100 nats" in said
    assert 'data-model="run"' in svg and "<script" not in svg and "http://" not in svg.replace(
        "http://www.w3.org/2000/svg", "")


def test_steps_sit_on_the_log_axis_and_the_scores_on_their_scale():
    view = probe.show_history(planted())
    root = ET.fromstring(view.svg())
    line = next(p for p in root.iter(f"{SVG}polyline") if p.get("data-name") == "L1H0"
                and p.get("stroke") != timeline.THEMES["light"]["muted"])
    points = np.array([[float(v) for v in pair.split(",")] for pair in line.get("points").split()])
    x = points[:, 0]
    fraction = (x - x[0]) / (x[-1] - x[0])  # step 0 at the left edge, the last step at the right
    expected = np.log10(np.array(STEPS) + 1.0) / math.log10(1001)
    np.testing.assert_allclose(fraction, expected, atol=2e-3)
    y = points[:, 1]  # the induction scores 0.02, 0.025, 0.07, 0.52: linear in pixels
    scores = np.array([0.02, 0.025, 0.07, 0.52])
    slope = (y[-1] - y[0]) / (scores[-1] - scores[0])
    np.testing.assert_allclose(y, y[0] + slope * (scores - scores[0]), atol=0.06)
    assert slope < 0  # higher scores are drawn higher


def test_an_unknown_value_is_a_gap_not_zero():
    view = probe.show_history(planted(icl_gap=True))
    root = ET.fromstring(view.svg())
    icl = [p for p in root.iter(f"{SVG}polyline") if p.get("data-name") == "icl_score"]
    assert [len(p.get("points").split()) for p in icl] == [1, 2]  # step 0 | steps 100, 1000
    assert not any("step-10 (step 10): ICL" in text for text in titles(view.svg()))


def test_another_models_history_is_refused():
    both = pd.concat([planted("run-a"), planted("run-b")])
    with pytest.raises(ProbeError, match="holds 2 models"):
        probe.show_history(both)
    assert probe.show_history(both, model="run-b").model == "run-b"
    with pytest.raises(ProbeError, match="no checkpoint of run-c"):
        probe.show_history(both, model="run-c")
    with pytest.raises(ProbeError, match="not a history table"):
        probe.show_history(pd.DataFrame({"name": ["ada"]}))
    with pytest.raises(ProbeError, match="not of zoo:induction"):
        timeline.history_model(planted("run-a"), "zoo:induction")


def test_a_run_folders_history_belongs_to_its_checkpoints(tmp_path):
    run = tmp_path / "run"
    (run / "step-1000").mkdir(parents=True)
    table = planted(str(run))
    assert timeline.history_model(table, str(run / "step-1000")) == str(run)
    assert timeline.history_model(table, str(run)) == str(run)
    with pytest.raises(ProbeError):
        timeline.history_model(table, str(tmp_path / "elsewhere"))


def test_saved_files_read_back_and_the_csv_round_trip(tmp_path):
    path = tmp_path / "history.csv"
    planted().to_csv(path, index=False)
    view = probe.show_history(path)  # through probe.runs.history.read_history
    assert view.first_labelled("induction") == {"L1H0": 1000}
    assert read_history(path).shape[0] == len(planted())
    svg, page = view.save(tmp_path / "t.svg"), view.save(tmp_path / "t.html")
    assert svg.read_text().startswith("<svg") and "<figure" in page.read_text()
    with pytest.raises(ProbeError, match="as .svg or .html"):
        view.save(tmp_path / "t.png")
    assert re.search(r"induction labelled: L1H0 from step 1000", repr(view))


def test_the_report_carries_the_timeline_of_its_runs_history(tmp_path):
    from probe.views.report import report_html

    run = tmp_path / "run"
    run.mkdir()
    page = report_html("zoo:induction", seq_len=16, history=planted("zoo:induction"))
    assert "<h2>Training history</h2>" in page and "L1H0 at step-1000" in page
    with pytest.raises(ProbeError, match="not of zoo:induction"):
        report_html("zoo:induction", seq_len=16, history=planted(str(run)))


@pytest.mark.browser
def test_the_timeline_page_draws_offline_with_a_clean_console(tmp_path):
    from tests.browser import chromium, console_errors

    page = probe.show_history(planted()).save(tmp_path / "timeline.html")
    browser = chromium(window=(1000, 700), offline=True)
    try:
        browser.get(page.as_uri())
        box = browser.execute_script("const r = document.querySelector('svg').getBoundingClientRect();"
                                     "return [r.width, r.height];")
        assert box[0] > 800 and box[1] > 400
        dots = browser.execute_script("return document.querySelectorAll('circle.labelled').length")
        assert dots == 7
        assert console_errors(browser) == []
    finally:
        browser.quit()
