"""The dashboard's circuit panel in headless Chromium: on zoo:induction (its shipped label table) 'Find
circuit' draws L0H1 → L1H0–L1H3 by K-composition with views.js (the notebook's and the report's code), a click
on a head in the graph selects it on the page, the page's selection is marked in the graph; the console stays
clean and the page asks nothing of any host but the app's own."""

from __future__ import annotations

import pytest

from app import create_app, ids
from app.config import AppConfig
from app.service import Service
from tests.browser import APP_WINDOW, LOCAL, chromium, requests_elsewhere, serving, wait_for

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def driver():
    """The dashboard's window with every request logged (tests/browser.py)."""
    browser = chromium(APP_WINDOW, network_log=True)
    yield browser
    browser.quit()


@pytest.fixture(scope="module")
def served():
    service = Service(AppConfig(models=("zoo:induction",)))
    assert service.labels.table("zoo:induction") is not None  # the organism's shipped labels
    with serving(create_app(service=service).server) as url:
        yield url, service



def _drawn(driver) -> set[tuple[str, str, str]]:
    edges = driver.find_elements("css selector", f"#{ids.CIRCUIT_GRAPH} .pc-edge")
    return {(e.get_attribute("data-sender"), e.get_attribute("data-receiver"), e.get_attribute("data-mode"))
            for e in edges}


def test_the_circuit_panel_draws_the_induction_circuit_and_selects_heads(driver, served):
    url, service = served
    driver.get_log("performance")
    driver.get(f"{url}?model=zoo:induction&type=induction&layer=0&head=0")
    wait_for(lambda: "tokens" in driver.find_element("id", ids.HEAD_LABEL).text, 60, "the first heatmap")
    assert not driver.find_elements("css selector", f"#{ids.CIRCUIT_GRAPH} .pc-node")  # found on demand
    driver.find_element("id", ids.CIRCUIT_RUN).click()
    wait_for(lambda: driver.find_elements("css selector", f"#{ids.CIRCUIT_GRAPH} .pc-node"), 180,
             "the circuit graph")
    assert {("L0H1", f"L1H{h}", "K") for h in range(4)} <= _drawn(driver)
    note = driver.find_element("id", ids.CIRCUIT_NOTE).text
    assert "edges in the circuit" in note and note.endswith("forwards")
    # a click on L1H2 in the graph selects it on the page (the explorer shows it) and lists its edges
    node = driver.find_element("css selector",
                               f'#{ids.CIRCUIT_GRAPH} .pc-node[data-layer="1"][data-head="2"]')
    driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", node)
    wait_for(lambda: driver.find_element("id", ids.HEAD_LABEL).text.startswith("L1H2"), 30,
             "the clicked head selected on the page")
    assert "L0H1 → L1H2 · K-composition" in driver.find_element(
        "css selector", f"#{ids.CIRCUIT_GRAPH} .pc-info").text
    # the page's selection (a row of the labelled-heads table) is marked in the graph
    driver.get(f"{url}?model=zoo:induction&type=induction&layer=1&head=3")
    wait_for(lambda: driver.find_element("id", ids.HEAD_LABEL).text.startswith("L1H3"), 60, "L1H3")
    wait_for(lambda: driver.find_elements("css selector", f"#{ids.CIRCUIT_GRAPH} .pc-node"), 60,
             "the cached circuit drawn again without a click")
    marked = f'#{ids.CIRCUIT_GRAPH} .pc-node[data-layer="1"][data-head="3"]'
    wait_for(lambda: "selected" in driver.find_element("css selector", marked).get_attribute("class"), 30,
             "L1H3 marked in the graph")
    assert requests_elsewhere(driver, (url.rstrip("/"), *LOCAL)) == []
