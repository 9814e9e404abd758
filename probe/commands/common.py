"""Argument helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from probe.errors import ProbeError


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


def output_path(text: str, allowed: tuple[str, ...], flag: str = "--out") -> Path:
    """Check an output path's extension and that its folder exists."""
    path = Path(text).expanduser()
    if path.suffix.lower() not in allowed:
        raise ProbeError(f"{flag} {text}: the extension must be one of {', '.join(allowed)}")
    if not path.parent.exists():
        raise ProbeError(f"{flag} {text}: the folder {path.parent} does not exist; create it first")
    return path


def write_atomically(path: Path, write) -> None:
    """Call write(tmp_path) on a temporary file beside `path`, then rename it over `path` (never a half file)."""
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(handle)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
