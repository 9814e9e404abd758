"""``python -m probe.runs.ray_watchdog SESSION_DIR DRIVER_PID``: end every process of a Ray session once its
driver is gone.

Started by :func:`probe.runs.ray_executor.start_ray` for a local Ray instance, with the reading end of a pipe
as stdin whose writing end only the driver holds. Reading blocks until the driver exits (normally or
SIGKILLed: the kernel closes its end either way); then every process of the session gets SIGTERM, and SIGKILL
one second later if it is still there.

Which processes belong to the session is decided by the process tree, not by command lines: Ray rewrites its
agents' command lines to bare titles (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) that do not name the
session. While the driver lives, the watchdog records every Ray process below the driver and all their
descendants (pid and start time, so a reused pid is never mistaken for one of them) every
:data:`POLL_SECONDS`; once the driver is gone the recorded processes that still run, their own descendants
(the raylet's children still point to it), the processes of the driver's process group whose title starts with
``ray::``, and any process whose command line names the session are ended. Nothing else of the driver's
process group or session is touched (a ``| tee`` beside the driver lives on).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from pathlib import Path

GRACE_SECONDS = 1.0
POLL_SECONDS = 0.25  # how often the driver's process tree is read while the driver lives


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, process group, start time in clock ticks) of `pid`, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name in (...) may hold spaces
    return int(fields[1]), int(fields[2]), int(fields[19])


def _processes() -> dict[int, tuple[int, int, int]]:
    """Every process but this one: pid -> (parent pid, process group, start time)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            stat = _stat(int(entry.name))
            if stat is not None:
                table[int(entry.name)] = stat
    return table


def descendants(roots: set[int], table: dict[int, tuple[int, int, int]] | None = None) -> dict[int, int]:
    """Every process below `roots` in the process tree (roots excluded): pid -> start time."""
    table = _processes() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found: dict[int, int] = {}
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found and child not in roots:
                found[child] = table[child][2]
                todo.append(child)
    return found


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


def _is_ray(pid: int, session_name: str) -> bool:
    """Whether `pid` is a process of Ray: its command line is a Ray title (``ray::...``) or names the
    session."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return command.startswith(b"ray::") or session_name.encode() in command


def _ray_titled(group: int, table: dict[int, tuple[int, int, int]]) -> set[int]:
    """Processes of process group `group` whose command line is a Ray title (``ray::...``)."""
    found = set()
    for pid, (_, pgid, _) in table.items():
        if pgid != group:
            continue
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::"):
                found.add(pid)
        except OSError:
            continue
    return found


def record(driver: int, session_name: str, recorded: dict[int, int]) -> None:
    """Add to `recorded` (pid -> start time) the Ray processes below `driver` and everything below those.

    Only Ray's own processes and their children are recorded: another child of the driver (a pipe, a helper
    program) is never a target.
    """
    table = _processes()
    below = descendants({driver}, table)
    ray = {pid: start for pid, start in below.items() if pid in recorded or _is_ray(pid, session_name)}
    recorded.update(ray)
    recorded.update(descendants(set(ray), table))


def targets(session_name: str, recorded: dict[int, int], group: int | None) -> set[int]:
    """What to end now: the recorded processes still alive (same start time), their descendants, the
    Ray-titled processes of the driver's process group and the processes naming the session."""
    table = _processes()
    alive = {pid for pid, start in recorded.items() if pid in table and table[pid][2] == start}
    found = alive | set(descendants(alive, table)) | set(session_processes(session_name))
    if group is not None:
        found |= _ray_titled(group, table)
    return found


def end_session(session_name: str, recorded: dict[int, int] | None = None, group: int | None = None) -> None:
    """SIGTERM every process of the session, then SIGKILL what is left after :data:`GRACE_SECONDS`."""
    recorded = dict(recorded or {})
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = targets(session_name, recorded, group)
        recorded.update(descendants(pids))  # children of what is being ended, before they are orphaned
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        if not pids:
            return
        deadline = time.monotonic() + GRACE_SECONDS
        while time.monotonic() < deadline and targets(session_name, recorded, group):
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    session_name = Path(argv[0]).name
    if not session_name.startswith("session_"):
        return 2
    driver = int(argv[1]) if len(argv) > 1 else None
    driver_stat = _stat(driver) if driver else None
    group = driver_stat[1] if driver_stat else None
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the terminal is for the driver
    recorded: dict[int, int] = {}
    stdin = sys.stdin.buffer
    try:
        while True:
            if driver is not None:
                record(driver, session_name, recorded)
            ready, _, _ = select.select([stdin], [], [], POLL_SECONDS)
            if ready and not os.read(stdin.fileno(), 4096):
                break  # EOF: the driver is gone (or closed the pipe in stop_ray)
    except OSError:
        pass
    end_session(session_name, recorded, group)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
