"""Which controls a label beat, in every view that shows chance (issue 39): the untrained twins' bar
(``untrained_p99``) beside chance as "twins p99", "not run" where the labels were made without twins (the
default of ``probe label``), and one line per table saying which controls its labels beat — in the notebook
table, the report's atlas, labelled-heads table and cell titles, and ``probe label``'s summary.

The dashboard's labelled-heads table and atlas hover are checked in tests/app/test_app_callbacks.py
(test_labelled_heads_table_and_hover_show_the_new_columns_and_unknown)."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

import probe
from probe.heads.label import LabelConfig, label_model
from probe.heads.tables import load_table
from probe.views import reading
from probe.views.figures import atlas_svg
from probe.views.report import report_html
from probe.views.tables import COLUMNS, table_html


def rows(bars):
    return pd.DataFrame([{"layer": 0, "head": h, "head_type": t, "score": 0.9, "ci_low": 0.85,
                          "ci_high": 0.95, "chance": 0.1, "q_value": 1e-4, "label": True,
                          "untrained_p99": bar}
                         for h, (t, bar) in enumerate(bars)])


def test_twins_ran_and_the_text_beside_chance():
    none = rows([("previous_token", math.nan), ("retrieval", math.nan)])
    ran = rows([("previous_token", 0.31), ("retrieval", math.nan)])  # twins are not run on retrieval
    assert not reading.twins_ran(none) and reading.twins_ran(ran)
    assert not reading.twins_ran(none.drop(columns="untrained_p99"))  # an older table: not run
    first, second = list(ran.itertuples(index=False))
    assert reading.twins_text(first, True) == "0.310"
    assert reading.twins_text(second, True) == "not for this type"
    assert reading.twins_text(next(none.itertuples(index=False)), False) == "not run"
    assert "untrained twins: not run" in reading.controls_line(none)
    line = reading.controls_line(ran)
    assert "and the untrained twins" in line and "not run" not in line


def test_the_table_shows_the_twins_bar_beside_chance_and_says_when_not_run():
    assert COLUMNS.index("twins p99") == COLUMNS.index("chance") + 1
    plain = table_html(rows([("previous_token", math.nan)]))
    headers = re.findall(r"<th>(.*?)</th>", plain)
    assert headers[headers.index("chance") + 1] == "twins p99"
    assert ">not run</td>" in plain and "untrained twins: not run" in plain
    ran = table_html(rows([("previous_token", 0.31)]))
    assert ">0.310</td>" in ran and "not run" not in ran and "and the untrained twins" in ran


def test_the_atlas_cell_titles_name_chance_and_the_twins_bar():
    svg = atlas_svg(rows([("previous_token", math.nan)]), 1, 1, "previous_token")
    assert "chance 0.100 · twins p99 not run" in svg
    svg = atlas_svg(rows([("previous_token", 0.31)]), 1, 1, "previous_token")
    assert "chance 0.100 · twins p99 0.310" in svg


@pytest.fixture(scope="module")
def induction():
    return probe.load("zoo:induction")


def test_the_report_says_which_controls_the_labels_beat(induction):
    """Labels made without twins (the shipped table with its bar dropped, as a --control none run writes
    it): the report says so; a run with twins (probe label --control untrained:1) shows their bar beside
    chance and no "not run"."""
    shipped = load_table(probe.zoo.labels_path("induction"))
    assert shipped["untrained_p99"].notna().any()  # the shipped labels were made with 3 twins
    page = report_html(induction, shipped.assign(untrained_p99=math.nan), seq_len=16)
    assert page.count("untrained twins: not run") >= 2  # the atlas's note and the labelled-heads table's
    assert ">not run</td>" in page
    twinned = label_model(induction, LabelConfig(twins=1, types=("previous_token",), examples=16, seq_len=48,
                                                 n_bootstrap=200, ablate="none"))
    assert twinned["label"].any() and twinned["untrained_p99"].notna().all()
    page = report_html(induction, twinned, seq_len=16)
    bar = f"{twinned['untrained_p99'].iloc[0]:.3f}"
    assert "untrained twins: not run" not in page and f">{bar}</td>" in page
    assert f"twins p99 {bar}" in page  # the atlas cells' titles
    assert "and the untrained twins (its statistic above their 99th percentile" in page


def test_the_sweep_figure_draws_the_twins_bar_beside_chance_or_says_not_run():
    """probe label --plot: the twins' p99 dotted beside the chance line where the run had twins; the title
    says when it had none; coreference's bar (on its accuracy) is not drawn on the score axis."""
    from probe.runs.plot import sweep_figure

    table = pd.DataFrame({
        "checkpoint": ["step-0", "step-0", "step-9", "step-9"], "step": [0, 0, 9, 9],
        "head_name": ["L1H0", "L1H1", "L1H0", "L1H1"], "head_type": ["induction"] * 4,
        "score": [0.1, 0.2, 0.9, 0.3], "ci_low": [0.05, 0.1, 0.8, 0.2], "ci_high": [0.15, 0.3, 0.95, 0.4],
        "chance": [0.05] * 4, "label": [False, False, True, False], "untrained_p99": [math.nan] * 4,
    })
    plain = sweep_figure(table)
    assert "untrained twins not run" in plain.layout.title.text
    assert {trace.name for trace in plain.data} == {"L1H0", "chance (uniform)"}
    twinned = sweep_figure(table.assign(untrained_p99=[0.07, 0.07, 0.12, 0.12]))
    lines = {trace.name: trace for trace in twinned.data}
    bar = lines["untrained twins' p99"]
    assert list(bar.x) == [0, 9] and list(bar.y) == [0.07, 0.12]
    assert "not run" not in twinned.layout.title.text
    coreference = table.assign(head_type="coreference", accuracy=[0.5, 0.5, 0.9, 0.6],
                               untrained_p99=[0.6] * 4)
    assert "untrained twins' p99" not in {trace.name for trace in sweep_figure(coreference).data}
