"""The circuit graph (views.js mountCircuit) in headless Chromium, offline: the one-file report with a circuit
section, `probe circuit --html`'s page and the nbconvert HTML of the executed circuits notebook open from
file:// with the network disabled — no network request, a clean console; the graph draws zoo:induction's
L0H1 → L1H0–L1H3 K edges, a click on a head lists its edges, the candidate edges show on request, the SVG
export is a file. Screenshot: docs/circuit_view.png."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from probe import models
from probe.circuits import CircuitConfig, find_circuit
from probe.circuits.circuit import shipped_labels
from tests.browser import chromium, console_errors, requests_elsewhere, wait_for

DOCS = Path(__file__).resolve().parents[2] / "docs"

pytestmark = pytest.mark.browser
NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "circuits.ipynb"


@pytest.fixture(scope="module")
def driver():
    """Offline (every request fails), its requests logged (tests/browser.py)."""
    browser = chromium((1280, 800), offline=True, network_log=True)
    yield browser
    browser.quit()


@pytest.fixture(scope="module")
def circuit():
    loaded = models.load("zoo:induction")
    found = find_circuit(loaded, "induction", shipped_labels("zoo:induction"), CircuitConfig(examples=8))
    return loaded, found


def _open(driver, path: Path) -> None:
    """Open `path` from file:// with the network off, wait for the graph; then no request left the page and
    the console is clean."""
    driver.get_log("performance")
    driver.get_log("browser")
    driver.get(path.resolve().as_uri())
    wait_for(lambda: driver.execute_script(
        "return document.querySelectorAll('.probe-circuit .pc-node').length"), 30, "the circuit graph")
    time.sleep(0.3)
    requests = requests_elsewhere(driver)
    assert requests == [], f"network requests: {requests}"
    assert console_errors(driver) == [], "console errors"



def _check_graph(driver, root_selector: str) -> None:
    root = driver.find_element("css selector", root_selector)
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", root)
    edges = root.find_elements("css selector", ".pc-edge")
    drawn = {(e.get_attribute("data-sender"), e.get_attribute("data-receiver"), e.get_attribute("data-mode"))
             for e in edges}
    assert {("L0H1", f"L1H{h}", "K") for h in range(4)} <= drawn
    node = root.find_element("css selector", '.pc-node[data-layer="1"][data-head="2"]')
    driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", node)
    assert root.get_attribute("data-layer") == "1" and root.get_attribute("data-head") == "2"
    assert "selected" in node.get_attribute("class")
    assert "L0H1 → L1H2 · K-composition" in root.find_element("css selector", ".pc-info").text
    root.find_element("css selector", ".pc-toggle input").click()
    assert len(root.find_elements("css selector", ".pc-edge")) > len(edges)  # the candidates, dashed
    svg = driver.execute_script("return arguments[0].probeCircuit.svg()", root)
    assert svg.startswith("<svg") and "L0H1" in svg and 'xmlns="http://www.w3.org/2000/svg"' in svg
    assert console_errors(driver) == []


def test_report_with_a_circuit_offline(driver, circuit, tmp_path):
    from probe.views.report import write_report

    loaded, found = circuit
    report = write_report(loaded, tmp_path / "report.html", labels=shipped_labels("zoo:induction"),
                          seq_len=32, circuits=[found])
    _open(driver, report)
    _check_graph(driver, "#probe-report-circuit-0")


def test_circuit_page_offline(driver, circuit, tmp_path):
    from probe.views.circuit import write_circuit_page

    page = write_circuit_page(circuit[1], tmp_path / "circuit.html")
    driver.set_window_size(1100, 700)  # the screenshot's size before the graph is drawn: it fits the width
    try:
        _open(driver, page)
        figure = driver.find_element("css selector", "#probe-circuit-view .pc-figure")
        assert driver.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth + 1",
                                     figure)
        driver.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.3)
        driver.save_screenshot(str(DOCS / "circuit_view.png"))
    finally:
        driver.set_window_size(1280, 800)
    _check_graph(driver, "#probe-circuit-view")


def test_nbconvert_html_of_the_circuits_notebook_offline(driver, tmp_path):
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    html = [output["data"]["text/html"] for cell in notebook.cells if cell.cell_type == "code"
            for output in cell.get("outputs", []) if "text/html" in output.get("data", {})]
    assert sum("data-probe-circuit" in text for text in html) == 1
    body, _ = HTMLExporter(require_js_url="data:,", mathjax_url="data:,").from_notebook_node(notebook)
    page = tmp_path / "circuits.html"
    page.write_text(body, encoding="utf-8")
    _open(driver, page)
    roots = driver.find_elements("css selector", ".probe-circuit[data-probe-circuit]")
    assert len(roots) == 1
    _check_graph(driver, f"#{roots[0].get_attribute('id')}")


def test_the_request_check_catches_a_request(driver, circuit, tmp_path):
    """The negative control of the offline checks above: the same page with one image from the network is
    caught (the request is logged though the network is off)."""
    from probe.views.circuit import write_circuit_page

    page = write_circuit_page(circuit[1], tmp_path / "circuit.html")
    page.write_text(page.read_text(encoding="utf-8").replace(
        "</body>", '<img src="http://192.0.2.1/pixel.png" alt=""></body>'), encoding="utf-8")
    driver.get_log("performance")
    driver.get(page.resolve().as_uri())
    wait_for(lambda: driver.execute_script("return document.querySelectorAll('.pc-node').length"), 30,
             "the graph")
    time.sleep(0.5)
    assert "http://192.0.2.1/pixel.png" in requests_elsewhere(driver)
    driver.get_log("browser")  # the failed image is this test's expected error
