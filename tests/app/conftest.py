"""The dashboard's browser tests: one way to start Chromium (tests/browser.py). Each module gets its own
browser (module scope), its downloads folder and the clean-console check after every test that drives it."""

from tests.browser import clean_console, downloads, driver  # noqa: F401 - pytest fixtures
