"""`probe app` end to end, as a user starts it: the real command in its own process loads the model, says
where it serves, and answers the page and its layout over HTTP; Ctrl-C (SIGINT) stops it. (The Service split
once left the "serving" line reading a name the Service no longer had: every start crashed after loading.)"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.error
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


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _serving_line(process: subprocess.Popen) -> str:
    lines = []
    deadline = time.time() + 240
    while time.time() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            break
        lines.append(line)
        if "serving" in line:
            return line
    raise AssertionError("".join(lines))


def _answer(port: int, path: str, cookie: str | None = None) -> tuple[int, dict, bytes]:
    """(status, headers, body) of one GET, redirects not followed."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("GET", path, headers={"Cookie": cookie} if cookie else {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_beyond_loopback_every_request_needs_the_printed_token(monkeypatch):
    """Issue 55 item 6: `probe app --host 0.0.0.0` prints a URL with a token; without it every request is a
    bare 403 (no page, no model name), the printed URL works and leaves a cookie (HttpOnly, SameSite=Strict)
    with which the page, its layout and its assets answer. Requests go to 127.0.0.1 only."""
    import http.cookiejar
    import re

    monkeypatch.delenv("PROBE_APP_TOKEN", raising=False)
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "probe.cli", "app", "--model", "zoo:induction",
                                "--host", "0.0.0.0", "--port", str(port)], stderr=subprocess.PIPE, text=True)
    try:
        line = _serving_line(process)
        found = re.search(rf"at http://0\.0\.0\.0:{port}/\?token=([A-Za-z0-9_~.-]{{32,}}) \(Ctrl-C", line)
        assert found, line
        token = found.group(1)
        # a browser's way first (it waits until the server listens): the printed URL, its redirect and the
        # cookie, then the layout
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        deadline = time.time() + 60
        while True:
            try:
                assert opener.open(f"http://127.0.0.1:{port}/?token={token}", timeout=120).status == 200
                break
            except urllib.error.URLError as error:
                if isinstance(error, urllib.error.HTTPError) or time.time() > deadline:
                    raise
                time.sleep(0.2)
        assert opener.open(f"http://127.0.0.1:{port}/_dash-layout", timeout=120).status == 200
        for path in ("/", "/_dash-layout", "/_dash-dependencies", "/assets/style.css",
                     "/?token=wrong" + token, f"/?token={token[:-1]}"):
            status, headers, body = _answer(port, path)
            assert (status, body) == (403, b""), (path, status, body[:200])
        _, _, body = _answer(port, "/_dash-layout", cookie="probe-token-x=" + token)  # another cookie's name
        assert body == b""
        status, headers, _ = _answer(port, f"/?token={token}&model=zoo:induction")
        assert status == 302 and headers["location"] == "/?model=zoo%3Ainduction"  # the token leaves the URL
        cookie = headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and token in cookie, cookie
        pair = cookie.split(";")[0]
        status, _, page = _answer(port, "/", cookie=pair)
        assert status == 200 and b"<title>probe</title>" in page
        status, _, layout = _answer(port, "/_dash-layout", cookie=pair)
        assert status == 200 and b"zoo:induction" in layout
    finally:
        _stop(process)
