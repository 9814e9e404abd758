"""The paths a command is given, checked before any heavy import (no torch, no pandas): an output's extension,
folder and writability, and that an existing file there is ours (never overwrite a user's file); an input
file's existence and extension. One line naming the fix (a ProbeError) otherwise."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from probe.errors import ProbeError

# The first bytes of an .npz (a zip archive): an existing --out without them is not ours and is never
# overwritten. (Tables are checked by their readers: probe.heads.tables refuses a file that is not a probe
# table.)
_MAGIC = {".npz": (b"PK\x03\x04", b"PK\x05\x06")}


def output_path(text: str, allowed: tuple[str, ...], flag: str = "--out") -> Path:
    """Check an output path before any computing: its extension, that it is not a folder, that its folder
    exists and can be written, and that an existing binary file there is of the format we write (never
    overwrite another)."""
    path = Path(text).expanduser()
    if path.suffix.lower() not in allowed:
        raise ProbeError(f"{flag} {text}: the extension must be one of {', '.join(allowed)}")
    if path.is_dir():
        raise ProbeError(f"{flag} {text} is a folder: give a file name inside it, e.g. "
                         f"{path / ('result' + allowed[0])}")
    if path.parent.exists() and not path.parent.is_dir():
        raise ProbeError(f"{flag} {text}: {path.parent} is a file, not a folder; give a path inside a folder")
    if not path.parent.is_dir():
        raise ProbeError(f"{flag} {text}: the folder {path.parent} does not exist; create it first")
    _check_writable(path.parent, flag, text)
    magic = _MAGIC.get(path.suffix.lower())
    if magic and path.is_file() and path.stat().st_size > 0:
        with open(path, "rb") as handle:
            head = handle.read(4)
        if not head.startswith(magic):
            raise ProbeError(f"{flag} {text} exists and is not a {path.suffix} file (it would be "
                             "overwritten): choose another name or delete it")
    return path


def input_file(text: str, flag: str, what: str, allowed: tuple[str, ...] | None = None) -> Path:
    """Check an input file before any heavy import: it exists, is a file (a folder is named as one), and has
    one of the `allowed` extensions. `what` names what to give, e.g. "a table written by `probe label`"."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise ProbeError(f"{flag} {text} is a folder: give {what} inside it")
    if not path.is_file():
        raise ProbeError(f"{flag} {text}: no such file; give {what}")
    if allowed is not None and path.suffix.lower() not in allowed:
        raise ProbeError(f"{flag} {text}: the extension must be one of {', '.join(allowed)}")
    return path


def page_path(text: str, force: bool, flag: str = "--out") -> Path:
    """An .html output (:func:`output_path`) that may replace only a page probe wrote: a user's own HTML
    there is refused unless `force` (as the tables and contact outputs are)."""
    from probe.views.pages import is_probe_page  # light: no torch, no pandas

    path = output_path(text, (".html",), flag)
    if not force and path.is_file() and path.stat().st_size > 0 and not is_probe_page(path):
        raise ProbeError(f"{flag} {text} exists and is not a page probe wrote (it would be overwritten): "
                         "choose another name, or pass --force to overwrite it")
    return path


def owned_table(path: Path, force: bool, columns: tuple[str, ...], what: str, flag: str = "--out") -> Path:
    """An existing table at an output `path` that a command may replace only when it is its own kind of table
    (it has `columns`): anyone's file, or another command's table, is refused in one line unless `force`
    (`what` names the command's table, e.g. "probe profile table"). pandas is imported only when the file
    exists."""
    if force or not path.is_file() or path.stat().st_size == 0:
        return path
    from probe.heads.tables import read_table_file  # pandas: only when there is a file to read

    try:
        found = set(read_table_file(path).columns)
    except ProbeError:
        found = set()
    if not set(columns) <= found:
        raise ProbeError(f"{flag} {path} exists and is not a {what} (it would be overwritten): choose "
                         "another name, or pass --force to overwrite it")
    return path


def _check_writable(folder: Path, flag: str, text: str) -> None:
    """Create and remove a temporary file in `folder` (permission bits alone miss read-only mounts and
    root)."""
    try:
        handle, tmp = tempfile.mkstemp(dir=folder, prefix=".probe-write-check.")
    except OSError as error:
        raise ProbeError(f"{flag} {text}: cannot write in {folder} ({error.strerror or error}); "
                         "choose a writable folder") from None
    os.close(handle)
    os.unlink(tmp)


def writable_folder(text: str, flag: str) -> Path:
    """A folder the command will write into (created when missing, as the writer would): checked before any
    work — not a file, and a file can be created in it (or in the nearest folder that exists, when it is still
    to be made)."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise ProbeError(f"{flag} {text} is a file, not a folder; give a folder")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ProbeError(f"{flag} {text}: {existing} is a file, not a folder; give a folder")
    _check_writable(existing, flag, text)
    return path
