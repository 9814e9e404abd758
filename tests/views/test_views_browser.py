"""The view layer in headless Chromium, offline: a written report and the nbconvert HTML of the executed views
notebook open from file:// with the network disabled — zero network requests, zero console errors; hovering a
token highlights its row of the map, a key steps the head, the export functions make SVG and PNG; screenshots
at 1280×800 for docs/ (views_report.png, views_notebook.png).

The notebook (notebooks/views.ipynb) is executed once for the module: its outputs must hold the view as
text/html, and its dashboard cell (Dash inline, `probe.app.run`) must return at once — the kernel is never
blocked.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.browser import chromium, console_errors, requests_elsewhere

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
NOTEBOOK = ROOT / "notebooks" / "views.ipynb"
# the inline app's cell must return within this (it starts a thread; it never serves here)
APP_CELL_SECONDS = 120


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """notebooks/views.ipynb executed top to bottom (nbclient), with per-cell timing; its kernel (and the
    dashboard it started inline) stays up until the module's tests are done."""
    import nbformat
    from nbclient import NotebookClient

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3", record_timing=True,
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index)
        yield notebook


def _seconds(cell) -> float:
    from datetime import datetime

    timing = cell.metadata["execution"]
    start = datetime.fromisoformat(timing["iopub.execute_input"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
    return (end - start).total_seconds()


# executes the notebook (~45 s); tests/views/test_notebooks.py runs it and checks its views by default
@pytest.mark.slow
def test_notebook_outputs_hold_the_view_and_the_app_cell_returns(executed):
    outputs = [output for cell in executed.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    html = [output["data"]["text/html"] for output in outputs if "text/html" in output.get("data", {})]
    views = [text for text in html if 'data-probe-view="' in text and "window.probeViews" in text]
    assert len(views) == 2  # probe.show, with and without labels
    assert any('class="probe-table"' in text for text in html)  # the labels table
    app = next(cell for cell in executed.cells if "app" in cell.metadata.get("tags", []))
    assert any("iframe" in output.get("data", {}).get("text/html", "").lower() for output in app.outputs)
    assert _seconds(app) < APP_CELL_SECONDS
    last = executed.cells[-1].outputs[-1]
    assert last["data"]["text/plain"] == "200"  # the kernel answered while the app served


# --- the browser --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def driver():
    """Offline (every request fails), its requests logged, at 1280×800 (the screenshots' size)."""
    browser = chromium((1280, 800), offline=True, network_log=True)
    yield browser
    browser.quit()


def _open_offline(driver, path: Path) -> None:
    """Open `path` from file:// with the network off; then no request left the page and the console is
    clean."""
    requests, errors = _load(driver, path)
    assert requests == [], f"network requests: {requests}"
    assert errors == [], f"console errors: {errors}"


def _load(driver, path: Path) -> tuple[list[str], list[dict]]:
    """(URLs the page asked the network for, SEVERE console entries) after opening `path` from file://."""
    driver.get_log("performance")
    driver.get_log("browser")
    driver.get(path.resolve().as_uri())
    deadline = time.time() + 30
    while time.time() < deadline and not driver.execute_script(
            "return document.querySelectorAll('.probe-view[data-head]').length"):
        time.sleep(0.2)
    time.sleep(0.5)
    return requests_elsewhere(driver), console_errors(driver)


def _hover_token_and_step_a_head(driver, root_selector: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    root = driver.find_element("css selector", root_selector)
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", root)
    token = root.find_elements("css selector", ".pv-tokens .token")[3]
    ActionChains(driver).move_to_element(token).perform()
    mark = root.find_element("css selector", ".pv-row-mark")
    assert mark.value_of_css_property("display") == "block"
    assert mark.get_attribute("data-row") == "3"  # the hovered token's row of the map
    assert token.get_attribute("class") == "token focus"
    coloured = [span.value_of_css_property("background-color")
                for span in root.find_elements("css selector", ".pv-tokens .token")]
    assert len(set(coloured)) > 1  # the tokens are coloured by α from token 3
    layer, head = int(root.get_attribute("data-layer")), int(root.get_attribute("data-head"))
    heads = len(root.find_elements("css selector", ".pv-grid .pv-axis")) - driver.execute_script(
        "return arguments[0].probeView.data.layers", root)
    ActionChains(driver).move_to_element(root.find_element("css selector", ".pv-title")).click().perform()
    ActionChains(driver).send_keys(Keys.ARROW_RIGHT).perform()
    assert int(root.get_attribute("data-head")) == (head + 1) % heads
    assert int(root.get_attribute("data-layer")) == layer
    caption = root.find_element("css selector", ".pv-head-label").text
    assert caption.startswith(f"L{layer}H{(head + 1) % heads} ")
    selected = root.find_elements("css selector", ".pv-thumb.selected")
    assert [(int(b.get_attribute("data-layer")), int(b.get_attribute("data-head"))) for b in selected] == \
        [(layer, (head + 1) % heads)]
    ActionChains(driver).send_keys(Keys.ARROW_LEFT).perform()
    assert int(root.get_attribute("data-head")) == head
    svg = driver.execute_script("return arguments[0].probeView.svg('map')", root)
    assert svg.startswith("<svg") and ">0·" in svg and "<image" in svg  # token labels as text
    assert driver.execute_script("return arguments[0].probeView.svg('grid')", root).count("<image") >= 8
    png = driver.execute_script("return arguments[0].probeView.png('map')", root)
    assert png.startswith("data:image/png;base64,") and len(png) > 1000


def _planted_labels(name: str) -> pd.DataFrame:
    rows = []
    for layer in range(2):
        for head in range(4):
            planted = {(0, 0): "previous_token", (0, 1): "self", (1, 2): "first_token"}.get((layer, head))
            for head_type in ("previous_token", "self", "first_token"):
                strong = planted == head_type
                score = 0.95 if strong else 0.08
                rows.append({"model": name, "layer": layer, "head": head, "head_type": head_type,
                             "score": score, "ci_low": score - 0.03, "ci_high": score + 0.02, "chance": 0.08,
                             "q_value": 1e-4 if strong else 0.7, "label": strong,
                             "output_share": 0.8 if strong else float("nan"),
                             "role": "function" if strong else ""})
    return pd.DataFrame(rows)


@pytest.mark.browser
def test_report_offline_in_chromium(driver, planted, tmp_path):
    from probe.views.report import write_report

    loaded = planted
    report = write_report(loaded, tmp_path / "report.html", labels=_planted_labels(loaded.name), seq_len=48)
    _open_offline(driver, report)
    _hover_token_and_step_a_head(driver, "#probe-report-view")
    # the grid's badges read like every view: ✓ labelled, grey = not labelled with the reason on hover
    titles = driver.execute_script(
        "return Array.from(document.querySelectorAll('#probe-report-view .pv-thumb'))"
        ".map(b => [b.title, b.querySelector('.pv-badge').className])")
    grey = [title for title, css in titles if "faint" in css]
    assert grey and all(" · not labelled: q 0.7 above the FDR 0.05" in title for title in grey)
    assert any("✓" in title and "not labelled" not in title for title, css in titles if "labelled" in css)
    driver.execute_script("document.querySelector('#probe-report-view').scrollIntoView({block: 'start'})")
    driver.execute_script("window.scrollBy(0, -60)")
    driver.save_screenshot(str(DOCS / "views_report.png"))
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
    # the negative control: one image from the network in the same page is a request and a console error
    leaky = tmp_path / "leaky.html"
    leaky.write_text(report.read_text().replace("<body>", '<body><img src="http://127.0.0.1:9/x.png">', 1))
    requests, errors = _load(driver, leaky)
    assert requests == ["http://127.0.0.1:9/x.png"] and errors


@pytest.mark.browser
def test_nbconvert_html_of_the_notebook_offline_in_chromium(driver, executed, tmp_path):
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor

    # nbconvert's own template loads require.js and MathJax from a CDN (the view needs neither): pointed at
    # empty data: URIs; the dashboard cell's iframe shows the notebook's live server, gone once the kernel
    # stopped.
    exporter = HTMLExporter(require_js_url="data:,", mathjax_url="data:,")
    exporter.register_preprocessor(TagRemovePreprocessor(remove_all_outputs_tags={"app"}, enabled=True), True)
    body, _ = exporter.from_notebook_node(executed)
    page = tmp_path / "views.html"
    page.write_text(body, encoding="utf-8")
    _open_offline(driver, page)
    roots = driver.find_elements("css selector", ".probe-view[data-head]")
    assert len(roots) == 2
    _hover_token_and_step_a_head(driver, f"#{roots[1].get_attribute('id')}")
    from selenium.webdriver.common.action_chains import ActionChains

    # an induction head
    roots[1].find_element("css selector", '.pv-thumb[data-layer="1"][data-head="2"]').click()
    assert roots[1].get_attribute("data-layer") == "1" and roots[1].get_attribute("data-head") == "2"
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'}); window.scrollBy(0, -40)", roots[1])
    ActionChains(driver).move_to_element(
        roots[1].find_elements("css selector", ".pv-tokens .token")[45]).perform()
    driver.save_screenshot(str(DOCS / "views_notebook.png"))
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []


@pytest.mark.browser
def test_the_dashboard_inline_in_the_notebook_html(driver, executed, tmp_path):
    """The notebook's `probe.app.run(jupyter_mode="inline")` output is an iframe of the dashboard, served from
    the kernel's background thread while the kernel stays free: loaded here from loopback (the only network
    this test allows), drawn, screenshot for docs/app.md."""
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(require_js_url="data:,", mathjax_url="data:,").from_notebook_node(executed)
    page = tmp_path / "views-with-app.html"
    page.write_text(body, encoding="utf-8")
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": False, "latency": 0,
                                                                "downloadThroughput": -1,
                                                                "uploadThroughput": -1})
    try:
        driver.get(page.resolve().as_uri())
        frame = driver.find_element("css selector", "iframe")
        assert frame.get_attribute("src").startswith("http://127.0.0.1:")
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'}); window.scrollBy(0, -70)", frame)
        driver.switch_to.frame(frame)
        deadline = time.time() + 90
        while time.time() < deadline and not driver.execute_script(
                "return document.querySelectorAll('#atlas-graph .js-plotly-plot, .head-grid-cells').length "
                ">= 2"):
            time.sleep(0.5)
        assert driver.execute_script("return window.probeViews && window.probeViews.version") == 1
        driver.switch_to.default_content()
        time.sleep(1.0)
        driver.save_screenshot(str(DOCS / "app_jupyter.png"))
    finally:
        driver.switch_to.default_content()
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                    "downloadThroughput": -1,
                                                                    "uploadThroughput": -1})
        driver.get_log("browser")  # the dashboard's own console is the app's tests' business
