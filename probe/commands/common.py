"""Argument helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import glob
import os
import tempfile
from pathlib import Path

from probe.errors import ProbeError
from probe.runs.journal import pid_alive


def add_model_options(parser: argparse.ArgumentParser, many: bool = False) -> None:
    """--model (hub id, local directory or zoo:NAME), --device, --dtype."""
    help_text = "hub id (gpt2), local directory (what save_pretrained wrote) or zoo:NAME"
    if many:
        parser.add_argument("--model", action="append", required=True, help=help_text + "; repeat for several")
    else:
        parser.add_argument("--model", required=True, help=help_text)
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"],
                        help="weights dtype (default: the checkpoint's)")


# The first bytes of an .npz (a zip archive): an existing --out without them is not ours and is never overwritten.
# (Tables are checked by their readers: probe.heads.tables refuses a file that is not a probe table.)
_MAGIC = {".npz": (b"PK\x03\x04", b"PK\x05\x06")}


def output_path(text: str, allowed: tuple[str, ...], flag: str = "--out") -> Path:
    """Check an output path before any computing: its extension, that it is not a folder, that its folder exists and
    can be written, and that an existing binary file there is of the format we write (never overwrite another)."""
    path = Path(text).expanduser()
    if path.suffix.lower() not in allowed:
        raise ProbeError(f"{flag} {text}: the extension must be one of {', '.join(allowed)}")
    if path.is_dir():
        raise ProbeError(f"{flag} {text} is a folder: give a file name inside it, e.g. {path / ('result' + allowed[0])}")
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
            raise ProbeError(f"{flag} {text} exists and is not a {path.suffix} file (it would be overwritten): "
                             "choose another name or delete it")
    return path


def _check_writable(folder: Path, flag: str, text: str) -> None:
    """Create and remove a temporary file in `folder` (permission bits alone miss read-only mounts and root)."""
    try:
        handle, tmp = tempfile.mkstemp(dir=folder, prefix=".probe-write-check.")
    except OSError as error:
        raise ProbeError(f"{flag} {text}: cannot write in {folder} ({error.strerror or error}); "
                         "choose a writable folder") from None
    os.close(handle)
    os.unlink(tmp)


def write_atomically(path: Path, write) -> None:
    """Call write(tmp_path) on a temporary file beside `path`, fsync it, then rename it over `path` (never a half
    file). The temporary file's name carries our pid, so a later call removes those left by a killed process."""
    _remove_stale_temporaries(path)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=path.suffix)
    os.close(handle)
    try:
        write(Path(tmp))
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes the file 0600; give it the mode a plain open() would
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _remove_stale_temporaries(path: Path) -> None:
    """Delete `.{name}.{pid}.*` files beside `path` whose process no longer runs (a SIGKILL mid-write)."""
    prefix = f".{path.name}."
    for candidate in path.parent.glob(f"{glob.escape(prefix)}*"):
        pid = candidate.name[len(prefix):].split(".", 1)[0]
        if pid.isdigit() and candidate.is_file() and not pid_alive(int(pid)):
            candidate.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
