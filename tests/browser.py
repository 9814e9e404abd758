"""The one headless Chromium of the browser tests (selenium + chromedriver): how it is started, its downloads
folder, the clean-console check, a wait and the time budgets judged on a quiet machine only.

A test folder takes the fixtures by importing them into its conftest.py (tests/app/conftest.py: a
module-scoped fixture gives each test module its own browser)::

    from tests.browser import clean_console, downloads, driver  # noqa: F401 - pytest fixtures

and a module that needs another browser (offline, another window) builds it with :func:`chromium`
(tests/views/test_views_browser.py, tests/app/test_app_js.py). A module serves its Dash/Flask app to the
browser with :func:`serving` (a werkzeug server on a loopback port for as long as a ``with`` block runs).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage")
APP_WINDOW = (1500, 2300)  # the dashboard's tests: every panel on one screen


def chromium(window: tuple[int, int] = APP_WINDOW, downloads: Path | None = None, offline: bool = False,
             network_log: bool = False, flags: tuple[str, ...] = ()):
    """A headless Chromium (skips the test when Chromium or chromedriver is missing).

    `downloads`: where downloads land (allowed without asking); `offline`: the network is cut (a request fails
    and logs an error); `network_log`: the performance log records every request (``Network.*`` events);
    `flags`: more command-line switches. The browser console is logged at every level."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(f"headless browser tests need {CHROMIUM} and {CHROMEDRIVER} "
                    "(apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--window-size={window[0]},{window[1]}", *flags):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", **({"performance": "ALL"} if network_log
                                                                      else {})})
    if downloads is not None:
        options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                                  "download.prompt_for_download": False})
    browser = webdriver.Chrome(service=DriverService(CHROMEDRIVER), options=options)
    browser.set_window_size(*window)
    if downloads is not None:
        browser.execute_cdp_cmd("Page.setDownloadBehavior",
                                {"behavior": "allow", "downloadPath": str(downloads)})
    if offline:
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                     "downloadThroughput": -1,
                                                                     "uploadThroughput": -1})
    return browser


@pytest.fixture(scope="module")
def downloads(tmp_path_factory):
    """The folder the module's browser downloads into."""
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def driver(downloads):
    """The module's browser: the dashboard's window, downloads into `downloads`."""
    browser = chromium(APP_WINDOW, downloads=downloads)
    yield browser
    browser.quit()


@contextlib.contextmanager
def serving(wsgi_app: Callable) -> Iterator[str]:
    """Serve `wsgi_app` on 127.0.0.1 at a free port while the ``with`` block runs.

    werkzeug's threaded server answers in a daemon thread (its request log at WARNING, so a test's output is
    not one line per request); the server is shut down when the block ends, also on an exception.

    Parameters
    ----------
    wsgi_app : Callable
        A WSGI application: a Dash app's ``app.server`` (Flask), or any WSGI callable.

    Yields
    ------
    str
        The server's URL, ``"http://127.0.0.1:<port>/"`` (with the trailing slash).

    Examples
    --------
    >>> import urllib.request
    >>> def hello(environ, start_response):
    ...     start_response("200 OK", [("Content-Type", "text/plain")])
    ...     return [b"hello"]
    >>> with serving(hello) as url:
    ...     with urllib.request.urlopen(url, timeout=10) as response:
    ...         print(url.startswith("http://127.0.0.1:"), url.endswith("/"), response.read())
    True True b'hello'
    """
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = make_server("127.0.0.1", 0, wsgi_app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


def console_errors(driver) -> list:
    """The SEVERE entries of the browser console since it was last read (reading empties it)."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


@pytest.fixture(autouse=True)
def clean_console(request):
    """Every browser test ends with the console log free of errors (uncaught exceptions, failed requests)."""
    yield
    if "driver" not in request.fixturenames:
        return
    errors = [entry for entry in console_errors(request.getfixturevalue("driver"))
              if "favicon" not in entry["message"]]
    if errors:
        pytest.fail("console errors:\n" + "\n".join(entry["message"][:3000] for entry in errors))


def wait_for(condition, timeout: float = 30.0, what: str = "condition"):
    """The first truthy value of `condition()` within `timeout` seconds (an exception counts as not yet);
    AssertionError naming `what` otherwise."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = condition()
            if last:
                return last
        except Exception as error:  # noqa: BLE001 - the page is still rendering
            last = error
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


LOCAL = ("file:", "data:", "blob:", "about:")  # what a page may load with the network off


def requests_elsewhere(driver, allowed: tuple[str, ...] = LOCAL) -> list[str]:
    """The URLs the page asked for since the log was last read (the DevTools performance log of a browser
    built with ``network_log=True`` and the page's own resource entries), but those starting with one of
    `allowed` (the local schemes; add the app's own origin for a served page)."""
    urls = [message["params"]["request"]["url"] for message in
            (json.loads(entry["message"])["message"] for entry in driver.get_log("performance"))
            if message["method"] == "Network.requestWillBeSent"]
    urls += driver.execute_script(
        "return performance.getEntriesByType('resource').map(function (e) { return e.name; })")
    return sorted({url for url in urls if not url.startswith(allowed)})


QUIET = 0.5  # load average per core under which a view's time budgets are judged


def within_budget(measured: float, budget: float, what: str) -> None:
    """Assert `measured` ≤ `budget` (milliseconds) on a quiet machine; on a busy one (load average above
    :data:`QUIET` per core) a time says nothing of the view, so an xfail records it instead."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    if measured > budget and load > QUIET:
        pytest.xfail(f"{what}: {measured:.0f} ms > {budget:.0f} ms at load average {load:.1f}× the cores")
    assert measured <= budget, f"{what}: {measured:.0f} ms > {budget:.0f} ms"
