"""The 3D structure view in headless Chromium (WebGL through SwiftShader), offline from file://: 3Dmol.js
draws the fold (non-blank pixels that change with the head), the planted attention edges are drawn and a click
on one in 3D selects its pair (the "probe-pair" event a host listens to), two residue clicks select a pair, a
host's selectPair highlights one, both themes, the console is clean and no request leaves the page (the
DevTools request log and the page's own resource entries). The protein report opens with its 3D view.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from probe.proteins.structure import contact_map, read_structure
from tests.views.test_views_browser import CHROMEDRIVER, CHROMIUM, FLAGS

ROOT = ".probe-structure"
PIXELS = """
    // the viewer's pixels, read right after a render (same task): non-background count and a 24 x 24 grey
    // fingerprint, plus the background colour at a corner
    var view = arguments[0].probeStructure, gl = view.viewer.getCanvas();
    view.viewer.render();
    var side = 24, copy = document.createElement("canvas");
    copy.width = gl.width; copy.height = gl.height;
    var context = copy.getContext("2d");
    context.drawImage(gl, 0, 0);
    var pixels = context.getImageData(0, 0, copy.width, copy.height).data;
    var corner = [pixels[0], pixels[1], pixels[2]], count = 0;
    for (var i = 0; i < pixels.length; i += 4) {
        if (Math.abs(pixels[i] - corner[0]) + Math.abs(pixels[i + 1] - corner[1]) +
            Math.abs(pixels[i + 2] - corner[2]) > 60) { count += 1; }
    }
    var small = document.createElement("canvas");
    small.width = side; small.height = side;
    small.getContext("2d").drawImage(copy, 0, 0, side, side);
    var tiny = small.getContext("2d").getImageData(0, 0, side, side).data, print = [];
    for (var k = 0; k < tiny.length; k += 4) { print.push((tiny[k] + tiny[k + 1] + tiny[k + 2]) / 3); }
    return {count: count, total: pixels.length / 4, corner: corner, print: print};
"""


@pytest.fixture(scope="module")
def chromium():
    """Headless Chromium with the network emulated offline and the DevTools request log on."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip(f"headless browser tests need {CHROMIUM} and {CHROMEDRIVER}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    browser = webdriver.Chrome(service=DriverService(CHROMEDRIVER), options=options)
    browser.set_window_size(1280, 900)
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                 "downloadThroughput": -1,
                                                                 "uploadThroughput": -1})
    yield browser
    browser.quit()


def _planted_view(tmp_path: Path, theme: str = "light") -> Path:
    """ubiquitin (1UBI) with two planted heads: L0H0 with pairs (0, 70) 0.9, (10, 40) 0.7, (20, 60) 0.5 and
    L1H2 with (5, 50) 0.95, (30, 65) 0.6, (44, 68) 0.3, on a 0.005 floor; predicted contacts 0.8 on the true
    ones."""
    from probe.views.structure_view import StructureView

    structure = read_structure(Path(__file__).resolve().parents[1] / "data" / "pdb1ubi.pdb")
    length = len(structure)

    def head(pairs: dict) -> np.ndarray:
        alpha = np.full((length, length), 0.005, dtype=np.float32)
        for (i, j), weight in pairs.items():
            alpha[i, j] = weight
        return alpha

    alpha = {(0, 0): head({(0, 70): 0.9, (10, 40): 0.7, (20, 60): 0.5}),
             (1, 2): head({(5, 50): 0.95, (30, 65): 0.6, (44, 68): 0.3})}
    true_map = contact_map(structure)
    predicted = np.where(true_map == 1, 0.8, 0.1).astype(np.float32)
    view = StructureView(model="planted", structure=structure, sequence=structure.sequence, alpha=alpha,
                         token_offset=1, true_map=true_map, contacts=predicted, selected=(0, 0), theme=theme)
    return view.save(tmp_path / f"planted-{theme}.html")


def _open(driver, path: Path) -> None:
    """Open `path` from file:// (network off), wait for the 3D view; then no request and a clean console."""
    driver.get_log("performance")
    driver.get_log("browser")
    driver.get(path.resolve().as_uri())
    deadline = time.time() + 60
    while time.time() < deadline and not driver.execute_script(
            f"return document.querySelector('{ROOT}[data-ready]') !== null"):
        time.sleep(0.2)
    assert driver.execute_script(f"return document.querySelector('{ROOT}[data-ready]') !== null"), "not drawn"
    _no_network_and_clean_console(driver)


def _no_network_and_clean_console(driver) -> None:
    requests = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            url = message["params"]["request"]["url"]
            if not url.startswith(("file:", "data:", "blob:", "about:")):
                requests.append(url)
    assert requests == [], f"network requests: {requests}"
    resources = driver.execute_script(
        "return performance.getEntriesByType('resource').map(function (e) { return e.name; })")
    assert [name for name in resources if not name.startswith(("file:", "data:", "blob:"))] == []
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == [], f"console errors: {errors}"


def _pixels(driver, root) -> dict:
    return driver.execute_script(PIXELS, root)


def _click_at(driver, root, point) -> None:
    """A real mouse click on the viewer's canvas at the screen position of a model point (x, y, z)."""
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = root.find_element("css selector", ".ps-viewer canvas")
    screen = driver.execute_script(
        "var v = arguments[0].probeStructure.viewer, p = v.modelToScreen({x: arguments[1], y: arguments[2], "
        "z: arguments[3]}); var box = arguments[0].querySelector('.ps-viewer canvas')"
        ".getBoundingClientRect(); return [p.x - box.left - window.pageXOffset, "
        "p.y - box.top - window.pageYOffset, box.width, box.height];", root, *point)  # page -> canvas
    x, y, width, height = screen
    ActionChains(driver).move_to_element_with_offset(canvas, int(x - width / 2), int(y - height / 2)) \
        .click().perform()


def _pair_events(driver, root) -> list:
    return driver.execute_script("return arguments[0].pairEvents || []", root)


@pytest.mark.browser
def test_structure_view_draws_picks_and_switches_themes(chromium, tmp_path):
    driver = chromium
    _open(driver, _planted_view(tmp_path))
    root = driver.find_element("css selector", ROOT)
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", root)
    driver.execute_script("""var root = arguments[0]; root.pairEvents = [];
        root.addEventListener('probe-pair', function (e) { root.pairEvents.push(e.detail); });""", root)
    assert root.get_attribute("data-head") == "0" and root.get_attribute("data-edges") == "3"
    first = _pixels(driver, root)
    assert first["corner"] == [255, 255, 255]  # the light theme's white background
    assert first["count"] > 0.03 * first["total"]  # the fold and the edges are drawn
    # a negative control: with every edge off the same head draws fewer pixels
    driver.execute_script("arguments[0].probeStructure.toggle('attention', false)", root)
    assert _pixels(driver, root)["count"] < first["count"] and root.get_attribute("data-edges") == "0"
    driver.execute_script("arguments[0].probeStructure.toggle('attention', true)", root)
    # the next head (→ key in the view): other edges, other residue colours, other pixels
    from selenium.webdriver.common.keys import Keys

    root.find_element("css selector", ".ps-title").click()
    root.send_keys(Keys.ARROW_RIGHT)
    assert (root.get_attribute("data-layer"), root.get_attribute("data-head")) == ("1", "2")
    second = _pixels(driver, root)
    changed = np.abs(np.array(first["print"]) - np.array(second["print"])).max()
    assert second["count"] > 0.03 * second["total"] and changed > 20
    assert "L1H2 · 3 attention edges" in root.find_element("css selector", ".ps-caption").text

    # a pick in 3D: click L1H2's strongest edge (5 → 50, 0.95 · 0.9 Å thick) a third of the way along, in
    # trace style (its middle lies behind the chain here: that click focuses residue 43 instead)
    driver.execute_script("arguments[0].probeStructure.setStyle('trace')", root)
    ca = driver.execute_script("return arguments[0].probeStructure.data.ca", root)
    _click_at(driver, root, np.array(ca[5]) * 0.7 + np.array(ca[50]) * 0.3)
    assert root.get_attribute("data-pair") == "5,50"
    event = _pair_events(driver, root)[-1]
    assert (event["i"], event["j"], event["layer"], event["head"], event["source"]) == (5, 50, 1, 2, "3d")
    assert event["labels"] == ["K6", "E51"] and event["tokens"] == [6, 51]  # 1UBI's numbers; <cls> first
    assert "pair K6 → E51: α 0.950" in root.find_element("css selector", ".ps-caption").text

    # two residue clicks (on their Cα in the trace): the first is focused, the second makes the pair
    driver.execute_script("arguments[0].probeStructure.selectPair(null)", root)
    driver.execute_script("arguments[0].probeStructure.toggle('attention', false)", root)
    _click_at(driver, root, ca[0])
    assert root.get_attribute("data-focus") == "0"
    _click_at(driver, root, ca[75])
    assert root.get_attribute("data-pair") == "0,75" and _pair_events(driver, root)[-1]["i"] == 0
    # a host's 2D click: selectPair highlights without echoing an event back
    events = len(_pair_events(driver, root))
    before = _pixels(driver, root)
    driver.execute_script("arguments[0].probeStructure.selectPair(30, 65)", root)
    assert root.get_attribute("data-pair") == "30,65" and len(_pair_events(driver, root)) == events
    after = _pixels(driver, root)
    assert np.abs(np.array(after["print"]) - np.array(before["print"])).max() > 20

    # the dark theme: black background, light text; and back
    root.find_element("css selector", ".ps-theme").click()
    assert root.get_attribute("data-theme") == "dark" and _pixels(driver, root)["corner"] == [0, 0, 0]
    assert driver.execute_script("return getComputedStyle(arguments[0]).color", root) == "rgb(233, 236, 239)"
    root.find_element("css selector", ".ps-theme").click()
    assert root.get_attribute("data-theme") == "light" and _pixels(driver, root)["corner"] == [255, 255, 255]
    _no_network_and_clean_console(driver)


@pytest.mark.browser
def test_structure_view_opens_dark_with_contacts(chromium, tmp_path):
    driver = chromium
    _open(driver, _planted_view(tmp_path, theme="dark"))
    root = driver.find_element("css selector", ROOT)
    assert root.get_attribute("data-theme") == "dark" and _pixels(driver, root)["corner"] == [0, 0, 0]
    driver.execute_script("arguments[0].probeStructure.toggle('attention', false)", root)
    bare = _pixels(driver, root)["count"]
    driver.execute_script("arguments[0].probeStructure.toggle('true', true)", root)
    with_true = _pixels(driver, root)["count"]
    driver.execute_script("arguments[0].probeStructure.toggle('predicted', true)", root)
    assert bare < with_true < _pixels(driver, root)["count"]
    _no_network_and_clean_console(driver)


@pytest.mark.browser
def test_protein_report_opens_offline_with_the_3d_view(chromium, tiny_dir, ubiquitin_structure, tmp_path):
    from probe import models
    from probe.views.report import write_report

    driver = chromium

    loaded = models.load(str(tiny_dir("esm")))
    report = write_report(loaded, tmp_path / "protein.html", structure=ubiquitin_structure)
    _open(driver, report)
    assert driver.execute_script("return document.querySelectorAll('.probe-view[data-head]').length") == 1
    root = driver.find_element("css selector", "#probe-report-structure")
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", root)
    first = _pixels(driver, root)
    assert first["count"] > 0.03 * first["total"]
    options = root.find_elements("css selector", ".ps-head option")
    assert len(options) == loaded.n_layers * loaded.n_heads
    driver.execute_script("arguments[0].probeStructure.focus(10)", root)  # α from residue 11: a random head
    focused = _pixels(driver, root)
    assert np.abs(np.array(focused["print"]) - np.array(first["print"])).max() > 10
    _no_network_and_clean_console(driver)
