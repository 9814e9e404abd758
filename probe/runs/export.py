"""Writing a plotly figure as a self-contained HTML file and a PNG (kaleido, or headless Chromium without
it)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from probe.errors import ProbeError

PLOT_EXTENSIONS = (".html", ".png")
KALEIDO_TRIES = 3  # renders tried when kaleido loses its page-load race (see kaleido_png)
KALEIDO_RACE = "kaleido_scopes is not defined"


def kaleido_png(figure, path, scale: float = 2) -> None:
    """``figure.write_image`` as PNG through kaleido, tried again (up to ``KALEIDO_TRIES`` in all) when
    kaleido lost its own page-load race.

    kaleido 1.x (1.4.0 and 1.5.1 read) navigates its tab to the page holding ``kaleido_scopes.js`` and then
    takes the first JavaScript context Chromium reports; on a busy machine that can be the blank page's,
    before the navigation committed, and the render fails with "ReferenceError: kaleido_scopes is not
    defined". Measured here with both cores loaded: 4 of 30 single renders failed so; with three tries, 30 of
    30 were written (34 renders). Each try opens a fresh tab; any other error is raised at once.
    """
    for attempt in range(1, KALEIDO_TRIES + 1):
        try:
            figure.write_image(str(path), format="png", scale=scale)
            return
        except Exception as error:  # noqa: BLE001 - kaleido's JavascriptError is not part of its public API
            if KALEIDO_RACE not in str(error) or attempt == KALEIDO_TRIES:
                raise


def save_figure(figure, path: str | Path) -> list[Path]:
    """Write FILE.html (plotly.js inline: opens offline) and FILE.png. The PNG is rendered by kaleido (which
    drives a local Chrome/Chromium); without kaleido, by headless Chromium screenshotting the HTML. Returns
    the files written; ProbeError when the PNG cannot be made (the HTML is written first all the same)."""
    path = Path(path).expanduser()
    if path.suffix.lower() not in PLOT_EXTENSIONS:
        raise ProbeError(f"--plot {path}: the extension must be .html or .png (both files are written)")
    if not path.parent.exists():
        raise ProbeError(f"--plot {path}: the folder {path.parent} does not exist; create it first")
    html, png = path.with_suffix(".html"), path.with_suffix(".png")
    figure.write_html(html, include_plotlyjs=True)
    reason = "kaleido is not installed"
    try:
        import kaleido  # noqa: F401 - optional (the ray extra): only whether a PNG can be written
    except ImportError:
        pass
    else:
        try:
            kaleido_png(figure, png)
            return [html, png]
        except Exception as error:  # noqa: BLE001 - kaleido reports a missing browser in several ways
            reason = ("kaleido failed "
                      f"({str(error).strip().splitlines()[0] if str(error).strip() else error!r})")
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        raise ProbeError(f"wrote {html} but no PNG: {reason} and no Chromium is on PATH (pip install "
                         "kaleido, and install chromium)")
    with tempfile.TemporaryDirectory() as scratch:
        static = Path(scratch) / "figure.html"  # no mode bar in the picture
        figure.write_html(static, include_plotlyjs=True, config={"staticPlot": True})
        _screenshot(browser, static, png, int(figure.layout.width or 900), int(figure.layout.height or 600))
    return [html, png]


def _screenshot(browser: str, html: Path, png: Path, width: int, height: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   f"--user-data-dir={profile}", f"--window-size={width},{height}",
                   "--virtual-time-budget=5000", f"--screenshot={png}", html.resolve().as_uri()]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not png.exists():
        raise ProbeError(f"headless Chromium could not render {png}: {done.stderr.strip().splitlines()[-1:]}")


__all__ = ["KALEIDO_RACE", "KALEIDO_TRIES", "PLOT_EXTENSIONS", "kaleido_png", "save_figure"]
