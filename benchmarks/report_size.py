"""Sizes and open times of the one-file report and the inline view for a 12 × 12 model (a random GPT-2 of 12
layers × 12 heads, width 48) at 128 and 1,024 tokens: file bytes, and in headless Chromium (file://, network
off) the time until the view is drawn and the time of one head step (a key press, drawn synchronously). With
--proteins, the protein report of a random 12 × 12 ESM-2 (width 48) with its 3D structure view on ubiquitin
(1UBI, 76 residues) and lysozyme (1AKI, 129): size, the time until the 3D view is drawn, one 3D head step.

    python benchmarks/report_size.py [--tokens 128,1024] [--loads 3] [--proteins]

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


def structure_times(path: Path, loads: int) -> tuple[float, float]:
    """(median ms from navigation start to the 3D view drawn, median ms of a 3D head step: → in the view)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,800"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_script_timeout(300)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                "downloadThroughput": -1,
                                                                "uploadThroughput": -1})
    opened, steps = [], []
    try:
        for _ in range(loads):
            driver.get(path.resolve().as_uri())
            while not driver.execute_script("return document.querySelector('.probe-structure[data-ready]')"):
                time.sleep(0.05)
            opened.append(driver.execute_script("return performance.now()"))
            steps.append(driver.execute_script("""
                const root = document.querySelector('.probe-structure[data-ready]'), t0 = performance.now();
                root.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true}));
                return performance.now() - t0;"""))
    finally:
        driver.quit()
    return statistics.median(opened), statistics.median(steps)


def proteins(folder: Path, loads: int) -> None:
    """The protein report with its 3D view, for a random 12 × 12 ESM-2 on 1UBI and 1AKI."""
    from probe import models
    from probe.views.report import write_report
    from probe.zoo.tiny import save_tiny

    data = Path(__file__).resolve().parents[1] / "tests" / "data"
    model_dir = save_tiny("esm", folder / "esm-12x12", num_hidden_layers=12, num_attention_heads=12,
                          hidden_size=48, intermediate_size=96)
    loaded = models.load(str(model_dir))
    print("protein report | residues | MiB | 3D heads | 3D open ms | 3D head step ms")
    for name in ("pdb1ubi.pdb", "1aki.pdb"):
        report = write_report(loaded, folder / f"protein-{name}.html", structure=str(data / name))
        page = report.read_text(encoding="utf-8")
        heads = page.split('id="probe-report-structure-data">', 1)[1].split('"heads":', 1)[1]
        count = heads.split("]]", 1)[0].count("[") - 1  # [[0,0],[0,1],...]]: one bracket per head, one around
        residues = page.split('id="probe-report-structure-data">', 1)[1].split('"n":', 1)[1].split(",", 1)[0]
        opened, step = structure_times(report, loads)
        print(f"{name} | {residues} | {report.stat().st_size / 2**20:.2f} | {count} | {opened:.0f} | "
              f"{step:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="128,1024")
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--proteins", action="store_true", help="only the protein report with its 3D view")
    args = parser.parse_args()
    if args.proteins:
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        proteins(Path(tempfile.mkdtemp()), args.loads)
        return
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
