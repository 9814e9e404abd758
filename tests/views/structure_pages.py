"""Shared pieces of the 3D structure view's browser tests (tests/views/test_structure_browser.py and
tests/app/test_structure3d_browser.py): headless Chromium, a planted view of ubiquitin, the viewer's pixels, a
real click at a model point, the requests a page made."""

from __future__ import annotations

import time
from functools import cache
from pathlib import Path

import numpy as np

from probe.proteins.structure import contact_map, read_structure
from tests.browser import chromium, console_errors, requests_elsewhere

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


def start_chromium(offline: bool = True):
    """Headless Chromium (1280 × 900, tests/browser.py), the DevTools request log on and, when `offline`, the
    network off."""
    browser = chromium(window=(1280, 900), offline=offline, network_log=True)
    browser.execute_cdp_cmd("Network.enable", {})
    return browser


@cache
def ubiquitin():
    """tests/data/pdb1ubi.pdb read once (DSSP runs on every read)."""
    return read_structure(Path(__file__).resolve().parents[1] / "data" / "pdb1ubi.pdb")


def planted_view(tmp_path: Path, theme: str = "light") -> Path:
    """:func:`planted` saved as a page of its own (tmp_path / planted-THEME.html)."""
    return planted(theme).save(tmp_path / f"planted-{theme}.html")


def planted(theme: str = "light"):
    """ubiquitin (1UBI) with two planted heads: L0H0 with pairs (0, 70) 0.9, (10, 40) 0.7, (20, 60) 0.5 and
    L1H2 with (5, 50) 0.95, (30, 65) 0.6, (44, 68) 0.3, on a 0.005 floor; predicted contacts 0.8 on the true
    ones."""
    from probe.views.structure_view import StructureView

    structure = ubiquitin()
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
    return StructureView(model="planted", structure=structure, sequence=structure.sequence, alpha=alpha,
                         token_offset=1, true_map=true_map, contacts=predicted, selected=(0, 0), theme=theme)


def open_page(driver, path: Path) -> None:
    """Open `path` from file:// (network off), wait for the 3D view; then no request and a clean console."""
    driver.get_log("performance")
    driver.get_log("browser")
    driver.get(path.resolve().as_uri())
    deadline = time.time() + 60
    while time.time() < deadline and not driver.execute_script(
            f"return document.querySelector('{ROOT}[data-ready]') !== null"):
        time.sleep(0.2)
    assert driver.execute_script(f"return document.querySelector('{ROOT}[data-ready]') !== null"), "not drawn"
    no_network_and_clean_console(driver)


def requests_made(driver) -> list[str]:
    """The URLs the page asked for since the last call (file:, data:, blob: and about: left out)."""
    return requests_elsewhere(driver)


def no_network_and_clean_console(driver) -> None:
    requests = requests_made(driver)
    assert requests == [], f"network requests: {requests}"
    errors = console_errors(driver)
    assert errors == [], f"console errors: {errors}"


def pixels(driver, root) -> dict:
    return driver.execute_script(PIXELS, root)


def click_at(driver, root, point) -> None:
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


def pair_events(driver, root) -> list:
    return driver.execute_script("return arguments[0].pairEvents || []", root)
