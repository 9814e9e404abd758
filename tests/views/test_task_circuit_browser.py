"""A task's circuit (views.js mountCircuit, data.kind "task") in headless Chromium, offline: the page
`show_circuit(found).save` / `probe circuit --task --html` writes and the report's task-circuit section open
from file:// with the network disabled — no network request, a clean console; zoo:induction's circuit draws
its planted L0H1 → L1H0–L1H3 key edges, hovering an edge shows its score and rank, the toggle adds the other
edges, a click on a head lists its edges, the faithfulness curve marks the circuit's size; a random-weight
4-layer model's 343 edges draw within the width, no node over another. Screenshot (zoo:induction,
every edge): docs/circuit_task_view.png."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import probe
from probe.circuits.task import repeat_task
from probe.circuits.task_search import TaskCircuit, task_circuit
from probe.views.circuit import write_circuit_page
from tests.browser import chromium, console_errors, requests_elsewhere, wait_for

DOCS = Path(__file__).resolve().parents[2] / "docs"

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def driver():
    """Offline (every request fails), its requests logged (tests/browser.py)."""
    browser = chromium((1100, 700), offline=True, network_log=True)
    yield browser
    browser.quit()


@pytest.fixture(scope="module")
def induction():
    loaded = probe.load("zoo:induction")
    return loaded, task_circuit(loaded, repeat_task(loaded.tokenizer, pairs=4))


@pytest.fixture(scope="module")
def random_model():
    """A random-weight Llama of 4 layers (4 heads, 2 kv heads, MLPs): 343 edges, scored by EAP."""
    from probe.circuits.edges import edge_scores
    from probe.circuits.faithfulness import faithfulness_curve, smallest_circuit
    from probe.zoo.tiny import build_tiny

    model, tokenizer = build_tiny("llama", num_hidden_layers=4)
    task = repeat_task(tokenizer, pairs=2, block=4)
    table = edge_scores(model, task, method="eap")
    curve = faithfulness_curve(model, task, table, sizes=[0, 20, 100, len(table)], random=1)
    size = smallest_circuit(curve, 0.8)
    kept = table["abs_rank"] <= (size if size is not None else -1)
    return TaskCircuit("random llama, 4 layers", table.assign(in_circuit=kept), curve, 0.8, size)


def _open(driver, path: Path) -> None:
    driver.get_log("performance")
    driver.get_log("browser")
    driver.get(path.resolve().as_uri())
    wait_for(lambda: driver.execute_script("return document.querySelectorAll('.pt-node').length"), 30,
             "the task's circuit graph")
    time.sleep(0.3)
    requests = requests_elsewhere(driver)
    assert requests == [], f"network requests: {requests}"
    assert console_errors(driver) == [], "console errors"


def _drawn(root) -> set[tuple[str, str, str]]:
    return {(edge.get_attribute("data-sender"), edge.get_attribute("data-receiver"),
             edge.get_attribute("data-input")) for edge in root.find_elements("css selector", ".pt-edge")}


def _check_graph(driver, root_selector: str, found: TaskCircuit) -> None:
    root = driver.find_element("css selector", root_selector)
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", root)
    drawn = _drawn(root)
    assert len(drawn) == found.size  # the circuit only, by default
    assert {("L0H1", f"L1H{h}", "k") for h in range(4)} <= drawn
    edge = root.find_element("css selector", '.pt-edge[data-sender="L0H1"][data-receiver="L1H2"]'
                                             '[data-input="k"]')
    driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('mouseenter'))", edge)
    info = root.find_element("css selector", ".pc-info").text
    row = found.table[(found.table["sender"] == "L0H1") & (found.table["receiver"] == "L1H2")
                      & (found.table["input"] == "k")].iloc[0]
    assert info == (f"L0H1 → L1H2 (k) · score {row['score']:+.4f} · rank {row['abs_rank']} of 110 by "
                    "|score| · in the circuit")
    assert "hover" in edge.get_attribute("class")
    assert edge.find_element("css selector", "title").get_attribute("textContent") == info  # the tooltip
    node = root.find_element("css selector", '.pt-node[data-name="L1H0"]')
    driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", node)
    assert root.get_attribute("data-layer") == "1" and root.get_attribute("data-head") == "0"
    assert "L0H1 → L1H0 (k)" in root.find_element("css selector", ".pc-info").text
    size = root.find_element("css selector", ".pt-curve .pt-size")  # the circuit's size on the curve
    assert size is not None and f"circuit: {found.size} edges" in root.find_element(
        "css selector", ".pt-curve").text
    root.find_element("css selector", ".pc-toggle input").click()
    assert len(_drawn(root)) == 110  # every other edge: zoo:induction has 110 (< the payload's top 300)
    root.find_element("css selector", ".pc-toggle input").click()
    assert len(_drawn(root)) == found.size  # the control: off again, the circuit alone
    svg = driver.execute_script("return arguments[0].probeCircuit.svg()", root)
    assert svg.startswith("<svg") and "L0H1 → L1H0" in svg
    assert console_errors(driver) == []


def test_task_circuit_page_offline(driver, induction, tmp_path):
    page = write_circuit_page(induction[1], tmp_path / "task.html")
    _open(driver, page)
    _check_graph(driver, "#probe-circuit-view", induction[1])
    driver.find_element("css selector", "#probe-circuit-view .pc-toggle input").click()  # every edge
    driver.execute_script("window.scrollTo(0, 0)")
    time.sleep(0.3)
    driver.save_screenshot(str(DOCS / "circuit_task_view.png"))


def test_report_with_a_task_circuit_offline(driver, induction, tmp_path):
    from probe.views.report import write_report

    loaded, found = induction
    report = write_report(loaded, tmp_path / "report.html", seq_len=16, circuits=[found])
    _open(driver, report)
    _check_graph(driver, "#probe-report-circuit-0", found)


def test_hundreds_of_edges_stay_readable(driver, random_model, tmp_path):
    page = write_circuit_page(random_model, tmp_path / "random.html")
    _open(driver, page)
    root = driver.find_element("css selector", "#probe-circuit-view")
    toggle = root.find_element("css selector", ".pc-toggle input")
    if not toggle.is_selected():
        toggle.click()
    assert len(_drawn(root)) == 343
    figure = root.find_element("css selector", ".pc-figure")
    assert driver.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth + 1", figure)
    boxes = driver.execute_script(
        "return Array.from(arguments[0].querySelectorAll('.pt-node')).map(function (n) {"
        " var b = n.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; })", root)
    assert len(boxes) == 1 + 4 * (4 + 2 + 1) + 1  # embed, 4 heads + 2 kv heads + the MLP a layer, logits
    overlaps = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
                if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]]
    assert overlaps == []  # no node drawn over another
    ports = root.find_elements("css selector", '.pt-node[data-name="L2KV1"] .pt-port')
    assert len(ports) == 2  # a kv head's key and value ports
