"""`probe app` end to end, as a user starts it: the real command in its own process loads the model, says
where it serves, and answers the page and its layout over HTTP; Ctrl-C (SIGINT) stops it. (The Service split
once left the "serving" line reading a name the Service no longer had: every start crashed after loading.)"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, wait: float = 60.0) -> str:
    deadline = time.time() + wait
    while True:
        try:
            return urllib.request.urlopen(url, timeout=60).read().decode()
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def test_probe_app_starts_serves_and_stops():
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "probe.cli", "app", "--model", "zoo:induction",
                                "--port", str(port)], stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.time() + 240
        while time.time() < deadline:
            line = process.stderr.readline()
            if not line and process.poll() is not None:
                break
            lines.append(line)
            if "serving" in line:
                break
        said = "".join(lines)
        assert f"probe app: serving zoo:induction at http://127.0.0.1:{port}" in said, said
        page = _get(f"http://127.0.0.1:{port}/")  # the line comes just before the server listens
        layout = urllib.request.urlopen(f"http://127.0.0.1:{port}/_dash-layout", timeout=120).read().decode()
        assert "<title>probe</title>" in page and "zoo:induction" in layout
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode is not None
