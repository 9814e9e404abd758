"""Sizes and open times of the one-file report and the inline view for a 12 × 12 model (a random GPT-2 of 12
layers × 12 heads, width 48) at 128 and 1,024 tokens: file bytes, and in headless Chromium (file://, network
off) the time until the view is drawn and the time of one head step (a key press, drawn synchronously).

    python benchmarks/report_size.py [--tokens 128,1024] [--loads 3]

Timings depend on the machine and its load: the numbers in docs/views.md say where they were measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def open_times(path: Path, loads: int) -> tuple[float, float]:
    """(median ms from navigation start to the view drawn, median ms of a head step)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,800"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                "downloadThroughput": -1,
                                                                "uploadThroughput": -1})
    opened, steps = [], []
    try:
        for _ in range(loads):
            driver.get(path.resolve().as_uri())
            while not driver.execute_script(
                    "return document.querySelector('.probe-view[data-head]') !== null"):
                time.sleep(0.05)
            # ms since navigation start (upper bound)
            opened.append(driver.execute_script("return performance.now()"))
            steps.append(driver.execute_script("""
                const root = document.querySelector('.probe-view[data-head]'), t0 = performance.now();
                root.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true}));
                return performance.now() - t0;"""))
    finally:
        driver.quit()
    return statistics.median(opened), statistics.median(steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="128,1024")
    parser.add_argument("--loads", type=int, default=3)
    args = parser.parse_args()
    from probe import models
    from probe.views.report import write_report
    from probe.views.view import show
    from probe.zoo.tiny import save_tiny

    folder = Path(tempfile.mkdtemp())
    model_dir = save_tiny("gpt2", folder / "gpt2-12x12", n_layer=12, n_head=12, n_embd=48, n_positions=1024)
    loaded = models.load(str(model_dir))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("what | tokens | MiB | open ms | head step ms")
    for tokens in (int(t) for t in args.tokens.split(",")):
        report = write_report(loaded, folder / f"report-{tokens}.html", seq_len=tokens)
        opened, step = open_times(report, args.loads)
        print(f"report | {tokens} | {report.stat().st_size / 2**20:.2f} | {opened:.0f} | {step:.1f}")
        ids = [3 + i % (len(loaded.tokenizer) - 3) for i in range(tokens)]
        view = show(loaded, ids)
        page = view.save(folder / f"view-{tokens}.html")
        opened, step = open_times(page, args.loads)
        print(f"inline view | {tokens} | {page.stat().st_size / 2**20:.2f} | {opened:.0f} | {step:.1f} "
              f"(factor {view.factor}, {len(view.maps)} maps)")


if __name__ == "__main__":
    main()
