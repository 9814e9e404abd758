"""``python -m probe.runs.ray_watchdog SESSION_DIR``: end every process of a Ray session once its driver is gone.

Started by :func:`probe.runs.ray_executor.start_ray` for a local Ray instance, with the reading end of a pipe as
stdin whose writing end only the driver holds. Reading blocks until the driver exits (normally or SIGKILLed: the
kernel closes its end either way); then every process whose command line names the session (raylet, GCS, the
dashboard and runtime-env agents, workers) gets SIGTERM, and SIGKILL one second later if it is still there.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

GRACE_SECONDS = 1.0


def session_processes(session_name: str) -> list[int]:
    """Pids of the processes whose command line holds `session_name` (this process excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if session_name.encode() in command:
            found.append(int(entry.name))
    return found


def end_session(session_name: str) -> None:
    """SIGTERM every process of the session, then SIGKILL what is left after :data:`GRACE_SECONDS`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = session_processes(session_name)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        if not pids:
            return
        deadline = time.monotonic() + GRACE_SECONDS
        while time.monotonic() < deadline and session_processes(session_name):
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    session_name = Path(argv[0]).name
    if not session_name.startswith("session_"):
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the terminal is for the driver
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except OSError:
        pass
    end_session(session_name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
