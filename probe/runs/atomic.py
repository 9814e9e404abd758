"""The one way the package replaces a file: write a temporary file beside it, fsync it, give it the mode a
plain ``open()`` would, rename it over the target, fsync the folder.

A reader therefore sees the old file or the new one, never half of one, and a SIGKILL at any moment leaves at
most a temporary file named ``.{name}.{pid}.{random}{suffix}``; the next write beside the same target removes
those whose process is gone (never one of a writer still at work). Every writer of the package goes through
:func:`write_atomically`: output tables, contact maps, captures, ``OUT.errors.csv`` and the journal's unit
files.

Writers of one output serialise through :func:`exclusive` (an advisory ``fcntl.flock`` on a lock file): the
runner re-reads the output, merges its rows and replaces the file while holding it, so two runs into one
``--out`` keep each other's rows.
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no advisory locks; writers are then not serialised
    fcntl = None


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs (a temporary file's writer, say)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fsync_directory(directory: Path) -> None:
    """Persist a folder's entries (a rename in it); a no-op where the platform cannot open folders."""
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def remove_stale_temporaries(path: Path) -> None:
    """Delete `.{name}.{pid}.*` files beside `path` whose process no longer runs (a SIGKILL mid-write)."""
    prefix = f".{path.name}."
    for candidate in path.parent.glob(f"{glob.escape(prefix)}*"):
        pid = candidate.name[len(prefix):].split(".", 1)[0]
        if pid.isdigit() and candidate.is_file() and not pid_alive(int(pid)):
            candidate.unlink(missing_ok=True)


def _writer_pid(path: Path) -> int | None:
    """The pid in a temporary file's name `.{name}.{pid}.{random}{suffix}` (None for any other name)."""
    if not path.name.startswith("."):
        return None
    parts = path.name[1:].split(".")
    numbers = [part for part in parts[1:-1] if part.isdigit()]
    return int(numbers[0]) if numbers else None


def is_temporary(path: Path) -> bool:
    """Whether `path` is a temporary file of :func:`write_atomically` (a hidden name carrying a pid)."""
    return _writer_pid(path) is not None


def remove_dead_temporaries(folder: Path) -> None:
    """Delete every temporary file in `folder` whose writer is gone (a journal's parts folder, at start)."""
    for candidate in folder.iterdir():
        pid = _writer_pid(candidate)
        if pid is not None and candidate.is_file() and not pid_alive(pid):
            candidate.unlink(missing_ok=True)


def write_atomically(path: str | os.PathLike, write: Callable[[Path], object]) -> None:
    """Replace `path` by what ``write(tmp)`` writes to a temporary file beside it, atomically.

    Parameters
    ----------
    path
        The file to create or replace; its folder must exist.
    write
        Called once with the temporary file's path (same folder, same suffix); it writes the whole content
        there.

    The temporary file is fsynced, given mode ``0o666 & ~umask`` (``mkstemp`` makes it 0600), renamed over
    `path`, and the folder is fsynced. On any error the temporary file is removed and the error propagates;
    `path` is left as it was.
    """
    path = Path(path)
    remove_stale_temporaries(path)
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.",
                                    suffix=path.suffix)
    os.close(handle)
    tmp = Path(name)
    try:
        write(tmp)
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_directory(path.parent)


@contextlib.contextmanager
def exclusive(lock: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive advisory lock on the file `lock` for the block, waiting while another process (or
    another open of it in this process) holds it.

    The file is created (with its folder) when missing, with the mode a plain ``open()`` gives, and is left
    in place: removing a lock file would let a waiter and a newcomer lock two different files. The lock goes
    with the process, so a SIGKILLed holder never blocks the next writer.
    """
    lock = Path(lock)
    lock.parent.mkdir(parents=True, exist_ok=True)
    handle = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # releases the lock


__all__ = ["exclusive", "fsync_directory", "is_temporary", "pid_alive", "remove_dead_temporaries",
           "remove_stale_temporaries", "write_atomically"]
