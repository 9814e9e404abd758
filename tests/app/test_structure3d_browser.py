"""The 3D view's Dash bridge (app/panels/structure3d.py, app/assets/structure3d.js) in headless Chromium,
before it is placed in the protein panel: a small Dash app with the app's stores (the 2D maps' residue pair,
the selected head, the theme switch) and the view's scripts served by the app's own route. A pair written to
the pair store (what a click in the 2D maps does) is highlighted in 3D; a pair picked in 3D (a real click on
an edge) and a head stepped in the view reach the stores; the theme switch themes it; every request goes to
the app's own server and the console stays clean."""

from __future__ import annotations

import time
from pathlib import Path

import dash_mantine_components as dmc
import numpy as np
import pytest
from dash import Dash, Input, Output, dcc, html

from app import ids
from app.panels import structure3d
from probe.views import bundle
from tests.browser import serving
from tests.views import structure_pages as pages

pytestmark = pytest.mark.browser
ASSETS = Path(__file__).resolve().parents[2] / "app" / "assets"


@pytest.fixture(scope="module")
def served():
    """A Dash app with the bridge and the planted view of ubiquitin, on a loopback port."""
    app = Dash(__name__, assets_folder=str(ASSETS), assets_ignore=r"^(?!structure3d\.js$).*",
               external_scripts=[bundle.SCRIPT_URL, *bundle.STRUCTURE_URLS],
               external_stylesheets=[bundle.STYLE_URL])
    bundle.serve(app.server)
    app.layout = dmc.MantineProvider([
        dmc.Switch(id=ids.THEME, label="dark", checked=False),
        dcc.Store(id=ids.PAIR), dcc.Store(id=ids.SELECTED, data={"layer": 0, "head": 0}),
        html.Div(id="echo-pair"), html.Div(id="echo-head"),
        structure3d.layout(),
    ])
    structure3d.register(app)

    @app.callback(Output(structure3d.PAYLOAD, "data"), Input(ids.SELECTED, "id"))
    def _payload(_):
        return pages.planted().payload()

    @app.callback(Output("echo-pair", "children"), Input(ids.PAIR, "data"))
    def _pair(pair):
        return "" if not pair else f"{pair['i']},{pair['j']}"

    @app.callback(Output("echo-head", "children"), Input(ids.SELECTED, "data"))
    def _head(selected):
        return f"{selected['layer']},{selected['head']}"

    with serving(app.server) as url:
        yield url


@pytest.fixture(scope="module")
def chromium():
    browser = pages.start_chromium(offline=False)
    yield browser
    browser.quit()


def _wait(condition, what: str, timeout: float = 60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_bridge_links_the_3d_view_with_the_app_stores(served, chromium):
    driver = chromium
    driver.get_log("performance")
    driver.get(served)
    root = _wait(lambda: driver.find_elements("css selector", f"#{structure3d.CONTAINER}[data-ready]"),
                 "the 3D view")[0]
    assert root.get_attribute("data-head") == "0" and root.get_attribute("data-theme") == "light"
    set_props = "window.dash_clientside.set_props(arguments[0], {data: arguments[1]})"
    # the 2D maps mark a pair: the pair store changes and the 3D view highlights it
    driver.execute_script(set_props, ids.PAIR, {"i": 30, "j": 65})
    _wait(lambda: root.get_attribute("data-pair") == "30,65", "the 2D pair in 3D")
    assert "pair Q31 → T66" in root.find_element("css selector", ".ps-caption").text
    # the selected head changes elsewhere in the app: the 3D view follows
    driver.execute_script(set_props, ids.SELECTED, {"layer": 1, "head": 2})
    _wait(lambda: root.get_attribute("data-head") == "2", "the selected head in 3D")
    # a pick in 3D (a real click on the edge 5 → 50 of L1H2, trace style) reaches the pair store
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", root)
    driver.execute_script("arguments[0].probeStructure.setStyle('trace')", root)
    ca = driver.execute_script("return arguments[0].probeStructure.data.ca", root)
    pages.click_at(driver, root, np.array(ca[5]) * 0.7 + np.array(ca[50]) * 0.3)
    _wait(lambda: driver.find_element("id", "echo-pair").text == "5,50", "the 3D pick in the pair store")
    # a head stepped in the view (← key) reaches the selected-head store
    driver.execute_script("arguments[0].focus()", root)
    from selenium.webdriver.common.keys import Keys

    root.send_keys(Keys.ARROW_LEFT)
    _wait(lambda: driver.find_element("id", "echo-head").text == "0,0", "the 3D head in the selected store")
    # the app's theme switch
    driver.find_element("css selector", f"#{ids.THEME}").click()
    _wait(lambda: root.get_attribute("data-theme") == "dark", "the dark theme")
    assert pages.pixels(driver, root)["corner"] == [0, 0, 0]
    driver.execute_script(set_props, ids.PAIR, None)
    _wait(lambda: root.get_attribute("data-pair") is None, "the pair cleared")
    requests = pages.requests_made(driver)
    assert requests and all(url.startswith(served) for url in requests), requests  # the app's own server only
    files = {url.split("?")[0].rsplit("/", 1)[1] for url in requests}
    assert files >= {"3Dmol-min.js", "structure.js", "structure3d.js", "views.css"}
    assert pages.console_errors(driver) == []
