"""What a model spec names, checked without loading anything and without torch: ``zoo:NAME`` (a bundled model
organism's directory), a local directory written by ``save_pretrained`` (with config.json), or a hub id. The
commands call :func:`locate` on every ``--model`` before their heavy imports, so a mistyped path is answered
at once."""

from __future__ import annotations

import re
from pathlib import Path

from probe import zoo
from probe.errors import ProbeError

ZOO_PREFIX = "zoo:"


def resolve(spec: str) -> str:
    """A zoo:NAME spec -> the shipped directory; anything else is returned unchanged."""
    if spec.startswith(ZOO_PREFIX):
        return str(zoo.path(spec[len(ZOO_PREFIX):]))
    return spec


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def looks_like_path(spec: str) -> bool:
    """Not shaped like a hub id ("gpt2", "facebook/esm2_t6_8M_UR50D"): treat it as a directory."""
    return not HUB_ID.match(spec)


def locate(spec: str) -> str:
    """Where `spec` points, checked without loading anything: a zoo:NAME or a local directory (with
    config.json) -> its path; a hub id -> itself. One-line ProbeError for a missing directory or zoo name
    (commands call this for every --model before computing anything)."""
    source = resolve(spec)
    local = Path(source).expanduser()
    try:
        local.exists()
    except OSError as error:  # a name too long for the file system, say
        raise ProbeError(f"model {spec[:60]}{'...' if len(spec) > 60 else ''}: not a usable path "
                         f"({error.strerror or error})") from None
    if local.exists():
        if not local.is_dir() or not (local / "config.json").exists():
            raise ProbeError(f"{source} is not a model directory (no config.json); pass what save_pretrained "
                             "wrote")
        return str(local)
    if looks_like_path(spec):
        raise ProbeError(f"model directory {spec} does not exist; check the path or pass a hub id such as "
                         "gpt2")
    return spec


__all__ = ["HUB_ID", "ZOO_PREFIX", "locate", "looks_like_path", "resolve"]
